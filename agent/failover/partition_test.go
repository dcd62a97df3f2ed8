package failover_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// leaseBound is how long after its last contact with a quorum a leader may
// still act as one: Raft's leader lease (500ms times the test servers' Raft
// multiplier), twice, since the lease is checked on a timer of its own
// length.
const leaseBound = 2 * 500 * time.Millisecond * nopstest.TestRaftMultiplier

// hookedFiles are the files of job web, with policy, whose pre-hook backup
// runs for runFor.
func hookedFiles(policy structs.Policy, runFor time.Duration) map[string]string {
	return map[string]string{
		"jobs/backup.nomad.hcl": testutil.HookJobHCL("backup", testutil.WithRunFor(runFor)),
		"jobs/web.nomad.hcl": managedJob("web", policy,
			testutil.WithMeta("nops_pre_hooks", "backup")),
	}
}

// waitPreHookRunning waits until the deployment of web runs its
// dispatched pre-hook, read from server i.
func waitPreHookRunning(t *testing.T, p *nopstest.Process) *structs.Deployment {
	t.Helper()
	return p.WaitForDeployment(namespace, "web", deployTimeout, func(d *structs.Deployment) error {
		run, ok := d.HookRun(structs.PhasePre, 0)
		if d.State != structs.StatePreHook || !ok || run.DispatchedJobID == "" {
			return fmt.Errorf("no dispatched pre-hook run yet (hook runs %+v)", d.HookRuns)
		}
		return nil
	})
}

// checkDispatchedOnce checks that Nomad holds exactly one dispatched run
// of the deployment's pre-hook revision.
func (f *partitionFixture) checkDispatchedOnce(t *testing.T, d *structs.Deployment) {
	t.Helper()
	revision := d.Hooks[0].RevisionJobID
	stubs, _, err := f.fixture.nomad.Client.Jobs().List(&nomadapi.QueryOptions{Namespace: namespace, Prefix: "backup-"})
	if err != nil {
		t.Fatal(err)
	}
	var children []string
	for _, s := range stubs {
		if s.ParentID == revision {
			children = append(children, s.ID)
		}
	}
	if len(children) != 1 {
		t.Errorf("Nomad has dispatched children %v of %s, want exactly one", children, revision)
	}
}

// checkOneRegisterPerDeployment checks that every register of job id that
// Nomad accepted belongs to one deployment: as many successful registers
// (seen by the proxies) and register evaluations (seen by Nomad) as
// deployments that registered.
func (f *partitionFixture) checkOneRegisterPerDeployment(t *testing.T, id string, deployments int) {
	t.Helper()
	regs := f.registers(id)
	versions, evals := f.registersOf(t, id)
	if len(regs) != deployments || evals != deployments || versions != deployments {
		var by []string
		for _, w := range regs {
			by = append(by, fmt.Sprintf("%s at %s", f.cluster.Server(w.Server).Name, w.Start.Format("15:04:05.000")))
		}
		t.Errorf("job %s: %d successful registers (%s), %d register evaluations, %d versions; want %d of each",
			id, len(regs), strings.Join(by, ", "), evals, versions, deployments)
	}
}

// TestPartition_IsolatedLeaderStopsWriting cuts the leader off from both
// followers while its deployment waits for a pre-hook run, and while it can
// still reach Nomad and git. The old leader makes no Nomad write once its
// lease is over (Nomad's writes are attributed to servers by the proxy in
// front of Nomad of each server); the majority elects a new leader, which
// finishes the deployment with one register; after the heal every server
// holds the same state.
func TestPartition_IsolatedLeaderStopsWriting(t *testing.T) {
	f := newPartitionFixture(t, hookedFiles(structs.PolicyAuto, 8*time.Second))
	c := f.cluster
	old := c.Leader()
	running := waitPreHookRunning(t, c.Server(old))

	cut := time.Now()
	if err := f.net.Isolate(old); err != nil {
		t.Fatal(err)
	}
	next, elected := f.leaderAmong(t, f.others(old))
	stepped := f.waitStepDown(t, old)
	t.Logf("isolated %s; %s leads after %s; %s stepped down after %s",
		c.Server(old).Name, c.Server(next).Name, elected.Sub(cut).Round(time.Millisecond),
		c.Server(old).Name, stepped.Sub(cut).Round(time.Millisecond))

	done := c.Server(next).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StateCompleted))
	if done.ID != running.ID {
		t.Errorf("deployment %s completed, want %s", done.ID, running.ID)
	}
	// The old leader stays isolated a little longer, with Nomad in reach:
	// whatever it would still do, it has had the time to.
	time.Sleep(2 * time.Second)
	f.checkNoWriteAfter(t, old, cut.Add(leaseBound))
	for _, w := range f.registers("web") {
		if w.Server == old {
			t.Errorf("the isolated leader %s registered web at %s", c.Server(old).Name, w.Start.Format(time.RFC3339Nano))
		}
	}
	f.checkOneRegisterPerDeployment(t, "web", 1)
	f.checkDispatchedOnce(t, done)

	f.net.Heal()
	took := f.waitConverged(t)
	t.Logf("converged %s after the heal", took.Round(time.Millisecond))
	f.waitEverywhere(t, done.ID, nopstest.InState(structs.StateCompleted))
}

// TestPartition_OneWayFollower cuts one follower off in one direction
// only: first it hears the leader but its answers are lost, then the
// leader's messages are lost while its own get through. Writes go through
// every server meanwhile; each one acknowledged is on every server after
// the heal, and the servers converge.
func TestPartition_OneWayFollower(t *testing.T) {
	f := newPartitionFixture(t, map[string]string{
		"jobs/web.nomad.hcl": managedJob("web", structs.PolicyNone),
	})
	c := f.cluster
	var acked []string
	for _, tc := range []struct {
		name string
		// block returns the link to block, from sender to receiver.
		block func(leader, follower int) (from, to int)
	}{
		{"follower hears the leader, cannot answer", func(l, fl int) (int, int) { return fl, l }},
		{"leader cannot reach the follower, the follower reaches it", func(l, fl int) (int, int) { return l, fl }},
	} {
		leader := c.Leader()
		follower := f.others(leader)[0]
		from, to := tc.block(leader, follower)
		if err := f.net.Block(from, to); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: blocked %s -> %s", tc.name, c.Server(from).Name, c.Server(to).Name)
		// A write through each server, several times over the fault.
		deadline := time.Now().Add(12 * time.Second)
		for round := 0; time.Now().Before(deadline); round++ {
			for i := range c.Len() {
				reason := fmt.Sprintf("%s/%d/%s", tc.name, round, c.Server(i).Name)
				code, _, err := c.Server(i).Call(http.MethodPost, "/v1/pause", map[string]string{"reason": reason}, nil)
				if code == http.StatusOK {
					acked = append(acked, reason)
				} else {
					t.Logf("%s: pause through %s: %v", tc.name, c.Server(i).Name, err)
				}
			}
		}
		ok := 0
		for _, r := range acked {
			if strings.HasPrefix(r, tc.name+"/") {
				ok++
			}
		}
		if ok == 0 {
			t.Errorf("%s: no write was acknowledged while a majority could talk", tc.name)
		}
		f.net.Heal()
		took := f.waitConverged(t)
		t.Logf("%s: %d writes acknowledged; converged %s after the heal", tc.name, ok, took.Round(time.Millisecond))
	}
	f.checkAcknowledgedPauses(t, acked)
}

// checkAcknowledgedPauses checks that the audit log of every server holds
// the pause event of each acknowledged pause.
func (f *partitionFixture) checkAcknowledgedPauses(t *testing.T, reasons []string) {
	t.Helper()
	for _, i := range f.cluster.Running() {
		p := f.cluster.Server(i)
		var events []*structs.Event
		if _, _, err := p.Call(http.MethodGet, "/v1/events?kind="+string(structs.EventKindPause), nil, &events); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range events {
			if e.Kind == structs.EventKindPause && e.To == "paused" {
				seen[e.Message] = true
			}
		}
		lost := 0
		for _, r := range reasons {
			if !seen[r] {
				lost++
				t.Errorf("%s: the acknowledged pause %q is missing", p.Name, r)
			}
		}
		if lost == 0 && len(reasons) > 0 {
			t.Logf("%s holds all %d acknowledged pauses", p.Name, len(reasons))
		}
	}
}

// TestPartition_DuringSteps partitions the leader away during an approval,
// during a pre-hook run and during the register of one deployment, and
// heals in between. The deployment carries one approval, its hook runs
// once, its job is registered once, and every server converges.
func TestPartition_DuringSteps(t *testing.T) {
	f := newPartitionFixture(t, hookedFiles(structs.PolicyApproval, 6*time.Second))
	c := f.cluster

	// An approval: sent to the isolated leader, then to the majority.
	l1 := c.Leader()
	pending := c.Server(l1).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StatePendingApproval))
	if err := f.net.Isolate(l1); err != nil {
		t.Fatal(err)
	}
	code, _, err := c.Server(l1).Call(http.MethodPost, "/v1/deployment/"+pending.ID+"/approve", map[string]string{"comment": "minority"}, nil)
	t.Logf("approve through the isolated %s: %d %v", c.Server(l1).Name, code, err)
	minorityAcked := code == http.StatusOK
	l2, _ := f.leaderAmong(t, f.others(l1))
	approveWithRetry(t, c.Server(l2), pending.ID, "majority")
	f.net.Heal()
	t.Logf("approval: converged %s after the heal", f.waitConverged(t).Round(time.Millisecond))
	want := "majority"
	if minorityAcked {
		want = "minority" // acknowledged first: the majority's is then refused
	}
	f.waitEverywhere(t, pending.ID, func(d *structs.Deployment) error { return checkApproved(d, "tester", want) })

	// A pre-hook run.
	l2 = c.Leader()
	running := waitPreHookRunning(t, c.Server(l2))
	if err := f.net.Isolate(l2); err != nil {
		t.Fatal(err)
	}
	l3, _ := f.leaderAmong(t, f.others(l2))
	c.Server(l3).WaitForDeployment(namespace, "web", deployTimeout, func(d *structs.Deployment) error {
		if nopstest.StateRank(d.State) < nopstest.StateRank(structs.StateApplying) {
			return fmt.Errorf("state %s, want applying or later", d.State)
		}
		return nil
	})
	f.net.Heal()
	t.Logf("pre-hook: converged %s after the heal", f.waitConverged(t).Round(time.Millisecond))

	// The register and the wait for health.
	l3 = c.Leader()
	if err := f.net.Isolate(l3); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Server(l3).Deployment(running.ID); err == nil {
		t.Logf("isolated %s with the deployment %s", c.Server(l3).Name, d.State)
	}
	l4, _ := f.leaderAmong(t, f.others(l3))
	done := c.Server(l4).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StateCompleted))
	f.net.Heal()
	t.Logf("register: converged %s after the heal", f.waitConverged(t).Round(time.Millisecond))

	if done.ID != running.ID {
		t.Errorf("deployment %s completed, want %s", done.ID, running.ID)
	}
	f.waitEverywhere(t, done.ID, nopstest.InState(structs.StateCompleted))
	f.checkDispatchedOnce(t, done)
	f.checkOneRegisterPerDeployment(t, "web", 1)
	checkForwardOnly(t, c.Server(l4), done.ID)
}

// approveWithRetry approves a deployment through p, again while the
// cluster has no leader yet (503, nothing applied).
func approveWithRetry(t *testing.T, p *nopstest.Process, id, comment string) {
	t.Helper()
	testutil.WaitForResult(t, minorityLeaderTimeout, func() (bool, error) {
		code, _, err := p.Call(http.MethodPost, "/v1/deployment/"+id+"/approve", map[string]string{"comment": comment}, nil)
		switch {
		case code == http.StatusOK:
			return true, nil
		case code == http.StatusConflict:
			return true, nil // another approval went first: checked by the caller
		case err == nil:
			err = errors.New("no answer")
		}
		return false, err
	})
}
