package reconcile

import (
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// The periodic full re-plan. A job in sync whose git spec hash and live
// modify index have not changed since its last plan is planned again once
// FullPlanInterval has passed since that plan: a safety net for changes no
// event reported. At 10,000 jobs those plans would all come due in one
// cycle, a burst of 10,000 requests to Nomad. They are paced instead by the
// re-plan budget (at most ReplanRate requests in any one second,
// nomadx.Budget): a due job the budget has no room for is deferred, counted
// as in sync as last seen, and the next cycle runs after replanRetry to
// plan the next ones. The
// plans a cycle needs for any other reason (a new commit, a live change, a
// job never planned in this leadership, a drift) take nothing from the
// budget and never wait for it. The re-plan also yields: a cycle that was
// asked for (a commit, a live change, a deployment that ended, a decision)
// makes no re-plan, and a cycle under way makes no more once another is
// asked for, so a commit that changes one job waits neither for re-plans
// in its own cycle nor for those of the cycle before.

// replanRetry is how soon the next cycle runs after one that deferred due
// re-plans: the budget's window of one second has moved on by then.
const replanRetry = time.Second

// planDue reports whether the periodic re-plan of an unchanged job in sync,
// last planned at prev.planned, is to be made now: when FullPlanInterval
// has passed and the budget has room for each request it costs (the plan,
// and the read of the live job a job with a scaling block needs), unless
// the cycle yields to one asked for (never past twice FullPlanInterval).
// A due plan not made is deferred to a later cycle.
func (m *Detector) planDue(d *declared, prev observed, now time.Time) bool {
	if now.Sub(prev.planned) < m.cfg.FullPlanInterval {
		return false
	}
	// The yield is bounded: a job overdue by a whole interval more is
	// re-planned (within the budget) even in a cycle that was asked for,
	// so that a steady stream of triggers cannot starve the safety net.
	overdue := now.Sub(prev.planned) >= 2*m.cfg.FullPlanInterval
	if !overdue && (m.prompt.Load() || m.asked.Load()) {
		m.mu.Lock()
		m.replanDeferred++
		m.mu.Unlock()
		return false
	}
	cost := 1
	if d.spec.scaling {
		cost = 2
	}
	if m.replan.Take(cost) {
		m.mu.Lock()
		// Plans granted, not requests: replanNext compares them with the
		// plans the cycle made.
		m.replanGranted++
		m.mu.Unlock()
		m.metrics.replanned.Inc()
		return true
	}
	m.mu.Lock()
	m.replanDeferred++
	m.mu.Unlock()
	return false
}

// replanNext says, after a cycle that began with the Nomad counters at
// before, whether it deferred due re-plans, and then how soon the next
// cycle is to run: after replanRetry, or later when the cycle also made
// plans outside the budget (jobs drifting are planned in every cycle), so
// that the cycles that go on with the re-plan make no more of those than
// the budget's rate either. It is asked after every cycle, and sets
// nops_detection_replans_pending to the re-plans the cycle deferred.
func (m *Detector) replanNext(before nomadx.Stats) (time.Duration, bool) {
	m.mu.Lock()
	deferred, granted := m.replanDeferred, m.replanGranted
	m.replanDeferred, m.replanGranted = 0, 0
	m.mu.Unlock()
	m.metrics.replanPending.Set(float64(deferred))
	if deferred == 0 {
		return 0, false
	}
	plans := int(m.nomad.Stats().Sub(before).Operations["job.plan"].Requests)
	next := replanRetry
	if unpaced := plans - granted; unpaced > 0 {
		next = max(next, time.Duration(unpaced)*time.Second/time.Duration(m.replan.Rate()))
	}
	m.logger.Debug("periodic re-plans deferred to pace Nomad requests", "jobs", deferred, "next_cycle", next)
	return next, true
}

// SetReplanRate changes the re-plan budget's requests a second, as a
// configuration reload does.
func (m *Manager) SetReplanRate(perSecond int) { m.detector.replan.SetRate(perSecond) }

// ReplanRate returns the re-plan budget's requests a second.
func (m *Manager) ReplanRate() int { return m.detector.replan.Rate() }
