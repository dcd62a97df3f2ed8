package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// scaledWeb is job "web" with a scaling block on group "app", managed with
// policy approval, and rev in its meta.
func scaledWeb(rev string, more ...testutil.JobOption) string {
	return testutil.ServiceJobHCL("web", managed(structs.PolicyApproval,
		append([]testutil.JobOption{testutil.WithScaling(1, 5), testutil.WithMeta("rev", rev)}, more...)...)...)
}

// asEnv is a world where Nomad runs web at rev 1 and git has rev 2, and a
// Nops server that detects only when asked (a one-hour drift interval and no
// event stream), so a test decides which step sees a live change first. It
// returns the deployment waiting for approval.
func asEnv(t *testing.T) (*lcEnv, *structs.Deployment) {
	t.Helper()
	e := lcWorld(t, map[string]string{jobFile("web"): scaledWeb("2")})
	v0 := e.nomad.RegisterJobHCL(t, scaledWeb("1"))
	e.nomad.WaitForDeployment(t, v0, "successful")
	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) { c.DriftInterval, c.NomadEventStream = time.Hour, false }))
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if pending.JobModifyIndex != v0.JobModifyIndex {
		t.Fatalf("deployment records modify index %d, live job has %d", pending.JobModifyIndex, v0.JobModifyIndex)
	}
	return e, pending
}

// scaleTo scales group "app" of web to n through Nomad's scale endpoint,
// as an autoscaler does, and returns the job's new modify index. Nomad
// refuses a scale while a deployment of the job runs: it is tried again.
func (e *lcEnv) scaleTo(n int) uint64 {
	e.t.Helper()
	var index uint64
	e.waitFor(func() (bool, string) {
		count := n
		resp, _, err := e.nomad.Client.Jobs().Scale("web", "app", &count, "autoscaler", false, nil, nil)
		if err != nil {
			return false, "scale: " + err.Error()
		}
		index = resp.JobModifyIndex
		return true, ""
	})
	j := e.nomadJob("web")
	if groupCount(j) != n || *j.JobModifyIndex != index {
		e.t.Fatalf("after the scale: count %d at modify index %d, want %d at %d", groupCount(j), *j.JobModifyIndex, n, index)
	}
	return index
}

// TestAutoscale_ScalesDoNotSupersedeOrFail: a scale between detection and
// approval leaves the waiting deployment as it is (detection moves its
// check-and-set index), and a scale between approval and register does not
// fail it: the register uses the new index and the live count.
func TestAutoscale_ScalesDoNotSupersedeOrFail(t *testing.T) {
	t.Parallel()
	e, pending := asEnv(t)

	// Detection sees a scale: the deployment keeps waiting.
	idx1 := e.scaleTo(2)
	e.settle()
	d := e.deployment(pending.ID)
	if d.State != structs.StatePendingApproval || d.JobModifyIndex != idx1 {
		t.Fatalf("after a scale and detection: %s at modify index %d, want pending_approval at %d", d.State, d.JobModifyIndex, idx1)
	}
	e.wantEvents(pending.ID, ev{"pending_approval", "pending_approval", "only the counts left to an autoscaler changed in Nomad"})
	e.wantDeployments("web", structs.StatePendingApproval)

	// A scale that only the register sees (no cycle in between).
	idx2 := e.scaleTo(3)
	e.post("/v1/deployment/"+pending.ID+"/approve", map[string]string{"comment": "go"})
	done := e.waitDeployment(pending.ID, structs.StateCompleted)
	if !done.Registered || done.JobModifyIndex != idx2 {
		t.Fatalf("completed deployment: registered=%v modify index %d, want %d", done.Registered, done.JobModifyIndex, idx2)
	}
	e.wantEvents(pending.ID,
		ev{"pending_approval", "applying", "approved: go"},
		ev{"applying", "applying", "only the counts left to an autoscaler changed since"},
		ev{"applying", "completed", "healthy"})
	j := e.nomadJob("web")
	if groupCount(j) != 3 || j.Meta["rev"] != "2" {
		t.Fatalf("live job: count %d rev %q, want 3 and 2", groupCount(j), j.Meta["rev"])
	}
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	e.wantDeployments("web", structs.StateCompleted)
}

// TestAutoscale_OtherLiveChangesStillCount: a change of the live job
// beyond the scaled counts still supersedes a waiting deployment, and
// still fails an approved one before its register.
func TestAutoscale_OtherLiveChangesStillCount(t *testing.T) {
	t.Parallel()
	e, pending := asEnv(t)

	// A scale and a change of meta by hand, seen by detection.
	e.scaleTo(2)
	hand := e.nomad.RegisterJobHCL(t, scaledWeb("1", testutil.WithCount(2), testutil.WithMeta("hand", "a")))
	e.cycle()
	e.waitDeployment(pending.ID, structs.StateSuperseded)
	e.wantEvents(pending.ID, ev{"pending_approval", "superseded", "the live job changed since detection"})
	next := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if next.ID == pending.ID || next.JobModifyIndex != hand.JobModifyIndex {
		t.Fatalf("next deployment: %+v (hand register at %d)", next, hand.JobModifyIndex)
	}

	// The same kind of change that only the register sees.
	again := e.nomad.RegisterJobHCL(t, scaledWeb("1", testutil.WithCount(2), testutil.WithMeta("hand", "b")))
	e.post("/v1/deployment/"+next.ID+"/approve", nil)
	failed := e.waitDeployment(next.ID, structs.StateFailed)
	if failed.Registered || !strings.Contains(failed.Error, "the job changed since detection") {
		t.Fatalf("failed deployment: registered=%v error=%q", failed.Registered, failed.Error)
	}
	if j := e.nomadJob("web"); *j.JobModifyIndex != again.JobModifyIndex || j.Meta["hand"] != "b" {
		t.Fatalf("Nops changed the live job: modify index %d (hand register at %d), meta hand %q", *j.JobModifyIndex, again.JobModifyIndex, j.Meta["hand"])
	}
}
