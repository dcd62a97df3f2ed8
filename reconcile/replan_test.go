package reconcile

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// replanMetrics returns the manager's nops_detection_replans_total and
// nops_detection_replans_pending.
func replanMetrics(t *testing.T, m *Detector) (made, pending float64) {
	t.Helper()
	value := func(c prometheus.Metric) float64 {
		var out dto.Metric
		if err := c.Write(&out); err != nil {
			t.Fatal(err)
		}
		if out.Counter != nil {
			return out.GetCounter().GetValue()
		}
		return out.GetGauge().GetValue()
	}
	return value(m.metrics.replanned), value(m.metrics.replanPending)
}

// replanManager returns the detector of a manager with a re-plan budget of
// rate whose Nomad client talks to a stub that answers every request with {}.
func replanManager(t *testing.T, rate int) *Detector {
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }))
	t.Cleanup(stub.Close)
	nomad, err := nomadx.New(nomadx.Config{Address: stub.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{DriftInterval: time.Minute, FullPlanInterval: 10 * time.Minute, ReplanRate: rate}, nil, nomad, nil, hclog.NewNullLogger()).Detector()
}

// TestPlanDue: an unchanged job is re-planned only once FullPlanInterval
// has passed, and then only while the budget lasts and no cycle was asked
// for; the ones it defers make the next cycle come soon, and come due
// again then.
func TestPlanDue(t *testing.T) {
	m := replanManager(t, 3)
	now := time.Now()
	job := &declared{spec: mustJobSpec(t, &api.Job{ID: new(string)})}
	scaled := &declared{spec: mustJobSpec(t, &api.Job{ID: new(string), TaskGroups: []*api.TaskGroup{{Scaling: &api.ScalingPolicy{}}}})}

	if m.planDue(job, observed{planned: now.Add(-m.rules.interval() + time.Second)}, now) {
		t.Fatal("a job planned less than FullPlanInterval ago is due")
	}
	if _, ok := m.replanNext(m.nomad.Stats()); ok {
		t.Fatal("a cycle that deferred nothing asks for an early next cycle")
	}
	old := observed{planned: now.Add(-m.rules.interval())}
	// A budget of 3: a job with a scaling block costs 2 (its live job is
	// read too), so one plain job fits, then nothing.
	if !m.planDue(scaled, old, now) || !m.planDue(job, old, now) {
		t.Fatal("due jobs within the budget were not planned")
	}
	for range 4 {
		if m.planDue(job, old, now) {
			t.Fatal("a due job was planned beyond the budget")
		}
	}
	if next, ok := m.replanNext(m.nomad.Stats()); !ok || next != replanRetry {
		t.Fatalf("next cycle after deferred re-plans: %s %v, want %s", next, ok, replanRetry)
	}
	if made, pending := replanMetrics(t, m); made != 2 || pending != 4 {
		t.Fatalf("metrics after a cycle of 2 re-plans and 4 deferred: made %v, pending %v", made, pending)
	}
	if _, ok := m.replanNext(m.nomad.Stats()); ok {
		t.Fatal("the deferred re-plans were not cleared")
	}
	if made, pending := replanMetrics(t, m); made != 2 || pending != 0 {
		t.Fatalf("metrics after a cycle with nothing due: made %v, pending %v", made, pending)
	}
	// The budget is a window of one second.
	time.Sleep(time.Second + 50*time.Millisecond)

	// A cycle asked for meanwhile: the re-plan yields to it, in this
	// cycle and in that one, whatever the budget.
	m.TriggerDetection()
	if m.planDue(job, old, now) {
		t.Fatal("a re-plan was made while a cycle was asked for")
	}
	m.prompt.Store(m.asked.Swap(false))
	if m.planDue(job, old, now) {
		t.Fatal("a re-plan was made in a cycle that was asked for")
	}
	if _, ok := m.replanNext(m.nomad.Stats()); !ok {
		t.Fatal("re-plans deferred by a cycle asked for do not bring the next cycle forward")
	}
	if made, pending := replanMetrics(t, m); made != 2 || pending != 2 {
		t.Fatalf("metrics after the two re-plans that yielded: made %v, pending %v", made, pending)
	}
	m.prompt.Store(m.asked.Swap(false))
	if !m.planDue(job, old, now) {
		t.Fatal("a deferred job was still not planned once the budget came back")
	}
	if made, _ := replanMetrics(t, m); made != 3 {
		t.Fatalf("nops_detection_replans_total %v after the third re-plan", made)
	}
}

// TestPlanDue_YieldIsBounded: a job overdue by a whole interval more is
// re-planned even in a cycle that was asked for, so that a steady stream
// of triggers (deploys, autoscaling) cannot starve the safety net.
func TestPlanDue_YieldIsBounded(t *testing.T) {
	m := replanManager(t, 3)
	now := time.Now()
	job := &declared{spec: mustJobSpec(t, &api.Job{ID: new(string)})}
	m.TriggerDetection()
	m.prompt.Store(m.asked.Swap(false))
	if m.planDue(job, observed{planned: now.Add(-2*m.rules.interval() + time.Second)}, now) {
		t.Fatal("a job due by less than a second interval was re-planned in a cycle asked for")
	}
	if !m.planDue(job, observed{planned: now.Add(-2 * m.rules.interval())}, now) {
		t.Fatal("a job overdue by a whole interval was not re-planned in a cycle asked for")
	}
}

// TestReplanNext_PacesPlansOutsideTheBudget: a cycle that deferred
// re-plans but made plans outside the budget (jobs drifting, planned in
// every cycle) pushes the next cycle back so that those plans, too, come
// at no more than the rate.
func TestReplanNext_PacesPlansOutsideTheBudget(t *testing.T) {
	m := replanManager(t, 4)
	id := "web"
	plan := func() { _, _ = m.nomad.Plan(context.Background(), &api.Job{ID: &id}) }
	now := time.Now()
	job := &declared{spec: mustJobSpec(t, &api.Job{ID: new(string)})}
	old := observed{planned: now.Add(-m.rules.interval())}
	before := m.nomad.Stats()
	// 4 re-plans granted and made, 10 plans of drifting jobs, 1 deferred.
	for range 5 {
		if m.planDue(job, old, now) {
			plan()
		}
	}
	for range 10 {
		plan()
	}
	if got := m.nomad.Stats().Sub(before).Operations["job.plan"].Requests; got != 14 {
		t.Fatalf("%d plans counted, want 14", got)
	}
	next, ok := m.replanNext(before)
	if want := 10 * time.Second / 4; !ok || next != want {
		t.Fatalf("next cycle %s %v, want %s", next, ok, want)
	}
}

// TestDueRules_VersionAndSafetyNet: a job planned before Nomad's version
// changed is due (and no longer yields one drift interval after the
// change); a job planned after it is not; with the safety net off, an
// unchanged job is never due for its age alone; the first version a term
// reads is no change.
func TestDueRules_VersionAndSafetyNet(t *testing.T) {
	var r dueRules
	now := time.Now()
	const drift = time.Minute
	if due, _ := r.due(now.Add(-1000*time.Hour), now, drift); due {
		t.Fatal("a job was due for its age with the safety net off")
	}
	if !r.nextDue(map[string]observed{"a": {inSync: true, planned: now}}).IsZero() {
		t.Fatal("the safety net off still schedules a cycle")
	}
	if _, changed := r.seeVersion("1.6.3", now.Add(-2*time.Second)); changed {
		t.Fatal("the term's first version read is a change")
	}
	if _, changed := r.seeVersion("1.6.3", now.Add(-2*time.Second)); changed {
		t.Fatal("the same version again is a change")
	}
	if prev, changed := r.seeVersion("1.7.0", now.Add(-time.Second)); !changed || prev != "1.6.3" {
		t.Fatalf("an upgrade: changed %v from %q", changed, prev)
	}
	if due, overdue := r.due(now.Add(-2*time.Second), now, drift); !due || overdue {
		t.Fatalf("a job planned before the version changed: due %v overdue %v, want due, not overdue", due, overdue)
	}
	if due, _ := r.due(now, now, drift); due {
		t.Fatal("a job planned after the version changed is due")
	}
	if due, overdue := r.due(now.Add(-2*time.Second), now.Add(drift), drift); !due || !overdue {
		t.Fatalf("a drift interval after the change: due %v overdue %v, want both", due, overdue)
	}
	r.reset()
	if due, _ := r.due(now.Add(-2*time.Second), now, drift); due || r.seenVersion() != "" {
		t.Fatal("a new term still re-plans for the last term's version change")
	}
	r.every.Store(int64(time.Hour))
	seen := map[string]observed{"a": {inSync: true, planned: now}, "b": {inSync: true, planned: now.Add(-time.Minute)},
		"c": {planned: now.Add(-time.Hour)}}
	if got := r.nextDue(seen); !got.Equal(now.Add(time.Hour - time.Minute)) {
		t.Fatalf("next safety-net re-plan at %s, want the oldest job in sync's plan plus the interval (%s)", got, now.Add(time.Hour-time.Minute))
	}
	forgetUnmanaged(seen, map[string]*declared{"a": nil})
	if len(seen) != 1 || r.nextDue(seen) != now.Add(time.Hour) {
		t.Fatalf("after forgetting the unmanaged jobs: %v", seen)
	}
}

func mustJobSpec(t *testing.T, j *api.Job) *jobSpec {
	t.Helper()
	s, err := newJobSpec(j)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
