package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// dispatchMeta is the dispatch meta Nops can pass to a hook run, for the
// keys the hook declares.
func dispatchMeta(d *structs.Deployment, h structs.FrozenHook) map[string]string {
	values := map[string]string{meta.DispatchDeployment: d.ID, meta.DispatchJob: d.JobID,
		meta.DispatchCommit: d.Commit, meta.DispatchPhase: string(h.Phase)}
	out := map[string]string{}
	for _, k := range h.MetaKeys {
		if v, ok := values[k]; ok {
			out[k] = v
		}
	}
	return out
}

// runHooks runs the hooks of one phase in order. Each run is recorded as
// dispatching before the dispatch and as running with its child job after
// it; a run found dispatching with no child in Nomad (the dispatch may or
// may not have reached it) fails rather than run twice.
func (m *Applier) runHooks(ctx context.Context, d *structs.Deployment, phase structs.HookPhase) error {
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
					return m.hookFailed(d, h, run, "failed: its dispatch was recorded but Nomad has no run for it (failing rather than running the hook twice)")
				}
				return err
			}
			run.State, run.DispatchedJobID = structs.HookRunRunning, child
			return m.update(d, &structs.DeploymentPatch{HookRun: &run,
				Message: fmt.Sprintf("%s hook %s: found run %s after a restart", phase, h.Name, child)})
		case run.State == structs.HookRunRunning:
			outcome, msg, err := m.nomad.DispatchedOutcome(ctx, d.Namespace, run.DispatchedJobID)
			if err != nil {
				if errors.Is(err, nomadx.ErrJobNotFound) {
					return m.hookFailed(d, h, run, fmt.Sprintf("failed: Nomad no longer has its run %s", run.DispatchedJobID))
				}
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
			// The timeout counts from the dispatch recorded in the state,
			// so a restart or a failover does not extend it.
			if h.Timeout > 0 && !m.now().Before(run.StartedAt.Add(h.Timeout)) {
				return m.hookTimedOut(ctx, d, h, run)
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

// hookTimedOut fails a run at its hook timeout and stops its job in Nomad,
// so that a run the deployment gave up on does not go on beside a retry.
func (m *Applier) hookTimedOut(ctx context.Context, d *structs.Deployment, h structs.FrozenHook, run structs.HookRun) error {
	why := fmt.Sprintf("timed out after %s (nops_hook_timeout)", h.Timeout)
	if _, err := m.nomad.Deregister(ctx, d.Namespace, run.DispatchedJobID, false); err != nil && !errors.Is(err, nomadx.ErrJobNotFound) {
		m.logger.Warn("stop timed-out hook run", "deployment", d.ID, "job", run.DispatchedJobID, "error", err)
		why += fmt.Sprintf("; stopping its run %s failed: %v", run.DispatchedJobID, err)
	} else {
		why += fmt.Sprintf("; its run %s was stopped", run.DispatchedJobID)
	}
	return m.hookFailed(d, h, run, why)
}

func (m *Applier) hookFailed(d *structs.Deployment, h structs.FrozenHook, run structs.HookRun, why string) error {
	run.State, run.Error, run.FinishedAt = structs.HookRunFailed, why, m.now()
	msg := fmt.Sprintf("%s hook %s %s", h.Phase, h.Name, why)
	return m.transitionWith(d, structs.StateFailed, "", msg, &structs.DeploymentPatch{HookRun: &run})
}

// dispatchHook registers the hook's revision job if needed, records the
// intent, and dispatches with the run's idempotency token.
func (m *Applier) dispatchHook(ctx context.Context, d *structs.Deployment, h structs.FrozenHook) error {
	if err := m.ensureRevision(ctx, d.Namespace, h); err != nil {
		return err
	}
	run := structs.HookRun{Hook: h.Name, Phase: h.Phase, Position: h.Position,
		Token: structs.HookRunToken(d.ID, h.Phase, h.Position), State: structs.HookRunDispatching, StartedAt: m.now()}
	if err := m.update(d, &structs.DeploymentPatch{HookRun: &run,
		Message: fmt.Sprintf("%s hook %s: dispatching %s", h.Phase, h.Name, h.RevisionJobID)}); err != nil {
		return err
	}
	child, _, err := m.nomad.Dispatch(ctx, d.Namespace, h.RevisionJobID, dispatchMeta(d, h), run.Token)
	m.noteRefusal(d.Key(), fmt.Sprintf("the dispatch of %s hook %s", h.Phase, h.Name), err)
	if err != nil {
		if refused(err) {
			// Nomad answered and created no run: fail with its reason.
			return m.hookFailed(d, h, run, fmt.Sprintf("failed: Nomad refused the dispatch of %s: %v", h.RevisionJobID, err))
		}
		// The outcome is unknown: the next pass finds the run by its
		// token, or fails the hook.
		return fmt.Errorf("dispatch %s: %w", h.RevisionJobID, err)
	}
	run.State, run.DispatchedJobID = structs.HookRunRunning, child
	return m.update(d, &structs.DeploymentPatch{HookRun: &run,
		Message: fmt.Sprintf("%s hook %s: dispatched %s", h.Phase, h.Name, child)})
}

// ensureRevision registers the hook revision job unless Nomad already runs
// it. Two deployments that share a revision share its job.
func (m *Applier) ensureRevision(ctx context.Context, namespace string, h structs.FrozenHook) error {
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

// revisionSuffix matches the "-<8 hex>" a hook revision job ID ends with.
var revisionSuffix = regexp.MustCompile(`-[0-9a-f]{8}$`)

// stopUnusedRevisions stops the hook revision jobs (<hook>-<8 hex>) that run
// in Nomad and that no active deployment needs. Only revisions frozen by a
// deployment in the state are considered, so Nops never stops a job it did
// not register. live is the list of live jobs of the managed namespaces.
//
// It runs after every detection cycle, so the quiet path stays cheap: the
// active deployments come from their index, and the whole deployment
// history is read only when a running job looks like an unneeded revision.
func (m *Detector) stopUnusedRevisions(ctx context.Context, live map[string]*api.JobListStub) {
	st := m.srv.State()
	active, err := m.activeDeployments()
	if err != nil {
		m.logger.Warn("read active deployments for hook revision clean-up", "error", err)
		return
	}
	needed := map[string]bool{}
	for _, d := range active {
		for _, h := range d.Hooks {
			needed[structs.JobKey(d.Cluster, d.Namespace, h.RevisionJobID)] = true
		}
	}
	var candidates []string
	for k, stub := range live {
		if !stub.Stop && !needed[k] && revisionSuffix.MatchString(stub.ID) {
			candidates = append(candidates, k)
		}
	}
	if len(candidates) == 0 {
		return
	}
	list, _, err := st.Deployments(m.fsmFilter("", ""))
	if err != nil {
		m.logger.Warn("read deployments for hook revision clean-up", "error", err)
		return
	}
	known := map[string][]string{}
	for _, d := range list {
		for _, h := range d.Hooks {
			k := structs.JobKey(d.Cluster, d.Namespace, h.RevisionJobID)
			if !slices.Contains(known[k], d.Key()) {
				known[k] = append(known[k], d.Key())
			}
		}
	}
	sort.Strings(candidates)
	for _, k := range candidates {
		if len(known[k]) == 0 {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		_, namespace, jobID, _ := structs.SplitJobKey(k)
		_, err := m.nomad.Deregister(ctx, namespace, jobID, false)
		for _, user := range known[k] {
			// Named on the jobs whose hooks it ran.
			m.noteRefusal(user, "the stop of unused hook revision "+jobID, err)
		}
		if err != nil && !errors.Is(err, nomadx.ErrJobNotFound) {
			m.logger.Warn("stop unused hook revision", "job", k, "error", err)
			continue
		}
		m.logger.Info("stopped unused hook revision", "job", k)
	}
}

// refused reports whether Nomad answered a request with a client error: it
// did not act on it, so nothing was created.
func refused(err error) bool {
	code := 0
	var ure api.UnexpectedResponseError
	var pure *api.UnexpectedResponseError
	switch {
	case errors.As(err, &ure) && ure.HasStatusCode():
		code = ure.StatusCode()
	case errors.As(err, &pure) && pure != nil && pure.HasStatusCode():
		code = pure.StatusCode()
	}
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}
