package reconcile

import (
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// The paced re-plan of unchanged jobs. A job in sync whose git spec hash
// and live modify index have not changed since its last plan is not planned
// again: Nomad's event stream reports every live change while it is up (a
// connected subscription never skips an event: one that falls behind
// Nomad's buffer is ended, and so is every one on a snapshot restore), and
// every resume of the stream lists the live jobs once to compare their
// modify indexes (livewatch.go). What no event reports is re-planned, paced:
//
//   - a change of Nomad's version (version.go): every job planned before it
//     is due, once;
//   - the safety net: a job last planned FullPlanInterval ago is due (0
//     turns it off; 24h by default in the agent's configuration).
//
// At 10,000 jobs those plans would all come due in one cycle, a burst of
// 10,000 requests to Nomad. They are paced instead by the re-plan budget
// (at most ReplanRate requests in any one second, nomadx.Budget): a due job
// the budget has no room for is deferred, counted as in sync as last seen,
// and the next cycle runs after replanRetry to plan the next ones. The
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

// planDue reports whether the paced re-plan of an unchanged job in sync,
// last planned at prev.planned, is to be made now: when it is due
// (replanDue) and the budget has room for each request it costs (the plan,
// and the read of the live job a job with a scaling block needs), unless
// the cycle yields to one asked for (never once overdue). A due plan not
// made is deferred to a later cycle.
func (m *Detector) planDue(d *declared, prev observed, now time.Time) bool {
	due, overdue := m.replanDue(prev, now)
	if !due {
		return false
	}
	// The yield is bounded: a job overdue is re-planned (within the
	// budget) even in a cycle that was asked for, so that a steady stream
	// of triggers cannot starve the re-plan.
	if !overdue && (m.prompt.Load() || m.asked.Load()) {
		m.mu.Lock()
		m.replanDeferred++
		m.mu.Unlock()
		return false
	}
	cost := 1
	if hasScaling(d.job) {
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

// replanDue reports whether a job last planned at prev.planned is due for
// a re-plan at now, and whether it is overdue (no longer yields to a cycle
// asked for): planned before Nomad's version last changed (overdue one
// drift interval after the change), or FullPlanInterval ago (overdue
// after a whole interval more).
func (m *Detector) replanDue(prev observed, now time.Time) (due, overdue bool) {
	m.mu.Lock()
	changed := m.versionChangedAt
	m.mu.Unlock()
	if !changed.IsZero() && prev.planned.Before(changed) {
		return true, now.Sub(changed) >= m.cfg.DriftInterval
	}
	every := m.fullPlanInterval()
	if every <= 0 || now.Sub(prev.planned) < every {
		return false, false
	}
	return true, now.Sub(prev.planned) >= 2*every
}

// fullPlanInterval is the safety net's interval; 0 means off.
func (m *Detector) fullPlanInterval() time.Duration { return time.Duration(m.fullPlan.Load()) }

// nextReplanDue is when the earliest job in sync comes due for the safety
// net's re-plan, zero for none (the safety net off, or no job in sync).
func (m *Detector) nextReplanDue() time.Time {
	every := m.fullPlanInterval()
	if every <= 0 {
		return time.Time{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var first time.Time
	for _, o := range m.seen {
		if o.inSync && (first.IsZero() || o.planned.Before(first)) {
			first = o.planned
		}
	}
	if first.IsZero() {
		return first
	}
	return first.Add(every)
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

// forgetUnmanaged drops what the leader saw of the jobs a cycle no longer
// manages (removed from git, or in a file that fails to parse: their next
// cycle plans them again), so that the safety net's schedule counts only
// managed jobs.
func (m *Detector) forgetUnmanaged(managed map[string]*declared) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.seen {
		if _, ok := managed[k]; !ok {
			delete(m.seen, k)
		}
	}
}

// SetFullPlanInterval changes the safety net's interval (0 turns it off),
// as a configuration reload does; the detection loop looks again at once.
func (m *Manager) SetFullPlanInterval(d time.Duration) {
	m.detector.fullPlan.Store(int64(max(d, 0)))
	m.wakeDetection()
}

// FullPlanInterval returns the safety net's interval (0: off).
func (m *Manager) FullPlanInterval() time.Duration { return m.detector.fullPlanInterval() }

// SetReplanRate changes the re-plan budget's requests a second, as a
// configuration reload does.
func (m *Manager) SetReplanRate(perSecond int) { m.detector.replan.SetRate(perSecond) }

// ReplanRate returns the re-plan budget's requests a second.
func (m *Manager) ReplanRate() int { return m.detector.replan.Rate() }
