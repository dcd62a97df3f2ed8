package reconcile

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// TestPlanDue: an unchanged job is re-planned only once FullPlanInterval
// has passed, and then only while the budget lasts; the ones it defers are
// counted so that the next cycle comes soon, and come due again then.
func TestPlanDue(t *testing.T) {
	m := New(Config{DriftInterval: time.Minute, ReplanRate: 3}, nil, nil, nil, hclog.NewNullLogger())
	now := time.Now()
	job := &declared{job: &api.Job{ID: new(string)}}
	scaled := &declared{job: &api.Job{ID: new(string), TaskGroups: []*api.TaskGroup{{Scaling: &api.ScalingPolicy{}}}}}

	if m.planDue(job, observed{planned: now.Add(-m.cfg.FullPlanInterval + time.Second)}, now) {
		t.Fatal("a job planned less than FullPlanInterval ago is due")
	}
	if n := m.takeDeferredReplans(); n != 0 {
		t.Fatalf("%d re-plans deferred before any was due", n)
	}
	old := observed{planned: now.Add(-m.cfg.FullPlanInterval)}
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
	if n := m.takeDeferredReplans(); n != 4 {
		t.Fatalf("%d re-plans deferred, want 4", n)
	}
	if n := m.takeDeferredReplans(); n != 0 {
		t.Fatalf("the count of deferred re-plans was not cleared: %d", n)
	}
	// The budget is a window of one second.
	time.Sleep(time.Second + 50*time.Millisecond)
	if !m.planDue(job, old, now) {
		t.Fatal("a deferred job was still not planned once the budget came back")
	}
}
