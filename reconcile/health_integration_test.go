package reconcile_test

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// TestHealth_CountsFollowTheAllocations: a managed job's status counts its
// allocations as Nomad's events move them, with no list of allocations
// while the stream is up: a job Nomad ran before Nops managed it, a job
// after its first deployment, the same after a commit scales it, and a job
// whose allocation fails and is not replaced.
func TestHealth_CountsFollowTheAllocations(t *testing.T) {
	t.Parallel()
	web := func(count int) string {
		return testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(count))...)
	}
	legacy := testutil.ServiceJobHCL("legacy", managed(structs.PolicyAuto)...)
	e := lcWorld(t, map[string]string{jobFile("web"): web(2), jobFile("legacy"): legacy})
	e.nomad.RegisterJobHCL(t, legacy)
	e.serve(e.repo.URL())
	health := func(job string, want structs.JobHealth) {
		t.Helper()
		e.waitStatus(job, func(s *structs.JobStatus) bool { return s.Health != nil && *s.Health == want })
	}
	health("legacy", structs.JobHealth{Running: 1, Healthy: 1})
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	health("web", structs.JobHealth{Running: 2, Healthy: 2})

	m := e.s.Manager()
	e.waitFor(func() (bool, string) { return m.WatchingEvents(), "the event stream is not up" })
	before := m.Nomad().Stats()
	bad := testutil.ServiceJobHCL("bad", managed(structs.PolicyAuto, testutil.WithRunFor(2*time.Second), testutil.WithExitCode(1))...)
	e.commit("scale web, add bad", map[string]string{jobFile("web"): web(3), jobFile("bad"): bad})
	health("web", structs.JobHealth{Running: 3, Healthy: 3})
	s := e.waitStatus("bad", func(s *structs.JobStatus) bool { return s.Health != nil && s.Health.Failed > 0 })
	if s.Health.State() != "degraded" {
		t.Errorf("a job with a failed allocation is %q: %+v", s.Health.State(), *s.Health)
	}
	if d := m.Nomad().Stats().Sub(before); d.Operations["allocations.list"].Requests != 0 {
		t.Errorf("with the event stream up, the leader listed allocations: %s", d)
	}
	// The allocations' health can show 3 healthy before Nomad's
	// deployment is healthy (its min_healthy_time): web is in sync once
	// its deployment completed and a cycle looked at it.
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if st := e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync }); st.Health.State() != "healthy" {
		t.Errorf("web after the scale: %s, health %+v", st.Sync, st.Health)
	}
}
