package failover_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestFailover_SecondApprovalThroughFollowerWhileLeaderKilled: a
// deployment needs two approvals (nops_approvals = "2") and has alice's.
// The leader is killed (SIGKILL) and Bob's is sent through a follower at
// once, before the survivors elect a new leader. Whatever the follower answers (accepted, or 502 for an outcome
// it cannot know), bob sends it again through a survivor until it is
// accepted or refused as counted already (409): on every running server
// the deployment has alice's and bob's approvals, bob's once, and it moves
// on and completes, registered once.
func TestFailover_SecondApprovalThroughFollowerWhileLeaderKilled(t *testing.T) {
	f := newFixture(t, map[string]string{
		"jobs/pay.nomad.hcl": managedJob("pay", structs.PolicyApproval, testutil.WithMeta("nops_approvals", "2")),
	})
	c := f.cluster
	leader := c.Leader()
	d := c.Server(leader).WaitForDeployment(namespace, "pay", deployTimeout, nopstest.InState(structs.StatePendingApproval))
	path := "/v1/deployment/" + d.ID + "/approve"
	var first structs.Deployment
	if _, _, err := c.Server(leader).CallAs("alice", http.MethodPost, path, map[string]string{"comment": "first"}, &first); err != nil {
		t.Fatal(err)
	}
	if first.State != structs.StatePendingApproval || len(first.Approvals) != 1 {
		t.Fatalf("after alice's approval: %s with approvals %+v, want it pending with one", first.State, first.Approvals)
	}

	type answer struct {
		code int
		raw  []byte
	}
	// The leader dies (SIGKILL) and bob's approval reaches a follower
	// before the survivors have a new leader: the follower still takes the
	// dead server for the leader, or waits for the next one.
	follower := c.Followers()[0]
	c.Kill(leader)
	sent := make(chan answer, 1)
	go func() {
		code, raw, _ := c.Server(follower).CallAs("bob", http.MethodPost, path, map[string]string{"comment": "second"}, nil)
		sent <- answer{code, raw}
	}()
	next := c.Leader()
	got := <-sent
	t.Logf("killed the leader %s; %s leads; bob's approval through %s answered %d", c.Server(leader).Name, c.Server(next).Name,
		c.Server(follower).Name, got.code)
	if got.code != http.StatusOK {
		t.Logf("answer: %s", strings.TrimSpace(string(got.raw)))
	}

	// An answer that is not 200 leaves the outcome unknown: send it again
	// until the cluster says it is counted.
	testutil.WaitForResult(t, deployTimeout, func() (bool, error) {
		if got.code == http.StatusOK {
			return true, nil
		}
		code, raw, err := c.Server(next).CallAs("bob", http.MethodPost, path, map[string]string{"comment": "second"}, nil)
		got = answer{code, raw}
		switch body := string(raw); {
		case code == http.StatusOK:
			return true, nil
		case code == http.StatusConflict && (strings.Contains(body, "bob already approved") || strings.Contains(body, "not pending approval")):
			t.Logf("bob's approval sent again: %d %s: it was counted already", code, strings.TrimSpace(body))
			return true, nil
		}
		return false, fmt.Errorf("bob's approval sent again: %d: %v", code, err)
	})

	f.waitEverywhere(t, d.ID, func(d *structs.Deployment) error {
		var who []string
		for _, a := range d.ApprovalsGiven() {
			who = append(who, a.Actor)
		}
		if d.State == structs.StatePendingApproval || strings.Join(who, ",") != "alice,bob" {
			return fmt.Errorf("%s with approvals by %v, want it moved on with alice's and bob's, each once", d.State, who)
		}
		return nil
	})
	done := c.Server(next).WaitForDeployment(namespace, "pay", deployTimeout, nopstest.InState(structs.StateCompleted))
	if done.ID != d.ID || len(done.Decisions) != 2 {
		t.Fatalf("deployment %s completed with decisions %+v, want %s with two", done.ID, done.Decisions, d.ID)
	}
	f.checkRegisteredOnce(t, done)
	checkForwardOnly(t, c.Server(next), d.ID)
}
