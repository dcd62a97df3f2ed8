package reconcile

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// Detector runs detection (SPEC section 4): it compares git, Nomad and the
// replicated state and proposes deployments and job statuses. It runs on
// the leader only; its caches are rebuilt on each leadership.
type Detector struct {
	*core
	// replan paces the periodic full re-plan (replan.go); prompt says the
	// running cycle was asked for.
	replan *nomadx.Budget
	prompt atomic.Bool
	// rules say when an unchanged job is due for a paced re-plan.
	rules dueRules

	// Guarded by core.mu.
	parsed map[string]parseResult
	seen   map[string]observed
	// registering are the registers in flight, by job key (ownregister.go).
	registering ownRegisters
	// replanDeferred counts the due re-plans deferred for lack of budget
	// or to yield, replanGranted the re-plans granted, since the detection
	// loop last looked.
	replanDeferred, replanGranted int
	// lastCycle is the result of the last detection cycle.
	lastCycle *cycleResult
}

// beginTerm forgets what an earlier leadership cached.
func (m *Detector) beginTerm() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parsed = map[string]parseResult{}
	m.seen = map[string]observed{}
	m.refusals = map[string]map[string]string{}
	m.liveIndex = 0
	m.liveList, m.liveDirty = nil, nil
	m.rules.reset()
	m.book = allocBook{}
	m.healthAll, m.healthList, m.healthDirty, m.healthRead = false, false, nil, nil
	m.termStart = time.Now()
}

func (m *Detector) detectLoop(ctx context.Context) {
	m.waitFirstFetch(ctx)
	timer := time.NewTimer(0)
	defer timer.Stop()
	// The health pass (health.go) runs here, between cycles.
	health := time.NewTimer(healthDebounce)
	health.Stop()
	defer health.Stop()
	healthArmed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.healthCh:
			if !healthArmed {
				health.Reset(healthDebounce)
				healthArmed = true
			}
			continue
		case <-health.C:
			healthArmed = false
			if err := m.recordHealth(ctx); err != nil && ctx.Err() == nil {
				m.logger.Warn("health of the managed jobs not recorded", "error", err)
			}
			continue
		case <-m.detectCh:
		case <-timer.C:
		}
		start, before := time.Now(), m.nomad.Stats()
		m.prompt.Store(m.asked.Swap(false))
		res, err := m.DetectOnce(ctx)
		m.metrics.observeDetection(start, err)
		if res != nil {
			m.metrics.created.Add(float64(res.created))
		}
		if ctx.Err() != nil {
			return
		}
		if !m.streaming() {
			// No event tells of the allocations: list them again.
			m.markHealthAll(true)
		}
		if err != nil {
			m.logger.Error("detection cycle failed", "error", err)
		} else if res.changed {
			// A cycle that changed deployments may enable the next step.
			m.TriggerApply()
		}
		m.logger.Debug("detection cycle", "duration", time.Since(start))
		next := m.nextCycle()
		if err != nil || res.failed > 0 {
			// What failed (Nomad unreachable, a plan refused) is tried
			// again within a drift interval, stream or not.
			next = min(next, m.cfg.DriftInterval)
		}
		// Look again when a decision asked to (a window boundary of a
		// job, a waiting deployment that moved on); after a failed cycle,
		// at the next boundary of any window.
		var again time.Time
		if res != nil {
			again = res.lookAgainAt
		} else {
			again = m.nextWindowBoundary()
		}
		if !again.IsZero() {
			if d := again.Sub(m.now()); d < next {
				next = d + 10*time.Millisecond
			}
		}
		if d, ok := m.replanNext(before); ok {
			next = min(next, d)
		}
		// Since Go 1.23 a reset timer never delivers a stale tick.
		timer.Reset(next)
	}
}

// idleCycle is how long the detection loop waits while nothing is due:
// the stream is up and the safety net is off or far. It only bounds a
// timer: a trigger wakes the loop at once.
const idleCycle = time.Hour

// nextCycle is how long after a cycle the next one runs when nothing asks
// for one earlier: after DriftInterval while the event stream is down (a
// poll: one list of the live jobs, plans only of jobs whose modify index
// or spec changed); while it is up, live changes arrive on the stream and
// the next cycle is only the safety net's, when its first job comes due.
func (m *Detector) nextCycle() time.Duration {
	if !m.streaming() {
		return m.cfg.DriftInterval
	}
	m.mu.Lock()
	due := m.rules.nextDue(m.seen)
	m.mu.Unlock()
	if due.IsZero() {
		return idleCycle
	}
	// A job already due was planned or deferred by the cycle that just
	// ran, and replanNext paces the deferred ones.
	return min(max(due.Sub(m.now())+10*time.Millisecond, replanRetry), idleCycle)
}

// firstFetchWait bounds how long a new leader waits for the first fetch of
// every repository before its first detection cycle.
const firstFetchWait = 10 * time.Second

// waitFirstFetch waits until every repository has been fetched once (or
// failed to be), so that the first cycle of a new leader sees git whole.
func (m *Detector) waitFirstFetch(ctx context.Context) {
	if m.git == nil {
		return
	}
	deadline := time.NewTimer(firstFetchWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		since := m.termStart
		m.mu.Unlock()
		fetched := true
		for _, st := range m.git.Status() {
			if st.LastFetch.Before(since) {
				fetched = false
			}
		}
		if fetched {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			m.logger.Warn("first fetch of the repositories is slow; detecting with what is there")
			return
		case <-tick.C:
		}
	}
}
