package reconcile

import (
	"fmt"
	"strings"
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// Detection of one managed job is observe, decide, act (detect_job.go):
// observe gathers a jobView from git, Nomad and the replicated state;
// decide, here, turns it into a decision without any I/O; act proposes the
// decision's Raft entries. decide owns SPEC section 4 steps 6 to 9 (the
// frozen hooks' problems, revalidation, creation, the observed status) and
// every rule of section 6 through holds.Evaluate, and the rule of section
// 17 (nops_depends_on: waitFor, and the dependency problems), so each rule
// can be checked by a table of views (decide_test.go).
//
// A job that waits for a dependency gets no deployment at all, rather than
// one that stays in detected as section 17 words it: the apply loop starts
// a detected deployment (policy auto) at its next step without asking
// detection, so a deployment kept in detected would need the apply loop to
// read the other jobs' states too (a second owner of the rule) or a new
// stored flag. Not creating it keeps the rule here, and works as a hold
// does (section 6): the job's status names what it waits for (WaitingFor),
// a waiting deployment made earlier is superseded, a deploy now stays
// stored, and the cycle that a dependency's deployment ending starts
// creates the deployment once every dependency is in sync again.
//
// The promotion order between clusters (section 16: a cluster requires
// others, with a bake time) is decided here too, but a deployment that
// waits for it is created and waits in detected, as the section words it:
// an operator lets that deployment, by its ID, skip the order
// (skip-requirements), which needs it to exist. The rule is promotionWait,
// over the states of the job in the required clusters (reqState); the
// apply loop asks it again before it starts a detected deployment (the
// gate, as it asks holds.Evaluate), and decide gives the job's status its
// wait, looks again when the bake ends, and wakes the waiting deployment
// once nothing holds it.

// jobView is what detection observed of one managed job in one cycle.
type jobView struct {
	// Declared in git; cluster is the Nomad cluster the job deploys to.
	cluster, namespace, jobID string
	repo, commit, file        string
	policy                    structs.Policy
	// specHash is the job's spec hash with its frozen hooks (and their
	// problems), so that a change of a hook is a change of spec.
	specHash     string
	hooks        []structs.FrozenHook
	hookProblems []string

	// Live in Nomad.
	//
	// liveMod is the live job's modify index, 0 when there is none.
	liveMod uint64
	inSync  bool
	// plan is the plan made this cycle, nil when the last plan still
	// answers (the job is then in sync).
	plan *nomadx.PlanResult
	// autoscaledOnly says that the live job moved from the index the
	// waiting deployment recorded only by counts left to an autoscaler.
	// observe asks Nomad only when needsAutoscaleCheck says it matters.
	autoscaledOnly bool

	// Replicated state.
	//
	// active is the job's active deployment, waiting or running, or nil.
	active  *structs.Deployment
	block   *structs.Block
	pauses  []*structs.Pause
	windows []*structs.SyncWindow
	// schedule is windows evaluated at now (holds.At), shared by every job
	// of a cycle; nil makes decide evaluate windows itself.
	schedule *holds.Schedule
	// lift is a stored deploy now for the job's next deployment, or nil.
	lift *structs.WindowLift
	now  time.Time

	// Dependencies (nops_depends_on).
	//
	// deps are the states of the jobs it depends on, in declared order,
	// as this cycle left them (detection takes jobs in dependency order).
	deps []depState
	// depProblems are the dependency graph's validation problems of the
	// job (meta.DependencyProblems: missing, unmanaged, cycle).
	depProblems []string

	// Promotion order (SPEC section 16).
	//
	// requires are the states of the job in the clusters its cluster
	// requires, in configured order, relative to promotionCommit; nil
	// when the cluster requires none or the job wants no deployment.
	// bake is how long a completed deployment there must have run.
	requires []reqState
	bake     time.Duration

	// decl is the declaration the view was observed from; only act reads
	// it, to build the deployment.
	decl *declared
}

// reqState is what one cluster that the job's cluster requires holds of
// the same job (same namespace and ID), relative to the commit that waits.
type reqState struct {
	cluster string
	// exists says the job has a status there; a job that does not exist
	// in a required cluster is not held by it.
	exists bool
	// completedCommit and completedAt are those of the job's last
	// completed deployment there ("" for none); completedLater says that
	// commit is the commit that waits or a later one (observe decides it
	// with git's ancestry).
	completedCommit string
	completedAt     time.Time
	completedLater  bool
	// heldID, heldState and heldError are the job's last deployment there
	// when it failed or was rejected, of the commit that waits or a later
	// one: it holds the job with its reason. heldState is "" for none.
	heldID    string
	heldState structs.DeploymentState
	heldError string
}

// promotionWait is the rule of the promotion order (SPEC section 16): why
// a deployment of commit must wait, "" when it need not, and the earliest
// time at which a required cluster's completed deployment will have baked
// (zero for none). It names the first required cluster, in configured
// order, that holds it: one whose last deployment of the commit or a later
// one failed or was rejected (held, with the reason), one with no
// completed deployment of the commit or a later one, or one whose
// completed deployment ran less than bake. A cluster where the job does
// not exist holds nothing. Times show in UTC, as HH:MM.
func promotionWait(reqs []reqState, commit string, bake time.Duration, now time.Time) (string, time.Time) {
	var why string
	var until time.Time
	for _, r := range reqs {
		var w string
		switch baked := r.completedAt.Add(bake); {
		case !r.exists:
		case r.heldState != "":
			w = fmt.Sprintf("held by %s: deployment %s %s", r.cluster, structs.ShortID(r.heldID), r.heldState)
			if r.heldError != "" {
				w += ": " + r.heldError
			}
		case r.completedCommit == "" || !r.completedLater:
			w = fmt.Sprintf("waiting for %s: no completed deployment of commit %s or later", r.cluster, structs.ShortID(commit))
		case now.Before(baked):
			w = fmt.Sprintf("waiting for %s (bakes until %s)", r.cluster, baked.UTC().Format("15:04"))
			until = earliest(until, baked)
		}
		if why == "" {
			why = w
		}
	}
	return why, until
}

// promotionPending reports whether the promotion order can still hold the
// job's next start: its cluster requires others, and its deployment has
// not started (there is none yet, or it waits in detected and no operator
// let it skip the order).
func (v *jobView) promotionPending() bool {
	if len(v.requires) == 0 {
		return false
	}
	a := v.active
	return a == nil || (a.State == structs.StateDetected && !a.SkipRequirements)
}

// promotionCommit is the commit whose promotion the view weighs: that of
// the deployment waiting in detected, else git's.
func (v *jobView) promotionCommit() string {
	if a := v.active; a != nil && a.State == structs.StateDetected {
		return a.Commit
	}
	return v.commit
}

// promotionWait is the rule applied to the view: "" when the order does
// not hold the job.
func (v *jobView) promotionWait() (string, time.Time) {
	if !v.promotionPending() {
		return "", time.Time{}
	}
	return promotionWait(v.requires, v.promotionCommit(), v.bake, v.now)
}

// depState is what one detection cycle saw of a job that another depends
// on, taken after that job's own decision: a deployment it created in the
// cycle is active, one it settled is not.
type depState struct {
	key string
	// invalid is the first error that kept it from being detected (its
	// declaration, its own dependencies, a failed detection), "" for none.
	invalid string
	// active is the state of its active deployment, "" for none.
	active structs.DeploymentState
	// blocked says how a failed or rejected deployment blocks it, as
	// "failed: <error>" or "rejected", "" when it is not blocked.
	blocked string
	inSync  bool
}

// wait returns why a dependent must wait for the job, "" when it need not:
// it is invalid, deploying, blocked or not in sync.
func (d depState) wait() string {
	switch {
	case d.invalid != "":
		return "invalid: " + d.invalid
	case d.active != "":
		return "deploying"
	case d.blocked != "":
		return "blocked (" + d.blocked + ")"
	case !d.inSync:
		return "not in sync"
	}
	return ""
}

// waitFor returns what the job waits for, as its status shows it, naming
// the first of its dependencies (in declared order) that is not ready; ""
// when all are ready.
func (v *jobView) waitFor() string {
	for _, d := range v.deps {
		if why := d.wait(); why != "" {
			return "waiting for " + d.key + ": " + why
		}
	}
	return ""
}

// decision is what detection does about one job, in the order act does it.
type decision struct {
	// status is the job's observed status to record (step 9).
	status *structs.JobStatus
	// rebase moves the waiting deployment's check-and-set index to the
	// live job's: the live job changed only by autoscaled counts.
	rebase bool
	// settle ends the waiting deployment (superseded or completed) with
	// reason; empty leaves it as it is.
	settle structs.DeploymentState
	reason string
	// create asks for a new deployment (step 8), made once the waiting
	// deployment, if any, is settled.
	create bool
	// skipRegister says the new deployment is a retry of a job already in
	// sync: it waits for health and runs the post-hooks, no register.
	skipRegister bool
	// consumeLift makes the new deployment consume the stored deploy now.
	consumeLift bool
	// failWith fails the new deployment at once: its hooks are missing or
	// invalid.
	failWith string
	// release wakes the deployment waiting in detected for the promotion
	// order: nothing holds it any more, and the apply loop may start it.
	release bool
	// lookAgainAt is when detection must look at the job again even if
	// nothing else triggers it (the controller's requeue-after): the next
	// boundary of a sync window that matches it, where its hold, and so
	// its status and its waiting deployment, may change; when the
	// waiting deployment's approval TTL runs out; when a required
	// cluster's deployment has baked (promotion order); v.now when the waiting
	// deployment moved on but still waits. Zero: only the usual triggers
	// (commits, Nomad's events, state changes, the drift interval).
	lookAgainAt time.Time
}

// decide returns what to do about one job. It is a pure function of the
// view.
func decide(v *jobView) decision {
	h := v.hold()
	dec := decision{status: v.observedStatus(h),
		lookAgainAt: v.windowSchedule().NextBoundaryFor(v.cluster, v.namespace, v.jobID)}
	active := v.active
	if active != nil && active.State.Waiting() {
		dec.rebase, dec.settle, dec.reason = revalidate(v, h)
		switch {
		case dec.settle == structs.StateExpired:
			// It leaves a block on its spec and live job, which
			// are the job's now: nothing is created for them.
			return dec
		case dec.settle != "":
			// Settled, it is no longer active.
			active = nil
		default:
			dec.lookAgainAt = earliest(dec.lookAgainAt, expiryCheck(v))
		}
	}
	dec.createRule(v, h, active)
	if why, until := v.promotionWait(); why != "" {
		dec.lookAgainAt = earliest(dec.lookAgainAt, until)
	} else if active != nil && v.promotionPending() {
		// The waiting deployment, in detected, is held no more.
		dec.release = true
	}
	if dec.create && v.decl != nil && v.decl.meta.Policy == structs.PolicyApproval && v.decl.meta.ApprovalTTL > 0 {
		// The deployment created now waits for approval no sooner than
		// now: look again when its TTL would run out, since no periodic
		// cycle comes while Nomad's event stream is up.
		dec.lookAgainAt = earliest(dec.lookAgainAt, v.now.Add(v.decl.meta.ApprovalTTL))
	}
	return dec
}

// expiryCheck is when detection must look again at the waiting deployment
// for its approval TTL: when it runs out, once it waits for approval; a
// TTL after now while it is detected under the approval policy, since it
// enters pending_approval no sooner. Zero without a TTL.
func expiryCheck(v *jobView) time.Time {
	a := v.active
	switch {
	case a.ApprovalTTL <= 0:
		return time.Time{}
	case a.State == structs.StatePendingApproval:
		return a.ApprovalExpiresAt()
	case a.Policy == structs.PolicyApproval:
		return v.now.Add(a.ApprovalTTL)
	}
	return time.Time{}
}

// earliest returns the earlier of two times, a zero one counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// settleConflict decides creation again when the waiting deployment moved
// on before act could settle it (an approval, a rejection, the apply loop
// starting it). after is the job's active deployment then: nil, or the
// one that moved on, which runs and so counts as active. v.block must be
// read after the failed settle, since a rejection blocks in the same entry.
func (dec *decision) settleConflict(v *jobView, after *structs.Deployment) {
	dec.settle, dec.reason = "", ""
	dec.createRule(v, v.hold(), after)
	if after != nil && after.State.Waiting() {
		// It still waits (detected became pending_approval): revalidate
		// it in the next cycle rather than at the next periodic one.
		dec.lookAgainAt = v.now
	}
}

// hold is the job's hold for its next deployment: a stored deploy now
// lifts a closed window for it.
func (v *jobView) hold() holds.Hold {
	return holds.Evaluate(v.pauses, v.windowSchedule(), v.lift != nil, v.cluster, v.namespace, v.jobID)
}

// windowSchedule is the view's windows evaluated at its instant.
func (v *jobView) windowSchedule() *holds.Schedule {
	if v.schedule == nil {
		return holds.At(v.windows, v.now)
	}
	return v.schedule
}

// observedStatus is the job's status as this cycle saw it; createRule adds
// whether it is blocked.
func (v *jobView) observedStatus(h holds.Hold) *structs.JobStatus {
	s := &structs.JobStatus{Cluster: structs.ClusterName(v.cluster), Namespace: v.namespace, JobID: v.jobID, Repository: v.repo, File: v.file,
		Commit: v.commit, Policy: v.policy, SpecHash: v.specHash, LiveModifyIndex: v.liveMod, Hold: h.Reason()}
	if v.inSync {
		s.Sync = structs.SyncInSync
	} else {
		s.Sync = structs.SyncDrift
		s.DriftSummary = summarize(v.plan)
		if v.plan != nil {
			s.Drift = v.plan.Tree
		}
	}
	if len(v.hookProblems) > 0 {
		s.Errors = append(s.Errors, v.hookProblems...)
	}
	if len(v.depProblems) > 0 {
		// A validation error on the job, as the meta keys' are.
		s.Sync = structs.SyncError
		s.Errors = append(s.Errors, v.depProblems...)
	} else if wants := !v.inSync || (v.block != nil && v.block.Retried); wants && (v.active == nil || v.active.State.Waiting()) {
		// Only a job that wants a new deployment waits: one in sync
		// has nothing to wait with, and a running deployment runs on.
		s.WaitingFor = v.waitFor()
		if s.WaitingFor == "" {
			s.WaitingFor, _ = v.promotionWait()
		}
	}
	return s
}

// synced reports whether the waiting deployment's job reached, in Nomad,
// the spec the deployment was for. A job put in sync by hand is a live
// change too, but it completes the deployment: the in-sync check comes
// before the live-change one. A retry of a job in sync (skip register)
// is there to run its post-hooks, so it is never completed this way.
func (v *jobView) synced() bool {
	return v.inSync && !v.active.SkipRegister && v.active.SpecHash == v.specHash
}

// needsAutoscaleCheck reports whether the waiting deployment would be
// superseded for a live change that might be only a scale by an
// autoscaler, which is not a change (SPEC section 4, step 5). observe
// then asks Nomad and records the answer in autoscaledOnly.
func (v *jobView) needsAutoscaleCheck() bool {
	a := v.active
	return a != nil && a.State.Waiting() && a.JobModifyIndex != v.liveMod && !v.synced() &&
		a.SpecHash == v.specHash && v.policy != structs.PolicyNone
}

// revalidate decides about the waiting deployment (step 7): supersede it
// if the policy became none, the spec hash changed, the live job changed
// or the job is now held; complete it if the job is already in sync;
// expire it once it waited for approval past its approval TTL (SPEC
// section 20; the FSM checks the time again). A deployment that consumed
// a deploy now is not held by the window it lifted; a pause holds it.
// Like a hold, invalid dependencies or a dependency not ready supersede it
// (section 17).
func revalidate(v *jobView, h holds.Hold) (rebase bool, to structs.DeploymentState, reason string) {
	a := v.active
	liveChanged := a.JobModifyIndex != v.liveMod
	if v.needsAutoscaleCheck() && v.autoscaledOnly {
		rebase, liveChanged = true, false
	}
	held := h.WithLift(a.LiftedWindow)
	switch {
	case v.policy == structs.PolicyNone:
		return rebase, structs.StateSuperseded, "the job's policy became none"
	case a.SpecHash != v.specHash:
		return rebase, structs.StateSuperseded, "a newer spec in git replaces it"
	case v.synced():
		return rebase, structs.StateCompleted, "the job is already in sync"
	case liveChanged:
		return rebase, structs.StateSuperseded, "the live job changed since detection"
	case held.Held():
		return rebase, structs.StateSuperseded, "the job is held: " + held.Reason()
	case len(v.depProblems) > 0:
		return rebase, structs.StateSuperseded, "the job's dependencies are invalid: " + strings.Join(v.depProblems, "; ")
	case v.waitFor() != "":
		return rebase, structs.StateSuperseded, "the job is " + v.waitFor()
	case expired(a, v.now):
		return rebase, structs.StateExpired, fmt.Sprintf("no decision within its approval TTL (%s): a commit, a live change or a retry creates a new deployment", a.ApprovalTTL)
	}
	return rebase, "", ""
}

// expired reports whether a, waiting for approval, has run out its
// approval TTL at now.
func expired(a *structs.Deployment, now time.Time) bool {
	at := a.ApprovalExpiresAt()
	return !at.IsZero() && !now.Before(at)
}

// createRule decides whether to create a deployment (step 8) when active
// is the job's active deployment once the waiting one is settled: if there
// is drift (or a person's retry), unless the policy is none, the job is
// blocked, the job is held, its dependencies are invalid or not ready
// (section 17; a deploy now does not skip them) or an active deployment
// exists. It also sets
// the status's blocked flag: a deployment that fails at once for its
// hooks blocks the job again. An expired approval keeps the same spec from
// being proposed again as a block does, but is no failure: the job does
// not show as blocked.
func (dec *decision) createRule(v *jobView, h holds.Hold, active *structs.Deployment) {
	blocked := v.block.Blocks(v.specHash, v.liveMod)
	retried := v.block != nil && v.block.Retried
	dec.status.Blocked = v.block.Failure(v.specHash, v.liveMod)
	dec.create, dec.skipRegister, dec.consumeLift, dec.failWith = false, false, false, ""
	wantDeploy := !v.inSync || retried
	if !wantDeploy || v.policy == structs.PolicyNone || blocked || h.Held() || active != nil ||
		len(v.depProblems) > 0 || v.waitFor() != "" {
		return
	}
	dec.create = true
	dec.skipRegister = v.inSync
	dec.consumeLift = v.lift != nil
	dec.failWith = strings.Join(v.hookProblems, "; ")
	dec.status.Blocked = dec.failWith != ""
}
