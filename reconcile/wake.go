package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// Deployments move on events, not on a clock. Nomad's deployment and
// allocation events arrive on the leader's one event stream (livewatch.go),
// shared by every active deployment: an event of the Nomad deployment a
// deployment waits on, of the job it applies, or of a hook run's child job
// wakes the apply loop for that deployment alone. Within a pass a
// deployment runs every step it can (pre-hooks, register, health,
// post-hooks) one after the other, each recorded through Raft before it
// acts, so only the leader can drive one: a deposed leader's pass fails at
// its first write. The engine interval remains the pace while the stream is
// down or a step failed; while it is up, a pass over every active
// deployment runs only at the nearest deadline (apply or hook timeout) or
// every applySafetyNet drift intervals. Watching therefore costs one
// stream per managed namespace, whatever the number of deployments.

// mark adds keys, under m.mu, to the set *set (made on first use) and then
// calls signal to wake the loop that takes the set; no keys do nothing.
func (m *core) mark(set *map[string]struct{}, keys []string, signal func()) {
	if len(keys) == 0 {
		return
	}
	m.mu.Lock()
	if *set == nil {
		*set = map[string]struct{}{}
	}
	for _, k := range keys {
		(*set)[k] = struct{}{}
	}
	m.mu.Unlock()
	signal()
}

// wakeDeployments asks for a pass over the given deployments only.
func (m *core) wakeDeployments(ids ...string) { m.mark(&m.woken, ids, m.signalApply) }

// takeWakes returns and clears what the apply loop was woken for: every
// active deployment, or the listed ones.
func (m *Applier) takeWakes() (all bool, ids []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	all, m.applyAll = m.applyAll, false
	for id := range m.woken {
		ids = append(ids, id)
	}
	m.woken = nil
	return all, ids
}

// ApplyDeployments advances the given deployments, those of them still
// active, like ApplyOnce. It reports whether one ended, in this pass or
// before it was woken (a rejection ends a deployment).
func (m *Applier) ApplyDeployments(ctx context.Context, ids []string) (bool, error) {
	st := m.srv.State()
	var list []*structs.Deployment
	endedBefore := false
	for _, id := range ids {
		d, err := st.Deployment(id)
		if err != nil {
			return false, fmt.Errorf("read deployment %s: %w", id, err)
		}
		switch {
		case d == nil, structs.ClusterName(d.Cluster) != m.cluster:
			// Another cluster's deployment is its own applier's.
		case d.State.Terminal():
			endedBefore = true
		default:
			list = append(list, d)
		}
	}
	ended, err := m.applyList(ctx, list)
	return ended || endedBefore, err
}

// routeActivity wakes the deployments that a batch of Nomad deployment and
// allocation changes may move, and returns their IDs.
func (m *Applier) routeActivity(acts []nomadx.Activity) []string {
	if len(acts) == 0 {
		return nil
	}
	active, err := m.activeDeployments()
	if err != nil {
		m.logger.Warn("read active deployments for Nomad events", "error", err)
		return nil
	}
	var ids []string
	for _, d := range active {
		if activityConcerns(d, acts) {
			ids = append(ids, d.ID)
		}
	}
	m.wakeDeployments(ids...)
	return ids
}

// activityConcerns reports whether one of acts is about what d waits on.
func activityConcerns(d *structs.Deployment, acts []nomadx.Activity) bool {
	for _, a := range acts {
		ns := a.Namespace
		if ns == "" {
			ns = "default"
		}
		if ns != d.Namespace {
			continue
		}
		switch d.State {
		case structs.StateApplying:
			if a.JobID == d.JobID || (d.NomadDeploymentID != "" && a.DeploymentID == d.NomadDeploymentID) {
				return true
			}
		case structs.StatePreHook, structs.StatePostHook:
			for _, r := range d.HookRuns {
				if r.State == structs.HookRunRunning && a.JobID == r.DispatchedJobID {
					return true
				}
			}
			for _, h := range d.Hooks {
				// A run whose dispatch outcome is unknown is a child of
				// the hook's revision job.
				if strings.HasPrefix(a.JobID, h.RevisionJobID+"/") {
					return true
				}
			}
		}
	}
	return false
}

// deadlineSlack is added to a deadline the apply pass waits for, so that
// the pass runs just after it passes, not a hair before, and is the least
// wait, so that a deadline already passed does not spin the loop.
const deadlineSlack = 10 * time.Millisecond

// applySafetyNet is, in drift intervals, how often the apply loop passes
// over the active deployments while the event stream is up and no deadline
// comes sooner. A pass over no active deployment asks Nomad nothing.
const applySafetyNet = 10

// nextApplyPass is when the apply loop runs a pass over every active
// deployment: after the engine interval while the event stream is down or
// the last pass failed; otherwise at the nearest deadline, or after the
// safety net of applySafetyNet drift intervals; sooner when a sync window
// opens or closes.
func (m *Applier) nextApplyPass(failed bool) time.Duration {
	if failed || m.cfg.DisableEventStream || !m.streaming() {
		return m.cfg.EngineInterval
	}
	next := max(m.cfg.EngineInterval, applySafetyNet*m.cfg.DriftInterval)
	// A timeout, or a sync window that opens or closes on a held
	// deployment.
	for _, at := range []time.Time{m.nearestDeadline(), m.nextWindowBoundary()} {
		if at.IsZero() {
			continue
		}
		if d := at.Sub(m.now()) + deadlineSlack; d < next {
			next = max(d, deadlineSlack)
		}
	}
	return next
}

// nearestDeadline is the earliest apply or hook timeout of the active
// deployments (zero for none).
func (m *Applier) nearestDeadline() time.Time {
	active, err := m.activeDeployments()
	if err != nil {
		return m.now()
	}
	var at time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	for _, d := range active {
		if d.State == structs.StateApplying {
			earlier(d.HealthDeadline)
		}
		for _, r := range d.HookRuns {
			if r.State != structs.HookRunRunning && r.State != structs.HookRunDispatching {
				continue
			}
			for _, h := range d.Hooks {
				if h.Phase == r.Phase && h.Position == r.Position && h.Timeout > 0 {
					earlier(r.StartedAt.Add(h.Timeout))
				}
			}
		}
	}
	return at
}

// wakeCreated starts the apply of a deployment detection just created,
// without waiting for the end of the cycle: at 10,000 jobs the rest of a
// cycle (the jobs after it, recording their statuses) takes long enough
// to matter between a commit and its register. The cycle's end still
// wakes the apply loop for every deployment.
func (m *core) wakeCreated(d *structs.Deployment) { m.wakeDeployments(d.ID) }
