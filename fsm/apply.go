package fsm

import (
	"fmt"
	"slices"
	"strings"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
)

// writer applies one request inside one write transaction. Every change
// and the events that record it are committed together, or not at all.
// Stored objects are never changed in place: a change inserts a copy.
type writer struct {
	txn *memdb.Txn
	// reads answers the writer's First lookups (first, and the helpers
	// that take a lookup): in a batch, the transaction's own reads of the
	// indexes it changed would cost each insert a copy of its whole path
	// (see idReads). Iterations read txn.
	reads *idReads
	index uint64
	// meta is the store's counters as this entry changes them; the
	// transaction writes them back at its end.
	meta *metaRow
	// mutated is set by the first change the entry makes, so that a batch
	// knows whether a refused entry left anything behind.
	mutated bool
	// notified counts the notifications the entry has written; it numbers
	// them.
	notified int
	// resp, when set, is the entry's answer in place of nil.
	resp any
}

func (w *writer) insert(table string, obj any) error {
	w.mutated = true
	if err := w.txn.Insert(table, obj); err != nil {
		// memdb may have changed some of the table's indexes before it
		// failed.
		w.reads.readDirect(table)
		return err
	}
	w.reads.wrote(table, obj, false)
	return nil
}

func (w *writer) delete(table string, obj any) error {
	w.mutated = true
	if err := w.txn.Delete(table, obj); err != nil {
		w.reads.readDirect(table)
		return err
	}
	w.reads.wrote(table, obj, true)
	return nil
}

func (w *writer) deleteAll(table, index string, args ...any) (int, error) {
	n, err := w.txn.DeleteAll(table, index, args...)
	if n > 0 || err != nil {
		w.mutated = true
		// The objects it deleted are not known here: the table's reads
		// go through the transaction from now on.
		w.reads.readDirect(table)
	}
	return n, err
}

// first returns the object of table whose primary key is args, or nil, as
// the transaction has it.
func (w *writer) first(table string, args ...any) (any, error) {
	return w.reads.First(table, "id", args...)
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", structs.ErrConflict, fmt.Sprintf(format, args...))
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("%w: %s", structs.ErrNotFound, fmt.Sprintf(format, args...))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", structs.ErrInvalid, fmt.Sprintf(format, args...))
}

// event appends one audit event, numbered after the last one.
func (w *writer) event(m structs.WriteMeta, e structs.Event) error {
	return w.eventWith(m, e)
}

// eventWith appends one audit event that causes, besides the notifications
// eventNotifyKinds gives it, those of the extra kinds.
func (w *writer) eventWith(m structs.WriteMeta, e structs.Event, extra ...string) error {
	c := w.meta
	e.Seq = c.EventSeq + 1
	e.Index = w.index
	if e.Time.IsZero() {
		e.Time = m.Time
	}
	if e.Actor == "" {
		e.Actor = m.Actor
	}
	if e.Time.IsZero() {
		// The leader stamps every entry; a snapshot refuses an event
		// without a time, so the log must too.
		return invalid("an event needs a time")
	}
	if err := w.insert(TableEvents, &e); err != nil {
		return fmt.Errorf("append event: %w", err)
	}
	if err := w.indexEvent(e.Object, e.Seq); err != nil {
		return err
	}
	c.EventSeq = e.Seq
	// Keep the bounds that let Events find the events since a time
	// without a time index (see firstEventSince).
	if t := timeKey(e.Time); t > c.EventMaxTime {
		c.EventMaxTime = t
	} else {
		c.EventSkew = max(c.EventSkew, c.EventMaxTime-t)
	}
	return w.notifyEvent(&e, extra...)
}

// indexEvent adds an event to the list of its object's events.
func (w *writer) indexEvent(object string, seq uint64) error {
	raw, err := w.first(tableEventObjects, object)
	if err != nil {
		return fmt.Errorf("event lookup: %w", err)
	}
	row := &eventObjects{Object: object}
	if raw != nil {
		// The append may write past the end of the stored list, into
		// capacity that no reader's list covers: a reader sees only the
		// length it got. Only this writer appends, always to the newest
		// list, so the list grows in amortised constant time.
		row.Seqs = raw.(*eventObjects).Seqs
	}
	row.Seqs = append(row.Seqs, seq)
	return w.put(tableEventObjects, row)
}

func (w *writer) deployment(id string) (*structs.Deployment, error) {
	raw, err := w.first(TableDeployments, id)
	if err != nil {
		return nil, fmt.Errorf("deployment lookup: %w", err)
	}
	if raw == nil {
		return nil, notFound("deployment %q", id)
	}
	return forWrite(raw.(*structs.Deployment)), nil
}

// forWrite returns a copy of a stored deployment that a write may change.
// It has its own hook runs and decisions, which a write replaces or
// appends to; the job spec and the frozen hooks, which no write changes,
// stay shared with the stored deployment rather than copied on every step.
func forWrite(d *structs.Deployment) *structs.Deployment {
	c := *d
	c.HookRuns = slices.Clone(d.HookRuns)
	c.Decisions = slices.Clone(d.Decisions)
	return &c
}

func (w *writer) put(table string, obj any) error {
	if err := w.insert(table, obj); err != nil {
		return fmt.Errorf("write %s: %w", table, err)
	}
	return nil
}

func (w *writer) deploymentCreate(req *structs.DeploymentCreateRequest) error {
	if err := validCreate(req); err != nil {
		return err
	}
	d := forWrite(req.Deployment)
	// A deployment of an entry written before clusters is of the default
	// cluster.
	d.Cluster = structs.ClusterName(d.Cluster)
	if err := w.creatable(d); err != nil {
		return err
	}
	d.CreateIndex, d.ModifyIndex = w.index, w.index
	d.CreatedAt, d.UpdatedAt, d.StateEnteredAt = req.Time, req.Time, req.Time
	msg := fmt.Sprintf("drift detected at commit %s", structs.ShortID(d.Commit))
	if d.SkipRegister {
		msg = fmt.Sprintf("retry of a job already in sync at commit %s: wait for health and run post-hooks", structs.ShortID(d.Commit))
	}
	if req.ConsumeLift {
		lifted, err := w.consumeLift(d)
		if err != nil {
			return err
		}
		msg += lifted
	}
	if err := w.replaceBlock(req.WriteMeta, d); err != nil {
		return err
	}
	if err := w.put(TableDeployments, d); err != nil {
		return err
	}
	if err := w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindDeployment, Object: d.ID, Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID,
		To: string(d.State), Message: msg,
	}); err != nil {
		return err
	}
	if req.FailWith == "" {
		return nil
	}
	// Created and failed in one entry: no step can start it in between. The
	// move writes a copy: the inserted object must not change under the
	// store's indexes.
	failed := forWrite(d)
	failed.Error = req.FailWith
	return w.move(req.WriteMeta, failed, structs.StateFailed, structs.TriggerSystem, req.FailWith)
}

// validCreate checks a deployment create request on its own: the
// deployment's keys, its first state, its time and its hooks.
func validCreate(req *structs.DeploymentCreateRequest) error {
	d := req.Deployment
	if d == nil || d.ID == "" || d.Namespace == "" || d.JobID == "" {
		return invalid("a deployment needs an ID, a namespace and a job ID")
	}
	if d.State != structs.StateDetected {
		return invalid("a deployment is created in state %s, not %q", structs.StateDetected, d.State)
	}
	if req.Time.IsZero() {
		return invalid("a deployment needs a creation time")
	}
	if err := validApprovalRules(d); err != nil {
		return err
	}
	for _, h := range d.Hooks {
		if err := validHookPhase(d.ID, h); err != nil {
			return err
		}
	}
	return validCommitContext(d)
}

// creatable checks that d may be created in this entry: it is new, the
// entry creates no other deployment, and its job has no active one.
func (w *writer) creatable(d *structs.Deployment) error {
	if _, err := w.deployment(d.ID); err == nil {
		return conflict("deployment %s already exists", d.ID)
	}
	// The create index orders deployments and is unique: the requests of
	// a batch entry share its index, so only one of them may create.
	if raw, err := w.txn.First(TableDeployments, "create", w.index); err != nil {
		return fmt.Errorf("create index lookup: %w", err)
	} else if raw != nil {
		return invalid("a log entry creates at most one deployment: %s was created at index %d", raw.(*structs.Deployment).ID, w.index)
	}
	if raw, err := w.txn.First(TableDeployments, "active", d.Key()); err != nil {
		return fmt.Errorf("active deployment lookup: %w", err)
	} else if raw != nil {
		a := raw.(*structs.Deployment)
		return conflict("job %s already has an active deployment %s (%s)", d.Key(), a.ID, a.State)
	}
	return nil
}

// consumeLift takes the deploy-now lift of d's job, if there is one, into
// d, and returns what the creation event says of it.
func (w *writer) consumeLift(d *structs.Deployment) (string, error) {
	raw, err := w.first(TableLifts, d.Cluster, d.Namespace, d.JobID)
	if err != nil {
		return "", fmt.Errorf("lift lookup: %w", err)
	}
	if raw == nil {
		return "", nil
	}
	lift := raw.(*structs.WindowLift)
	d.LiftedWindow, d.LiftedBy = true, lift.Actor
	if err := w.delete(TableLifts, lift); err != nil {
		return "", fmt.Errorf("consume deploy-now: %w", err)
	}
	return fmt.Sprintf("; deploy now by %s lifts the sync window", lift.Actor), nil
}

// replaceBlock clears the block of the job's last deployment, which the
// new deployment d replaces.
func (w *writer) replaceBlock(m structs.WriteMeta, d *structs.Deployment) error {
	block, err := first[structs.Block](w.reads, TableBlocks, d.Cluster, d.Namespace, d.JobID)
	if err != nil {
		return err
	}
	if _, err := w.deleteAll(TableBlocks, "id", d.Cluster, d.Namespace, d.JobID); err != nil {
		return fmt.Errorf("clear block: %w", err)
	}
	if block != nil && !block.Retried && !block.Expired {
		// A retried block already said the job is unblocked; an expired
		// approval never said it was blocked.
		if err := w.notifyUnblocked(m, d); err != nil {
			return err
		}
	}
	return nil
}

// move changes a deployment's state, checking the lifecycle table, and
// writes the block a failure, a rejection or an expiry leaves behind.
func (w *writer) move(m structs.WriteMeta, d *structs.Deployment, to structs.DeploymentState, by structs.Trigger, msg string) error {
	from := d.State
	if from.Terminal() {
		return conflict("deployment %s is %s, which is terminal", d.ID, from)
	}
	if !structs.CanTransition(from, to, by) {
		return conflict("deployment %s cannot move from %s to %s by %s", d.ID, from, to, by)
	}
	d.State = to
	d.StateEnteredAt, d.UpdatedAt = m.Time, m.Time
	d.ModifyIndex = w.index
	if err := w.put(TableDeployments, d); err != nil {
		return err
	}
	if to == structs.StateFailed || to == structs.StateRejected || to == structs.StateExpired {
		b := &structs.Block{
			Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID, DeploymentID: d.ID, SpecHash: d.SpecHash,
			AfterRegister: d.Registered, JobModifyIndex: d.JobModifyIndex, CreateIndex: w.index,
			Expired: to == structs.StateExpired,
		}
		if err := w.put(TableBlocks, b); err != nil {
			return err
		}
	}
	return w.event(m, structs.Event{
		Kind: structs.EventKindDeployment, Object: d.ID, Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID,
		From: string(from), To: string(to), Message: msg,
	})
}

func (w *writer) deploymentTransition(req *structs.DeploymentTransitionRequest) error {
	d, err := w.deployment(req.ID)
	if err != nil {
		return err
	}
	if req.From != "" && d.State != req.From {
		return conflict("deployment %s is %s, not %s", d.ID, d.State, req.From)
	}
	if req.To == structs.StateExpired && d.State == structs.StatePendingApproval {
		// Any other state is refused by the lifecycle (move).
		if err := expirable(d, req.Time); err != nil {
			return err
		}
	}
	if err := w.patch(d, req.Update); err != nil {
		return err
	}
	if req.Error != "" {
		d.Error = req.Error
	}
	msg := req.Message
	if msg == "" {
		msg = req.Error
	}
	return w.move(req.WriteMeta, d, req.To, structs.TriggerSystem, msg)
}

// expirable checks, against the leader's stamped time of the entry, that
// d's approval TTL has run out: the leader proposes an expiry when its
// clock says so, and the FSM refuses one that comes early, on every server
// alike.
func expirable(d *structs.Deployment, now time.Time) error {
	at := d.ApprovalExpiresAt()
	switch {
	case at.IsZero():
		return conflict("deployment %s has no approval TTL (nops_approval_ttl): it does not expire", d.ID)
	case now.Before(at):
		return conflict("deployment %s expires at %s, not at %s: its approval TTL (%s) has not run out",
			d.ID, at.Format(time.RFC3339), now.Format(time.RFC3339), d.ApprovalTTL)
	}
	return nil
}

func (w *writer) deploymentUpdate(req *structs.DeploymentUpdateRequest) error {
	d, err := w.deployment(req.ID)
	if err != nil {
		return err
	}
	if !d.State.Active() {
		return conflict("deployment %s is %s, which is terminal", d.ID, d.State)
	}
	if req.State != "" && d.State != req.State {
		return conflict("deployment %s is %s, not %s", d.ID, d.State, req.State)
	}
	if req.Update == nil {
		return invalid("an update of deployment %s needs a patch", d.ID)
	}
	if err := w.patch(d, req.Update); err != nil {
		return err
	}
	d.UpdatedAt = req.Time
	d.ModifyIndex = w.index
	if err := w.put(TableDeployments, d); err != nil {
		return err
	}
	if req.Update.Message == "" {
		return nil
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindDeployment, Object: d.ID, Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID,
		From: string(d.State), To: string(d.State), Message: req.Update.Message,
	})
}

// patch records a step's bookkeeping on d. It keeps the guarantees of SPEC
// section 8.7: the register intent is recorded once per deployment, and a
// hook run is dispatched at most once per (deployment, phase, position).
func (w *writer) patch(d *structs.Deployment, p *structs.DeploymentPatch) error {
	if p == nil {
		return nil
	}
	if p.JobModifyIndex != nil {
		if !d.RegisterStartedAt.IsZero() {
			return conflict("deployment %s already recorded its register: its modify index cannot move", d.ID)
		}
		d.JobModifyIndex = *p.JobModifyIndex
	}
	if p.RegisterStartedAt != nil {
		if !d.RegisterStartedAt.IsZero() {
			return conflict("deployment %s already recorded its register at %s", d.ID, d.RegisterStartedAt.Format(time.RFC3339))
		}
		d.RegisterStartedAt = *p.RegisterStartedAt
	}
	if p.Registered != nil {
		d.Registered = *p.Registered
	}
	if p.JobVersion != nil {
		d.JobVersion = *p.JobVersion
	}
	if p.NomadEvalID != nil {
		d.NomadEvalID = *p.NomadEvalID
	}
	if p.NomadDeploymentID != nil {
		d.NomadDeploymentID = *p.NomadDeploymentID
	}
	if p.HealthDeadline != nil {
		d.HealthDeadline = *p.HealthDeadline
	}
	if r := p.HookRun; r != nil {
		return upsertHookRun(d, *r)
	}
	return nil
}

func upsertHookRun(d *structs.Deployment, r structs.HookRun) error {
	if err := validHookRun(d.ID, r); err != nil {
		return err
	}
	for i, old := range d.HookRuns {
		if old.Phase != r.Phase || old.Position != r.Position {
			continue
		}
		switch {
		case old.State == structs.HookRunSucceeded || old.State == structs.HookRunFailed:
			return conflict("hook run %s/%d of deployment %s already ended %s", r.Phase, r.Position, d.ID, old.State)
		case r.State == structs.HookRunDispatching:
			return conflict("hook run %s/%d of deployment %s was already dispatched; a run is dispatched at most once", r.Phase, r.Position, d.ID)
		case old.Token != r.Token:
			return conflict("hook run %s/%d of deployment %s has token %s, not %s", r.Phase, r.Position, d.ID, old.Token, r.Token)
		}
		d.HookRuns[i] = r
		return nil
	}
	if r.State != structs.HookRunDispatching {
		return conflict("hook run %s/%d of deployment %s must record its dispatch first", r.Phase, r.Position, d.ID)
	}
	d.HookRuns = append(d.HookRuns, r)
	return nil
}

// deploymentDecision records a person's approve or reject (SPEC sections
// 3 and 20). One rejection rejects. An approval counts once per identity:
// a second one by the same identity is refused, so that a replayed or
// forwarded request is never counted twice; the deployment moves on with
// the last approval it needs, and waits, recorded, until then.
func (w *writer) deploymentDecision(req *structs.DeploymentDecisionRequest) error {
	if req.Decision != structs.DecisionApprove && req.Decision != structs.DecisionReject {
		return invalid("decision must be approve or reject, not %q", req.Decision)
	}
	if err := structs.CheckText("comment", req.Comment); err != nil {
		return err
	}
	d, err := w.deployment(req.ID)
	if err != nil {
		return err
	}
	if d.State != structs.StatePendingApproval {
		return conflict("deployment %s is %s, not pending approval: cannot %s it", d.ID, d.State, req.Decision)
	}
	// Past its approval TTL (by the entry's stamped time, whether or not
	// the leader has proposed the expiry yet) the deployment takes no
	// decision: it ends expired, which blocks nothing, not rejected.
	if at := d.ApprovalExpiresAt(); !at.IsZero() && !req.Time.Before(at) {
		return conflict("deployment %s expired at %s: its approval TTL (nops_approval_ttl %s) ran out; a commit, a live change or a retry creates a new one",
			d.ID, at.Format(time.RFC3339), d.ApprovalTTL)
	}
	if req.Decision == structs.DecisionApprove {
		if err := w.mayApprove(req, d); err != nil {
			return err
		}
	}
	d.Decisions = append(d.Decisions, structs.Decision{
		Kind: req.Decision, Actor: req.Actor, Comment: req.Comment, Time: req.Time,
	})
	var (
		to  structs.DeploymentState
		by  structs.Trigger
		msg string
	)
	switch req.Decision {
	case structs.DecisionApprove:
		given, need := len(d.ApprovalsGiven()), d.RequiredApprovals()
		if given < need {
			return w.approvalRecorded(req, d, given, need)
		}
		to, by, msg = d.StartState(), structs.TriggerApprove, "approved"
		if need > 1 {
			msg = fmt.Sprintf("approved: %d of %d approvals", given, need)
		}
	case structs.DecisionReject:
		to, by, msg = structs.StateRejected, structs.TriggerReject, "rejected"
	}
	if req.Comment != "" {
		msg += ": " + req.Comment
	}
	return w.move(req.WriteMeta, d, to, by, msg)
}

// deploymentSkipRequirements lets a deployment that waits in detected for
// its cluster's promotion order start without it (SPEC section 16): it
// records who skipped it, with the reason in an event. Only a detected
// deployment waits for the order; a reason is required, since the skip
// is an operator's audited decision.
func (w *writer) deploymentSkipRequirements(req *structs.DeploymentSkipRequirementsRequest) error {
	if strings.TrimSpace(req.Reason) == "" {
		return invalid("skipping the promotion order needs a reason")
	}
	if err := structs.CheckText("reason", req.Reason); err != nil {
		return err
	}
	d, err := w.deployment(req.ID)
	if err != nil {
		return err
	}
	if d.State != structs.StateDetected {
		return conflict("deployment %s is %s, not detected: only a deployment waiting in detected waits for the promotion order", d.ID, d.State)
	}
	if d.SkipRequirements {
		return conflict("deployment %s already skips the promotion order (by %s)", d.ID, d.SkipRequirementsBy)
	}
	d.SkipRequirements, d.SkipRequirementsBy = true, req.Actor
	d.UpdatedAt = req.Time
	d.ModifyIndex = w.index
	if err := w.put(TableDeployments, d); err != nil {
		return err
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindDeployment, Object: d.ID, Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID,
		From: string(d.State), To: string(d.State),
		Message: fmt.Sprintf("promotion order skipped by %s: %s", req.Actor, req.Reason),
	})
}

// mayApprove checks that the request's identity may approve d now: the
// job is not paused (a sync window does not block an approval, SPEC
// section 6), under forbid_self the identity is not the author or the
// committer of d's commit, and it has not approved d already.
func (w *writer) mayApprove(req *structs.DeploymentDecisionRequest, d *structs.Deployment) error {
	pause, err := pausedTxn(w.reads, d.Cluster, d.Namespace, d.JobID)
	if err != nil {
		return err
	}
	if pause != nil {
		what := "job " + d.Key()
		switch {
		case pause.Global:
			what = "every job"
		case pause.JobID == "":
			what = "every job of cluster " + pause.Cluster
		}
		return conflict("%s is paused by %s (%s): resume before approving", what, pause.Actor, pause.Reason)
	}
	return d.ApprovalRefusal(req.Actor, req.ForbidSelf)
}

// approvalRecorded records an approval of d that leaves it waiting for
// more, with its event and its notification.
func (w *writer) approvalRecorded(req *structs.DeploymentDecisionRequest, d *structs.Deployment, given, need int) error {
	d.UpdatedAt = req.Time
	d.ModifyIndex = w.index
	if err := w.put(TableDeployments, d); err != nil {
		return err
	}
	msg := fmt.Sprintf("approved by %s: %d of %d approvals", req.Actor, given, need)
	if req.Comment != "" {
		msg += ": " + req.Comment
	}
	return w.eventWith(req.WriteMeta, structs.Event{
		Kind: structs.EventKindDeployment, Object: d.ID, Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID,
		From: string(d.State), To: string(d.State), Message: msg,
	}, structs.NotifyApproval)
}

func (w *writer) pause(req *structs.PauseRequest) error {
	if !req.Global && req.JobID == "" && req.Cluster == "" || !req.Global && req.JobID != "" && req.Namespace == "" {
		return invalid("a pause needs a job (a namespace and a job ID), a cluster, or global")
	}
	if req.Global && (req.Cluster != "" || req.JobID != "") {
		return invalid("a global pause names no cluster and no job")
	}
	if err := structs.CheckText("reason", req.Reason); err != nil {
		return err
	}
	p := &structs.Pause{
		Key: req.Key(), Global: req.Global, Cluster: pauseCluster(req), Namespace: req.Namespace, JobID: req.JobID,
		Actor: req.Actor, Reason: req.Reason, CreatedAt: req.Time, CreateIndex: w.index,
	}
	if err := w.put(TablePauses, p); err != nil {
		return err
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindPause, Object: p.Key, Cluster: p.Cluster, Namespace: p.Namespace, JobID: p.JobID,
		To: "paused", Message: req.Reason,
	})
}

func (w *writer) resume(req *structs.ResumeRequest) error {
	n, err := w.deleteAll(TablePauses, "id", req.Key())
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if n == 0 {
		if req.Global {
			return notFound("jobs are not paused globally")
		}
		if req.JobID == "" {
			return notFound("cluster %s is not paused", req.Cluster)
		}
		return notFound("job %s is not paused", req.Key())
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindPause, Object: req.Key(), Cluster: pauseCluster(req), Namespace: req.Namespace, JobID: req.JobID,
		From: "paused", To: "resumed", Message: req.Reason,
	})
}

// pauseCluster is the cluster a pause request names: the job's (the
// default cluster for a request written before clusters), the paused
// cluster, or none for a global pause.
func pauseCluster(req *structs.PauseRequest) string {
	if req.Global {
		return ""
	}
	return structs.ClusterName(req.Cluster)
}

func (w *writer) windowUpsert(req *structs.WindowUpsertRequest) error {
	win := req.Window
	if err := validWindow(win); err != nil {
		return err
	}
	c := *win
	c.CreateIndex, c.ModifyIndex = w.index, w.index
	action := "created"
	if raw, err := w.first(TableWindows, win.Name); err != nil {
		return fmt.Errorf("window lookup: %w", err)
	} else if raw != nil {
		c.CreateIndex = raw.(*structs.SyncWindow).CreateIndex
		action = "replaced"
	}
	if err := w.put(TableWindows, &c); err != nil {
		return err
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindWindow, Object: c.Name, To: action,
		Message: fmt.Sprintf("%s window %q %s for %s", c.Kind, c.Schedule, action, c.Duration),
	})
}

func (w *writer) windowDelete(req *structs.WindowDeleteRequest) error {
	n, err := w.deleteAll(TableWindows, "id", req.Name)
	if err != nil {
		return fmt.Errorf("delete window: %w", err)
	}
	if n == 0 {
		return notFound("sync window %q", req.Name)
	}
	return w.event(req.WriteMeta, structs.Event{Kind: structs.EventKindWindow, Object: req.Name, To: "deleted"})
}

func (w *writer) windowLift(req *structs.WindowLiftRequest) error {
	if req.Namespace == "" || req.JobID == "" {
		return invalid("deploy now needs a namespace and a job ID")
	}
	l := &structs.WindowLift{Cluster: structs.ClusterName(req.Cluster), Namespace: req.Namespace, JobID: req.JobID, Actor: req.Actor, CreatedAt: req.Time, CreateIndex: w.index}
	if err := w.put(TableLifts, l); err != nil {
		return err
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindJob, Object: l.Key(), Cluster: l.Cluster, Namespace: l.Namespace, JobID: l.JobID,
		To: "deploy_now", Message: "deploy now: the next deployment lifts a closed sync window",
	})
}

func (w *writer) jobStatusUpsert(req *structs.JobStatusUpsertRequest) error {
	for _, st := range req.Statuses {
		if st == nil || st.Namespace == "" || st.JobID == "" {
			return invalid("a job status needs a namespace and a job ID")
		}
		c := *st
		c.Cluster = structs.ClusterName(c.Cluster)
		c.CreateIndex, c.ModifyIndex = w.index, w.index
		if raw, err := w.first(TableJobStatus, c.Cluster, c.Namespace, c.JobID); err != nil {
			return fmt.Errorf("job status lookup: %w", err)
		} else if raw != nil {
			c.CreateIndex = raw.(*structs.JobStatus).CreateIndex
		}
		if err := w.put(TableJobStatus, &c); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) jobStatusDelete(req *structs.JobStatusDeleteRequest) error {
	for _, key := range req.Keys {
		cluster, ns, id, ok := structs.SplitJobKey(key)
		if !ok {
			return invalid("job key %q is not namespace/job or cluster:namespace/job", key)
		}
		if _, err := w.deleteAll(TableJobStatus, "id", cluster, ns, id); err != nil {
			return fmt.Errorf("delete job status: %w", err)
		}
	}
	return nil
}

func (w *writer) repoStatusUpsert(req *structs.RepoStatusUpsertRequest) error {
	for _, r := range req.Repos {
		if r == nil || r.Name == "" {
			return invalid("a repository status needs a name")
		}
		c := *r
		c.ModifyIndex = w.index
		old, err := first[structs.RepoStatus](w.reads, TableRepoStatus, r.Name)
		if err != nil {
			return err
		}
		if err := w.put(TableRepoStatus, &c); err != nil {
			return err
		}
		if newlyRefused(old, &c) {
			if err := w.event(req.WriteMeta, structs.Event{Kind: structs.EventKindRepository, Object: "repository/" + c.Name,
				To: "refused", Message: c.FetchError}); err != nil {
				return err
			}
		}
		if err := w.notifyRepo(old, &c, req.WriteMeta); err != nil {
			return err
		}
	}
	return nil
}

func (w *writer) detectionCycle(req *structs.DetectionCycleRequest) error {
	if req.Cycle == nil {
		return invalid("a detection cycle record needs a cycle")
	}
	c := *req.Cycle
	c.Index = w.index
	return w.put(TableCycle, &cycleRow{Key: cycleRowKey(c.Cluster), Cycle: &c})
}

func (w *writer) retry(req *structs.RetryRequest) error {
	raw, err := w.first(TableBlocks, structs.ClusterName(req.Cluster), req.Namespace, req.JobID)
	if err != nil {
		return fmt.Errorf("block lookup: %w", err)
	}
	if raw == nil || raw.(*structs.Block).Retried {
		return conflict("job %s is not blocked", structs.JobKey(req.Cluster, req.Namespace, req.JobID))
	}
	b := *raw.(*structs.Block)
	b.Retried, b.RetriedBy = true, req.Actor
	if err := w.put(TableBlocks, &b); err != nil {
		return err
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindJob, Object: b.Key(), Cluster: b.Cluster, Namespace: b.Namespace, JobID: b.JobID,
		From: "blocked", To: "retry", Message: fmt.Sprintf("retry after deployment %s", b.DeploymentID),
	})
}

func (w *writer) eventAppend(req *structs.EventAppendRequest) error {
	for _, e := range req.Events {
		if e == nil || e.Kind == "" || e.Object == "" {
			return invalid("an event needs a kind and an object")
		}
		if err := w.event(req.WriteMeta, *e); err != nil {
			return err
		}
	}
	return nil
}
