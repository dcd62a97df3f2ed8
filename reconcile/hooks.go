package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// runHooks runs the hooks of one phase in order. Each run is recorded as
// dispatching before the dispatch and as running with its child job after
// it; a run found dispatching with no child in Nomad (the dispatch may or
// may not have reached it) fails rather than run twice.
func (m *Manager) runHooks(ctx context.Context, d *structs.Deployment, phase structs.HookPhase) error {
	for _, h := range d.HooksOf(phase) {
		run, ok := d.HookRun(phase, h.Position)
		switch {
		case !ok:
			if err := m.dispatchHook(ctx, d, h); err != nil {
				return err
			}
			return nil
		case run.State == structs.HookRunDispatching:
			child, err := m.nomad.FindDispatched(ctx, d.Namespace, h.RevisionJobID, run.Token)
			if err != nil {
				if errors.Is(err, nomadx.ErrJobNotFound) {
					return m.hookFailed(d, h, run, "the dispatch was recorded but Nomad has no run for it: failing rather than running the hook twice")
				}
				return err
			}
			run.State, run.DispatchedJobID = structs.HookRunRunning, child
			return m.update(d, &structs.DeploymentPatch{HookRun: &run,
				Message: fmt.Sprintf("%s hook %s: found run %s after a restart", phase, h.Name, child)})
		case run.State == structs.HookRunRunning:
			outcome, msg, err := m.nomad.DispatchedOutcome(ctx, d.Namespace, run.DispatchedJobID)
			if err != nil {
				return err
			}
			switch outcome {
			case nomadx.DispatchSucceeded:
				run.State, run.FinishedAt = structs.HookRunSucceeded, m.now()
				if err := m.update(d, &structs.DeploymentPatch{HookRun: &run,
					Message: fmt.Sprintf("%s hook %s succeeded (%s)", phase, h.Name, run.DispatchedJobID)}); err != nil {
					return err
				}
				fresh, err := m.srv.State().Deployment(d.ID)
				if err != nil || fresh == nil {
					return err
				}
				*d = *fresh
				continue
			case nomadx.DispatchFailed:
				return m.hookFailed(d, h, run, "failed: "+msg)
			}
			timeout := h.Timeout
			if timeout > 0 && m.now().Sub(run.StartedAt) > timeout {
				return m.hookFailed(d, h, run, fmt.Sprintf("timed out after %s", timeout))
			}
			return nil
		case run.State == structs.HookRunSucceeded:
			continue
		case run.State == structs.HookRunFailed:
			return m.fail(d, fmt.Sprintf("%s hook %s failed: %s", phase, h.Name, run.Error))
		}
	}
	next := structs.StateApplying
	if phase == structs.PhasePost {
		next = structs.StateCompleted
	}
	return m.transition(d, next, fmt.Sprintf("%s hooks succeeded", phase), "")
}

func (m *Manager) hookFailed(d *structs.Deployment, h structs.FrozenHook, run structs.HookRun, why string) error {
	run.State, run.Error, run.FinishedAt = structs.HookRunFailed, why, m.now()
	msg := fmt.Sprintf("%s hook %s %s", h.Phase, h.Name, why)
	return m.transitionWith(d, structs.StateFailed, "", msg, &structs.DeploymentPatch{HookRun: &run})
}

// dispatchHook registers the hook's revision job if needed, records the
// intent, and dispatches with the run's idempotency token.
func (m *Manager) dispatchHook(ctx context.Context, d *structs.Deployment, h structs.FrozenHook) error {
	if err := m.ensureRevision(ctx, d.Namespace, h); err != nil {
		return err
	}
	run := structs.HookRun{Hook: h.Name, Phase: h.Phase, Position: h.Position,
		Token: structs.HookRunToken(d.ID, h.Phase, h.Position), State: structs.HookRunDispatching, StartedAt: m.now()}
	if err := m.update(d, &structs.DeploymentPatch{HookRun: &run,
		Message: fmt.Sprintf("%s hook %s: dispatching %s", h.Phase, h.Name, h.RevisionJobID)}); err != nil {
		return err
	}
	meta := map[string]string{}
	values := map[string]string{"nops_deployment": d.ID, "nops_job": d.JobID, "nops_commit": d.Commit, "nops_phase": string(h.Phase)}
	for _, k := range h.MetaKeys {
		if v, ok := values[k]; ok {
			meta[k] = v
		}
	}
	child, _, err := m.nomad.Dispatch(ctx, d.Namespace, h.RevisionJobID, meta, run.Token)
	if err != nil {
		// The next pass finds the run by its token, or fails the hook.
		return fmt.Errorf("dispatch %s: %w", h.RevisionJobID, err)
	}
	run.State, run.DispatchedJobID = structs.HookRunRunning, child
	return m.update(d, &structs.DeploymentPatch{HookRun: &run,
		Message: fmt.Sprintf("%s hook %s: dispatched %s", h.Phase, h.Name, child)})
}

// ensureRevision registers the hook revision job unless Nomad already runs
// it. Two deployments that share a revision share its job.
func (m *Manager) ensureRevision(ctx context.Context, namespace string, h structs.FrozenHook) error {
	live, err := m.nomad.Job(ctx, namespace, h.RevisionJobID)
	if err != nil && !errors.Is(err, nomadx.ErrJobNotFound) {
		return err
	}
	if live != nil && (live.Stop == nil || !*live.Stop) {
		return nil
	}
	job, err := decodeJob(h.Spec)
	if err != nil {
		return err
	}
	var index uint64
	if live != nil && live.JobModifyIndex != nil {
		index = *live.JobModifyIndex
	}
	if _, err := m.nomad.Register(ctx, job, index); err != nil && !errors.Is(err, nomadx.ErrIndexMismatch) {
		return fmt.Errorf("register hook revision %s: %w", h.RevisionJobID, err)
	}
	return nil
}

// cleanupHookRevisions stops the hook revision jobs that no active
// deployment needs. A revision is known by the hooks of the deployments in
// the state: <hook>-<8 hex>.
func (m *Manager) cleanupHookRevisions(ctx context.Context) {
	st := m.srv.State()
	list, _, err := st.Deployments(fsmFilter("", ""))
	if err != nil {
		return
	}
	needed := map[string]bool{}
	known := map[string]bool{}
	for _, d := range list {
		for _, h := range d.Hooks {
			k := structs.JobKey(d.Namespace, h.RevisionJobID)
			known[k] = true
			if d.State.Active() {
				needed[k] = true
			}
		}
	}
	for k := range known {
		if needed[k] {
			continue
		}
		namespace, jobID, _ := strings.Cut(k, "/")
		live, err := m.nomad.Job(ctx, namespace, jobID)
		if err != nil || live == nil || (live.Stop != nil && *live.Stop) {
			continue
		}
		if _, err := m.nomad.Deregister(ctx, namespace, jobID, false); err != nil {
			m.logger.Warn("stop unused hook revision", "job", k, "error", err)
			continue
		}
		m.logger.Info("stopped unused hook revision", "job", k)
	}
}
