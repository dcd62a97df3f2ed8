package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

func encodeJob(j *api.Job) ([]byte, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encode job: %w", err)
	}
	return b, nil
}

func decodeJob(b []byte) (*api.Job, error) {
	var j api.Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("decode job: %w", err)
	}
	return &j, nil
}

// hookRevisionSpec returns the hook job renamed to its revision ID.
func hookRevisionSpec(hook *api.Job, revisionID string) ([]byte, error) {
	j, err := copyJob(hook)
	if err != nil {
		return nil, err
	}
	j.ID = &revisionID
	j.Name = &revisionID
	return encodeJob(j)
}

// fsmFilter selects the deployments of a job of the core's cluster, or
// every deployment of the cluster when namespace and jobID are empty.
func (m *core) fsmFilter(namespace, jobID string) fsm.DeploymentFilter {
	return fsm.DeploymentFilter{Cluster: m.cluster, Namespace: namespace, JobID: jobID}
}

// ApplyOnce advances every active deployment by what it can do now (SPEC
// section 5). It reports whether a deployment ended.
func (m *Applier) ApplyOnce(ctx context.Context) (bool, error) {
	active, err := m.activeDeployments()
	if err != nil {
		return false, fmt.Errorf("read active deployments: %w", err)
	}
	return m.applyList(ctx, active)
}

// applyList advances the given active deployments.
func (m *Applier) applyList(ctx context.Context, active []*structs.Deployment) (bool, error) {
	ended := false
	var errs []error
	for _, d := range active {
		if ctx.Err() != nil {
			return ended, ctx.Err()
		}
		done, err := m.advance(ctx, d)
		m.noteRefusal(d.Key(), "a deployment step", err)
		if err != nil {
			if errors.Is(err, structs.ErrNotLeader) {
				return ended, err
			}
			m.logger.Error("deployment step failed; will retry", "deployment", d.ID, "job", d.Key(), "state", d.State, "error", err)
			errs = append(errs, err)
		}
		ended = ended || done
	}
	// A deployment that ended triggers detection (applyLoop), whose cycle
	// also stops the hook revisions no active deployment needs any more.
	return ended, errors.Join(errs...)
}

// advance runs the steps of one deployment until it must wait: a step that
// recorded something (a new state, a register, a hook run) is followed at
// once by the next, so a job healthy once registered completes in the pass
// that registers it. It reports whether the deployment ended.
func (m *Applier) advance(ctx context.Context, d *structs.Deployment) (bool, error) {
	p := &pass{}
	for i := 0; i < maxStepsPerPass; i++ {
		before, beforeIndex := d.State, d.ModifyIndex
		var err error
		switch d.State {
		case structs.StateDetected:
			err = m.start(ctx, d, p)
		case structs.StatePendingApproval:
			return false, nil
		case structs.StatePreHook:
			err = m.runHooks(ctx, d, structs.PhasePre)
		case structs.StateApplying:
			err = m.applying(ctx, d, p)
		case structs.StatePostHook:
			err = m.runHooks(ctx, d, structs.PhasePost)
		}
		if err != nil {
			return false, err
		}
		if d.State.Terminal() {
			return true, nil
		}
		// Read back what was committed before the next step.
		fresh, err := m.srv.State().Deployment(d.ID)
		if err != nil || fresh == nil {
			return false, err
		}
		if fresh.State == before && fresh.ModifyIndex == beforeIndex {
			// The step recorded nothing: it waits for Nomad.
			return false, nil
		}
		*d = *fresh
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
	}
	return false, nil
}

// pass is what one deployment's steps of one pass hand on to the next.
type pass struct {
	// live is the live job as read just after the register: the first
	// health check of the pass reads it rather than Nomad.
	live *api.Job
}

// takeLive returns the live job the pass read, once.
func (p *pass) takeLive() *api.Job {
	live := p.live
	p.live = nil
	return live
}

// maxStepsPerPass bounds the steps of one deployment in one pass: enough
// for the longest chain (start, hooks, register, health), short of a loop.
const maxStepsPerPass = 32

// start moves a detected deployment by its policy, unless it is held (the
// next detection cycle supersedes it). A deployment that starts by its
// register records the register's intent in the same entry as its start
// (startRegister).
func (m *Applier) start(ctx context.Context, d *structs.Deployment, p *pass) error {
	held, err := m.held(d)
	if err != nil || held {
		return err
	}
	if wait, err := m.awaitsPromotion(d); err != nil || wait {
		return err
	}
	switch {
	case d.Policy == structs.PolicyApproval:
		return m.transition(d, structs.StatePendingApproval, "waiting for approval", "")
	case d.StartState() == structs.StateApplying && !d.SkipRegister:
		return m.startRegister(ctx, d, p)
	default:
		return m.transition(d, d.StartState(), "policy auto: starting", "")
	}
}

// startRegister starts a deployment of policy auto without pre-hooks: one
// entry moves it to applying and records the register's intent, and the
// register follows. It is register (below) with one round trip through
// Raft fewer between a commit and Nomad. A job with a scaling block whose
// live job moved since detection starts without the intent; its register
// step then looks into the move.
func (m *Applier) startRegister(ctx context.Context, d *structs.Deployment, p *pass) error {
	job, err := decodeJob(d.Spec)
	if err != nil {
		return m.transition(d, structs.StateApplying, "policy auto: starting", "")
	}
	if hasScaling(job) && d.JobModifyIndex != 0 {
		live, err := m.liveJob(ctx, d.Namespace, d.JobID)
		if err != nil {
			return err
		}
		if live == nil || live.JobModifyIndex == nil || *live.JobModifyIndex != d.JobModifyIndex {
			return m.transition(d, structs.StateApplying, "policy auto: starting", "")
		}
		nomadx.KeepLiveCounts(job, live)
	}
	now := m.now()
	deadline := now.Add(applyTimeout(d))
	if err := m.transitionWith(d, structs.StateApplying,
		fmt.Sprintf("policy auto: starting; registering with check-and-set on modify index %d", d.JobModifyIndex), "",
		&structs.DeploymentPatch{RegisterStartedAt: &now, HealthDeadline: &deadline}); err != nil {
		return err
	}
	d.RegisterStartedAt, d.HealthDeadline = now, deadline
	return m.doRegister(ctx, d, job, false, p)
}

// applyTimeout is the deployment's apply timeout, or the default.
func applyTimeout(d *structs.Deployment) time.Duration {
	if d.ApplyTimeout > 0 {
		return d.ApplyTimeout
	}
	return structs.DefaultApplyTimeout
}

// held reports whether a deployment's job is held now, by the rule of
// holds.Evaluate: a deployment that consumed a deploy now is not held by
// a closed window, but a pause holds it.
func (m *Applier) held(d *structs.Deployment) (bool, error) {
	st := m.srv.State()
	pauses, err := st.Pauses()
	if err != nil {
		return false, err
	}
	windows, err := st.Windows()
	if err != nil {
		return false, err
	}
	return holds.Evaluate(pauses, holds.At(windows, m.now()), d.LiftedWindow, d.Cluster, d.Namespace, d.JobID).Held(), nil
}

// awaitsPromotion reports whether a detected deployment must still wait
// for its cluster's promotion order (SPEC section 16): the rule
// (promotionWait) over the required clusters' states read now, unless an
// operator let it skip the order. It is the gate: detection only shows
// the wait and wakes the deployment when it ends.
func (m *Applier) awaitsPromotion(d *structs.Deployment) (bool, error) {
	if len(m.promotion().Requires) == 0 || d.SkipRequirements {
		return false, nil
	}
	reqs, err := m.requirementStates(d.Namespace, d.JobID, d.Repository, d.Commit)
	if err != nil {
		return false, err
	}
	why, _ := promotionWait(reqs, d.Commit, m.promotion().Bake, m.now())
	if why != "" {
		m.logger.Debug("deployment waits for the promotion order", "deployment", d.ID, "job", d.Key(), "why", why)
	}
	return why != "", nil
}

// applying registers the job (once) and waits for it to be healthy.
func (m *Applier) applying(ctx context.Context, d *structs.Deployment, p *pass) error {
	now := m.now()
	timeout := applyTimeout(d)
	switch {
	case d.SkipRegister && !d.Registered:
		live, err := m.nomad.Job(ctx, d.Namespace, d.JobID)
		if err != nil {
			return m.fail(d, fmt.Sprintf("read live job: %v", err))
		}
		v, deadline, reg := version(live), now.Add(timeout), true
		start := now
		return m.update(d, &structs.DeploymentPatch{RegisterStartedAt: &start, Registered: &reg, JobVersion: &v,
			HealthDeadline: &deadline, Message: fmt.Sprintf("the live job already matches git (version %d): waiting for health", v)})
	case d.RegisterStartedAt.IsZero():
		return m.register(ctx, d, now, timeout, p)
	case !d.Registered:
		return m.resumeRegister(ctx, d, now, p)
	}
	return m.waitHealthy(ctx, d, now, timeout, p.takeLive())
}

func version(j *api.Job) uint64 {
	if j == nil || j.Version == nil {
		return 0
	}
	return *j.Version
}

// register records the intent and registers with a check-and-set on the
// modify index the detection plan saw. It does not plan again: the
// deployment's spec is fixed, so while the live job's modify index is the
// one the plan saw, the plan's answer holds, and the check-and-set refuses
// the register if the live job changed since (doRegister fails the
// deployment then, with nothing registered; detection plans the job again
// against what Nomad now holds). A job with a scaling block reads the live
// job first, for the counts left to an autoscaler; when its modify index
// moved, the job is planned again, and the check-and-set index moves only
// if nothing but those counts changed (rebaseScaled).
func (m *Applier) register(ctx context.Context, d *structs.Deployment, now time.Time, timeout time.Duration, p *pass) error {
	job, err := decodeJob(d.Spec)
	if err != nil {
		return m.fail(d, err.Error())
	}
	var rebase *uint64
	if hasScaling(job) && d.JobModifyIndex != 0 {
		live, err := m.liveJob(ctx, d.Namespace, d.JobID)
		if err != nil {
			return err
		}
		nomadx.KeepLiveCounts(job, live)
		var why string
		if rebase, why, err = m.rebaseScaled(ctx, d, job, live); err != nil {
			return err
		}
		if why != "" {
			return m.fail(d, why)
		}
	}
	deadline := now.Add(timeout)
	msg := fmt.Sprintf("registering with check-and-set on modify index %d", d.JobModifyIndex)
	if rebase != nil {
		msg = fmt.Sprintf("registering with check-and-set on modify index %d (only the counts left to an autoscaler changed since %d)",
			*rebase, d.JobModifyIndex)
	}
	if err := m.update(d, &structs.DeploymentPatch{RegisterStartedAt: &now, HealthDeadline: &deadline,
		JobModifyIndex: rebase, Message: msg}); err != nil {
		return err
	}
	d.RegisterStartedAt, d.HealthDeadline = now, deadline
	if rebase != nil {
		d.JobModifyIndex = *rebase
	}
	return m.doRegister(ctx, d, job, false, p)
}

// rebaseScaled decides, for a job with a scaling block whose live job
// (live, nil when gone) has been read, on the index of the check-and-set.
// While the live modify index is the one detection saw, nothing changed and
// no plan is made. Otherwise the job (with the live counts) is planned
// again: when the diff is the one detection saw and the live job differs
// from the version at that index only by autoscaled counts, the register
// moves to the live index (rebase); any other change is a reason to fail,
// returned in why.
func (m *Applier) rebaseScaled(ctx context.Context, d *structs.Deployment, job, live *api.Job) (rebase *uint64, why string, err error) {
	if live != nil && live.JobModifyIndex != nil && *live.JobModifyIndex == d.JobModifyIndex {
		return nil, "", nil
	}
	plan, err := m.nomad.Plan(ctx, job)
	if err != nil {
		return nil, "", fmt.Errorf("plan: %w", err)
	}
	if plan.JobModifyIndex != d.JobModifyIndex && nomadx.DiffHash(plan.Diff) == d.DiffHash && live != nil &&
		live.JobModifyIndex != nil && *live.JobModifyIndex == plan.JobModifyIndex {
		// A scale by an autoscaler is not a change: register on the live
		// index, with the live counts the plan already used.
		if why := m.autoscaledOnly(ctx, d, live); why == nil {
			rebase = &plan.JobModifyIndex
		} else {
			m.logger.Debug("the live job changed by more than autoscaled counts", "deployment", d.ID, "change", why)
		}
	}
	if (plan.JobModifyIndex != d.JobModifyIndex && rebase == nil) || nomadx.DiffHash(plan.Diff) != d.DiffHash {
		return nil, fmt.Sprintf("the job changed since detection (modify index %d, now %d): nothing registered",
			d.JobModifyIndex, plan.JobModifyIndex), nil
	}
	return rebase, "", nil
}

// doRegister registers job with a check-and-set on the detection index.
// resumed says that an earlier attempt's outcome is unknown: a failed
// check-and-set may then be that attempt landing, and is looked into
// rather than taken as "nothing registered". The live job read after the
// register, for the version Nomad gave it, is kept in p for the first
// health check of the same pass.
func (m *Applier) doRegister(ctx context.Context, d *structs.Deployment, job *api.Job, resumed bool, p *pass) error {
	m.beginOwnRegister(d.Key())
	res, err := m.nomad.Register(ctx, job, d.JobModifyIndex)
	var index uint64
	if err == nil {
		index = res.JobModifyIndex
	}
	m.endOwnRegister(d.Key(), d.SpecHash, index)
	m.noteRefusal(d.Key(), "the register", err)
	if err != nil {
		switch {
		case errors.Is(err, nomadx.ErrIndexMismatch) && resumed:
			return m.registerOutcome(ctx, d, job)
		case errors.Is(err, nomadx.ErrIndexMismatch):
			return m.fail(d, fmt.Sprintf("the job changed since detection (Nomad refused the check-and-set on modify index %d): nothing registered", d.JobModifyIndex))
		case refused(err) && !resumed:
			return m.fail(d, fmt.Sprintf("Nomad refused the register: %v: nothing registered", err))
		}
		return err
	}
	live, err := m.nomad.Job(ctx, d.Namespace, d.JobID)
	if err != nil {
		return fmt.Errorf("read registered job: %w", err)
	}
	p.live = live
	v, reg := version(live), true
	return m.update(d, &structs.DeploymentPatch{Registered: &reg, JobVersion: &v, NomadEvalID: &res.EvalID,
		Message: fmt.Sprintf("registered job version %d (evaluation %s)", v, structs.ShortID(res.EvalID))})
}

// resumeRegister handles a register whose outcome was not recorded: after a
// crash, a failover, or a register Nomad did not answer. It registers again
// only if the job's modify index is still the one read at detection (the
// check-and-set makes that safe), and only within the apply timeout;
// otherwise it finds out whether its own register went through.
func (m *Applier) resumeRegister(ctx context.Context, d *structs.Deployment, now time.Time, p *pass) error {
	job, err := decodeJob(d.Spec)
	if err != nil {
		return m.fail(d, err.Error())
	}
	live, err := m.liveJob(ctx, d.Namespace, d.JobID)
	if err != nil {
		return err
	}
	if live != nil {
		// The register keeps the counts Nops leaves to an autoscaler.
		nomadx.KeepLiveCounts(job, live)
	}
	liveMod := uint64(0)
	if live != nil && live.JobModifyIndex != nil {
		liveMod = *live.JobModifyIndex
	}
	if liveMod == d.JobModifyIndex {
		if !d.HealthDeadline.IsZero() && now.After(d.HealthDeadline) {
			return m.fail(d, fmt.Sprintf("apply timeout: the register did not go through within %s: nothing registered", d.ApplyTimeout))
		}
		m.logger.Info("register outcome unknown and the job is unchanged: registering again", "deployment", d.ID)
		return m.doRegister(ctx, d, job, true, p)
	}
	return m.registerOutcome(ctx, d, job)
}

// planWithLiveCounts plans job after giving the groups it leaves to an
// autoscaler their live counts (live may be nil).
func (m *Applier) planWithLiveCounts(ctx context.Context, job, live *api.Job) (*nomadx.PlanResult, error) {
	if live != nil {
		nomadx.KeepLiveCounts(job, live)
	}
	return m.nomad.Plan(ctx, job)
}

// registerOutcome decides, once the live job moved past the detection
// index, whether the deployment's own register went through: it did if the
// live job matches git. If not, Nops cannot tell whether its register
// landed and was changed since (by a person, or by auto_revert); it fails
// the deployment as registered, so that the block survives changes of the
// live job and no apply-and-revert loop can start.
func (m *Applier) registerOutcome(ctx context.Context, d *structs.Deployment, job *api.Job) error {
	live, err := m.liveJob(ctx, d.Namespace, d.JobID)
	if err != nil {
		return err
	}
	plan, err := m.planWithLiveCounts(ctx, job, live)
	if err != nil {
		return err
	}
	reg := true
	if !plan.InSync() {
		return m.transitionWith(d, structs.StateFailed, "",
			"the job changed after the register was sent and does not match git; the register may have gone through",
			&structs.DeploymentPatch{Registered: &reg})
	}
	v := version(live)
	return m.update(d, &structs.DeploymentPatch{Registered: &reg, JobVersion: &v,
		Message: fmt.Sprintf("the register went through before the restart (job version %d)", v)})
}

// waitHealthy checks the health of the registered version, within the apply
// timeout; the timeout pauses while canaries wait for promotion. live, when
// set, is the live job as the register's own step read it, in this pass.
func (m *Applier) waitHealthy(ctx context.Context, d *structs.Deployment, now time.Time, timeout time.Duration, live *api.Job) error {
	h, err := m.nomad.HealthOf(ctx, d.Namespace, d.JobID, live, d.JobVersion, d.NomadEvalID)
	if err != nil {
		return err
	}
	if h.DeploymentID != "" && h.DeploymentID != d.NomadDeploymentID {
		if err := m.update(d, &structs.DeploymentPatch{NomadDeploymentID: &h.DeploymentID,
			Message: "Nomad deployment " + structs.ShortID(h.DeploymentID)}); err != nil {
			return err
		}
		d.NomadDeploymentID = h.DeploymentID
	}
	switch h.State {
	case nomadx.HealthHealthy:
		next := structs.StateCompleted
		if len(d.HooksOf(structs.PhasePost)) > 0 {
			next = structs.StatePostHook
		}
		return m.transition(d, next, "healthy: "+h.Message, "")
	case nomadx.HealthFailed:
		return m.fail(d, "not healthy: "+h.Message)
	case nomadx.HealthAwaitingPromotion:
		if !d.HealthDeadline.IsZero() {
			var paused time.Time
			return m.update(d, &structs.DeploymentPatch{HealthDeadline: &paused,
				Message: "canaries wait for promotion: the apply timeout is paused"})
		}
		return nil
	}
	if d.HealthDeadline.IsZero() {
		// Promoted: the timeout restarts in full.
		deadline := now.Add(timeout)
		return m.update(d, &structs.DeploymentPatch{HealthDeadline: &deadline,
			Message: fmt.Sprintf("canaries promoted: the apply timeout restarts (%s)", timeout)})
	}
	if now.After(d.HealthDeadline) {
		return m.fail(d, fmt.Sprintf("apply timeout: not healthy after %s (%s)", timeout, h.Message))
	}
	return nil
}

// Promote promotes the canaries of a deployment's Nomad deployment. The
// caller records the decision and then calls TriggerApply.
func (m *Applier) Promote(ctx context.Context, d *structs.Deployment) error {
	if d.State != structs.StateApplying {
		return fmt.Errorf("%w: deployment %s is %s, not applying", structs.ErrConflict, d.ID, d.State)
	}
	nd := d.NomadDeploymentID
	if nd == "" {
		latest, err := m.nomad.LatestDeployment(ctx, d.Namespace, d.JobID)
		if err != nil {
			return fmt.Errorf("%w: read the Nomad deployment of %s: %w", structs.ErrUpstream, d.ID, err)
		}
		if latest == nil {
			return fmt.Errorf("%w: deployment %s has no Nomad deployment to promote", structs.ErrConflict, d.ID)
		}
		nd = latest.ID
	}
	if err := m.nomad.PromoteDeployment(ctx, nd); err != nil {
		// Nomad refusing the promotion (nothing to promote) is a
		// conflict; Nomad not answering is not.
		kind := structs.ErrUpstream
		if refused(err) {
			kind = structs.ErrConflict
		}
		return fmt.Errorf("%w: promote Nomad deployment %s: %w", kind, structs.ShortID(nd), err)
	}
	// The caller records the decision, then wakes the apply loop: the
	// promotion comes before the completion it leads to in the audit log.
	return nil
}
