package reconcile

import (
	"sync"
	"sync/atomic"
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
// (dueRules) and the budget has room for each request it costs (the plan,
// and the read of the live job a job with a scaling block needs), unless
// the cycle yields to one asked for (never once overdue). A due plan not
// made is deferred to a later cycle.
func (m *Detector) planDue(d *declared, prev observed, now time.Time) bool {
	due, overdue := m.rules.due(prev.planned, now, m.cfg.DriftInterval)
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

// dueRules is when an unchanged job in sync is due for a paced re-plan:
// the safety net's interval, which a reload changes, and the last change
// of Nomad's version this leader saw. Safe for concurrent use.
type dueRules struct {
	// every is the safety net's interval in nanoseconds; 0 means off.
	every atomic.Int64

	mu sync.Mutex
	// changedAt is when the version last changed (zero for never in this
	// term): every job planned before it is due. version is the one last
	// seen ("" before the first read of the term).
	changedAt time.Time
	version   string
}

// interval is the safety net's interval; 0 means off.
func (r *dueRules) interval() time.Duration { return time.Duration(r.every.Load()) }

// reset forgets the version, as a new term does: its first cycle plans
// every job, so the version it first reads is its baseline.
func (r *dueRules) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changedAt, r.version = time.Time{}, ""
}

// seeVersion records the version read at now, and reports the one before
// and whether it changed (never on the term's first read).
func (r *dueRules) seeVersion(v string, now time.Time) (prev string, changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, r.version = r.version, v
	if changed = prev != "" && prev != v; changed {
		r.changedAt = now
	}
	return prev, changed
}

// seenVersion returns the version last read.
func (r *dueRules) seenVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

// due reports whether a job last planned at planned is due for a re-plan
// at now, and whether it is overdue (no longer yields to a cycle asked
// for): planned before Nomad's version last changed (overdue one drift
// interval after the change), or a safety-net interval ago (overdue after a
// whole interval more).
func (r *dueRules) due(planned, now time.Time, drift time.Duration) (due, overdue bool) {
	r.mu.Lock()
	changed := r.changedAt
	r.mu.Unlock()
	if !changed.IsZero() && planned.Before(changed) {
		return true, now.Sub(changed) >= drift
	}
	every := r.interval()
	if every <= 0 || now.Sub(planned) < every {
		return false, false
	}
	return true, now.Sub(planned) >= 2*every
}

// nextDue is when the first of the jobs in sync of seen comes due for the
// safety net's re-plan, zero for none (the safety net off, or no job in
// sync). The caller holds the lock that guards seen.
func (r *dueRules) nextDue(seen map[string]observed) time.Time {
	every := r.interval()
	if every <= 0 {
		return time.Time{}
	}
	var first time.Time
	for _, o := range seen {
		if o.inSync && (first.IsZero() || o.planned.Before(first)) {
			first = o.planned
		}
	}
	if first.IsZero() {
		return first
	}
	return first.Add(every)
}

// forgetUnmanaged drops from seen the jobs a cycle no longer manages
// (removed from git, or in a file that fails to parse: their next cycle
// plans them again), so that the safety net's schedule counts only
// managed jobs. The caller holds the lock that guards seen.
func forgetUnmanaged(seen map[string]observed, managed map[string]*declared) {
	for k := range seen {
		if _, ok := managed[k]; !ok {
			delete(seen, k)
		}
	}
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

// SetFullPlanInterval changes the safety net's interval (0 turns it off),
// as a configuration reload does; the detection loop looks again at once.
func (m *Manager) SetFullPlanInterval(d time.Duration) {
	m.detector.rules.every.Store(int64(max(d, 0)))
	m.wakeDetection()
}

// FullPlanInterval returns the safety net's interval (0: off).
func (m *Manager) FullPlanInterval() time.Duration { return m.detector.rules.interval() }

// SetReplanRate changes the re-plan budget's requests a second, as a
// configuration reload does.
func (m *Manager) SetReplanRate(perSecond int) { m.detector.replan.SetRate(perSecond) }

// ReplanRate returns the re-plan budget's requests a second.
func (m *Manager) ReplanRate() int { return m.detector.replan.Rate() }
