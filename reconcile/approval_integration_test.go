package reconcile_test

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// TestDetect_ApprovalTTLExpiresThenNextCommitDeploys: a job that needs two
// approvals within a short TTL gets one; its deployment stays pending,
// then expires when the TTL runs out (SPEC section 20). The expiry is no
// failure: the job does not show as blocked, and cycles propose nothing
// for the same spec; the next commit deploys.
func TestDetect_ApprovalTTLExpiresThenNextCommitDeploys(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	rules := []testutil.JobOption{testutil.WithMeta("nops_approvals", "2"), testutil.WithMeta("nops_approval_ttl", ttl.String())}
	e := lcStart(t, managedWeb(structs.PolicyApproval, rules...))
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if pending.ApprovalsRequired != 2 || pending.ApprovalTTL != ttl {
		t.Fatalf("deployment needs %d approvals within %s, want 2 within %s", pending.ApprovalsRequired, pending.ApprovalTTL, ttl)
	}
	e.post("/v1/deployment/"+pending.ID+"/approve", map[string]string{"comment": "one of two"})
	if d := e.deployment(pending.ID); d.State != structs.StatePendingApproval || len(d.Approvals) != 1 || d.Approvals[0].Actor != "tester" {
		t.Fatalf("after one approval of two: %s, approvals %+v", d.State, d.Approvals)
	}
	if code, body := e.s.Do("POST", "/v1/deployment/"+pending.ID+"/approve", map[string]string{}, nil); code != 409 {
		t.Fatalf("a second approval by the same identity answered %d %s, want 409", code, body)
	}

	// No cycle needs asking: detection looks again when the TTL runs out.
	d := e.waitDeployment(pending.ID, structs.StateExpired)
	if got := d.StateEnteredAt.Sub(pending.StateEnteredAt); got < ttl {
		t.Fatalf("expired %s after it began to wait, before its TTL of %s", got, ttl)
	}
	e.wantEvents(d.ID,
		ev{"detected", "pending_approval", "waiting for approval"},
		ev{"pending_approval", "pending_approval", "approved by tester: 1 of 2 approvals: one of two"},
		ev{"pending_approval", "expired", "no decision within its approval TTL"},
	)
	e.settle()
	if st := e.jobStatus("web"); st.Blocked || st.Sync != structs.SyncDrift {
		t.Fatalf("after the expiry the job is %+v, want drifting and not blocked", st)
	}
	e.wantDeployments("web", structs.StateExpired)
	e.nomadHasNoJob("web")

	// The next commit deploys.
	c := e.commit("two replicas, deployed at once", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
	})
	next := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if next.Commit != c || next.ID == d.ID {
		t.Fatalf("deployment after the expiry: %+v", next)
	}
	if j := e.nomadJob("web"); groupCount(j) != 2 {
		t.Fatalf("Nomad job count %d, want 2", groupCount(j))
	}
	e.wantDeployments("web", structs.StateCompleted, structs.StateExpired)
}
