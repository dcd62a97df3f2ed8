package nomadx

import (
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// TestCountAllocations: what Nomad wants running counts, a failure until
// it is replaced and only at the newest version, and a running
// allocation's health is its deployment's verdict, or its running when no
// deployment placed it.
func TestCountAllocations(t *testing.T) {
	yes, no := true, false
	alloc := func(job string, version uint64, desired, client string, healthy *bool, inDeployment bool, next string) AllocState {
		a := &api.AllocationListStub{Namespace: "default", JobID: job, JobVersion: version, DesiredStatus: desired, ClientStatus: client, NextAllocation: next}
		if inDeployment {
			a.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: healthy}
		}
		return AllocStateOf("", a)
	}
	run, stop := api.AllocDesiredStatusRun, api.AllocDesiredStatusStop
	got := CountAllocations([]AllocState{
		alloc("web", 2, run, "running", &yes, true, ""),   // healthy
		alloc("web", 2, run, "running", nil, true, ""),    // not judged yet
		alloc("web", 2, run, "running", &no, true, ""),    // unhealthy
		alloc("web", 2, run, "pending", nil, true, ""),    // pending
		alloc("web", 2, run, "failed", nil, true, ""),     // failed, not replaced
		alloc("web", 2, run, "failed", nil, true, "b2"),   // replaced
		alloc("web", 1, run, "failed", nil, true, ""),     // an older version's
		alloc("web", 3, stop, "complete", &yes, true, ""), // stopped: history
		alloc("sys", 0, run, "running", nil, false, ""),   // no deployment: healthy when running
		alloc("sys", 0, run, "lost", nil, false, ""),      // lost, not replaced
		alloc("batch", 0, run, "complete", nil, false, ""),
		alloc("gone", 3, stop, "complete", nil, false, ""),
	})
	want := map[string]*structs.JobHealth{
		"default/web":   {Running: 3, Healthy: 1, Unhealthy: 1, Pending: 1, Failed: 1},
		"default/sys":   {Running: 1, Healthy: 1, Failed: 1},
		"default/batch": {Complete: 1},
	}
	if !reflect.DeepEqual(got, want) {
		for k, h := range got {
			t.Logf("%s: %+v", k, *h)
		}
		t.Fatalf("counts differ from %v", want)
	}
	for _, c := range []struct {
		h    *structs.JobHealth
		want string
	}{
		{got["default/web"], "degraded"},
		{got["default/batch"], "completed"},
		{nil, ""},
		{&structs.JobHealth{}, "none"},
		{&structs.JobHealth{Running: 2, Healthy: 2}, "healthy"},
		{&structs.JobHealth{Running: 2, Healthy: 1}, "progressing"},
		{&structs.JobHealth{Running: 2, Healthy: 2, Pending: 1}, "progressing"},
	} {
		if s := c.h.State(); s != c.want {
			t.Errorf("%+v is %q, want %q", c.h, s, c.want)
		}
	}
}
