package agent_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestFailover_KillLeader kills the leader without a leave: a new leader is
// elected within seconds, what was committed before is still there, and a
// write through any survivor works again.
func TestFailover_KillLeader(t *testing.T) { testKillLeader(t) }

// TestFailover_KillLeaderMTLS is TestFailover_KillLeader with mutual TLS
// on the RPC port and TLS on the HTTP API.
func TestFailover_KillLeaderMTLS(t *testing.T) {
	testKillLeader(t, nopstest.WithTLS(nopstest.NewTLS(t, ""), true))
}

func testKillLeader(t *testing.T, opts ...nopstest.Option) {
	c := nopstest.StartCluster(t, 3, append([]nopstest.Option{nopstest.WithoutReconcilers()}, opts...)...)
	old := c.Leader()
	call(t, c.Followers()[0], "PUT", "/v1/window/nights", []byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`)).ok(t, "window", nil)

	start := time.Now()
	c.Kill(c.Index(old))
	leader := c.WaitForLeader(15 * time.Second)
	t.Logf("new leader %s after %s", leader.Config().NodeName, time.Since(start).Round(time.Millisecond))
	if leader.NodeID() == old.NodeID() {
		t.Fatal("the killed server is still the leader")
	}

	for i, s := range c.Servers() {
		var pauses []structs.Pause
		job := fmt.Sprintf("job-%d", i)
		call(t, s, "POST", "/v1/job/default/"+job+"/pause", []byte(`{"reason":"after failover"}`)).ok(t, "write through "+s.Config().NodeName, &pauses)
	}
	waitEverywhere(t, c, 10*time.Second, func(st *fsm.StateStore) error {
		if w, _ := st.Window("nights"); w == nil {
			return fmt.Errorf("the window committed before the failover is gone")
		}
		for i := range c.Servers() {
			if p, _ := st.Paused("", "default", fmt.Sprintf("job-%d", i)); p == nil {
				return fmt.Errorf("pause of job-%d missing", i)
			}
		}
		return nil
	})
}

// TestFailover_LeaderWithoutQuorumStepsDown stops both followers, as a
// partition would cut them off: the old leader cannot commit, steps down,
// stops its leader loops, and answers writes with 503.
func TestFailover_LeaderWithoutQuorumStepsDown(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	leader := c.Leader()
	if !leader.LeaderLoopsRunning() {
		t.Fatal("the leader runs no leader loops")
	}
	for _, f := range c.Followers() {
		c.Kill(c.Index(f))
	}

	// An entry proposed now cannot be committed: it fails, and never
	// shows in the state while the leader is alone.
	start := time.Now()
	_, err := leader.Apply(structs.PauseRequestType, &structs.PauseRequest{
		WriteMeta: structs.WriteMeta{Time: time.Now().UTC(), Actor: "tester"}, Global: true, Reason: "alone"})
	if err == nil {
		t.Fatal("a leader without quorum committed a write")
	}
	if !errors.Is(err, structs.ErrNotLeader) {
		t.Fatalf("apply without quorum: %v, want ErrNotLeader", err)
	}
	t.Logf("apply without quorum failed after %s: %v", time.Since(start).Round(time.Millisecond), err)

	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		if leader.Raft().State() == raft.Leader || leader.IsLeader() || leader.LeaderLoopsRunning() {
			return false, fmt.Errorf("raft state %s, leader loops running %v", leader.Raft().State(), leader.LeaderLoopsRunning())
		}
		return true, nil
	})
	t.Logf("stepped down and stopped the leader loops %s after losing quorum", time.Since(start).Round(time.Millisecond))

	a := call(t, leader, "PUT", "/v1/window/nights", []byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`))
	if a.code != http.StatusServiceUnavailable {
		t.Fatalf("write to a leader without quorum: %d %s", a.code, a.body)
	}
	if a.elapsed > 7*time.Second {
		t.Fatalf("write to a leader without quorum answered after %s", a.elapsed)
	}
	if p, _ := leader.State().Paused("", "default", "any"); p != nil {
		t.Fatalf("an uncommitted pause shows in the state: %+v", p)
	}
	if w, _ := leader.State().Window("nights"); w != nil {
		t.Fatalf("an uncommitted window shows in the state: %+v", w)
	}
}

// TestFailover_ReconcilersRunOnLeaderOnly runs three servers with their
// reconcilers against a real Nomad: the loops run on exactly one server,
// the leader, which records the detection cycles; after a leadership
// transfer and after a kill of the leader, on exactly the new one.
func TestFailover_ReconcilersRunOnLeaderOnly(t *testing.T) {
	nomad := testutil.StartNomad(t)
	c := nopstest.StartCluster(t, 3, nopstest.WithNomad(nomad.Addr))

	onlyLeaderRuns := func(what string) *nopstest.Server {
		t.Helper()
		var leader *nopstest.Server
		testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
			leader = c.WaitForLeader(20 * time.Second)
			running := 0
			for _, s := range c.Servers() {
				if s.LeaderLoopsRunning() {
					running++
					if s != leader {
						return false, fmt.Errorf("%s: follower %s runs the leader loops", what, s.Config().NodeName)
					}
				}
			}
			if running != 1 {
				return false, fmt.Errorf("%s: %d servers run the leader loops", what, running)
			}
			// The loops do run: the leader records its detection cycles,
			// and every server sees them.
			for _, s := range c.Servers() {
				cycle, err := s.State().DetectionCycle()
				if err != nil {
					return false, err
				}
				if cycle == nil || cycle.Leader != leader.NodeID() {
					return false, fmt.Errorf("%s: server %s shows detection cycle %+v, want one by %s", what, s.Config().NodeName, cycle, leader.NodeID())
				}
			}
			return true, nil
		})
		return leader
	}

	first := onlyLeaderRuns("after forming")
	call(t, c.Followers()[0], "POST", "/v1/operator/raft/transfer-leadership", nil).ok(t, "transfer", nil)
	second := onlyLeaderRuns("after a leadership transfer")
	if second.NodeID() == first.NodeID() {
		t.Fatal("leadership did not move")
	}
	if first.LeaderLoopsRunning() {
		t.Fatal("the old leader still runs its loops")
	}
	c.Kill(c.Index(second))
	third := onlyLeaderRuns("after a kill of the leader")
	if third.NodeID() == second.NodeID() {
		t.Fatal("the killed server still leads")
	}
}

// stateWatch checks, while the cluster runs, that no server ever shows a
// deployment in an earlier state than it showed before (each run of a
// server on its own: a restarted server replays its log), and that the
// state seen on whichever server leads never goes back across leaders.
type stateWatch struct {
	mu         sync.Mutex
	perServer  map[any]map[string]int
	onLeader   map[string]int
	violations []string
	stop       chan struct{}
	done       chan struct{}
}

func watchStates(c *nopstest.Cluster) *stateWatch {
	w := &stateWatch{perServer: map[any]map[string]int{}, onLeader: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			for _, s := range c.Servers() {
				w.observe(s)
			}
		}
	}()
	return w
}

func (w *stateWatch) observe(s *nopstest.Server) {
	leading := s.IsLeader()
	deps, _, err := s.State().Deployments(fsm.DeploymentFilter{})
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := w.perServer[s.Server]
	if seen == nil {
		seen = map[string]int{}
		w.perServer[s.Server] = seen
	}
	for _, d := range deps {
		r := nopstest.StateRank(d.State)
		if prev, ok := seen[d.ID]; ok && r < prev {
			w.violations = append(w.violations, fmt.Sprintf("server %s showed deployment %s go back to %s", s.Config().NodeName, d.ID, d.State))
		}
		seen[d.ID] = max(seen[d.ID], r)
		if leading {
			if prev, ok := w.onLeader[d.ID]; ok && r < prev {
				w.violations = append(w.violations, fmt.Sprintf("leader %s showed deployment %s in %s, behind an earlier leader", s.Config().NodeName, d.ID, d.State))
			}
			w.onLeader[d.ID] = max(w.onLeader[d.ID], r)
		}
	}
}

func (w *stateWatch) finish() []string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.violations
}

// TestFailover_Chaos approves deployments through random servers while
// random servers are killed and restarted on their data dirs. At the end
// every acknowledged approval is on every server, no deployment state went
// backwards, and no job has two active deployments.
func TestFailover_Chaos(t *testing.T) { testChaos(t) }

// TestFailover_ChaosMTLS is TestFailover_Chaos with mutual TLS on the RPC
// port and TLS on the HTTP API.
func TestFailover_ChaosMTLS(t *testing.T) {
	testChaos(t, nopstest.WithTLS(nopstest.NewTLS(t, ""), true))
}

func testChaos(t *testing.T, opts ...nopstest.Option) {
	rounds, budget := 20, 3*time.Minute
	if testing.Short() {
		rounds = 5
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	c := nopstest.StartCluster(t, 3, append([]nopstest.Option{nopstest.WithoutReconcilers()}, opts...)...)
	watch := watchStates(c)
	var acked []string
	var jobs []string
	duplicates, ackedAcrossFailover := 0, 0
	start := time.Now()
	for round := 0; round < rounds && time.Since(start) < budget; round++ {
		leader := c.WaitForLeader(30 * time.Second)
		id := deploymentID(100 + round)
		job := fmt.Sprintf("web-%d", round)
		if !tryPending(leader, id, job) {
			// Leadership moved between the wait and the write: next round.
			continue
		}
		jobs = append(jobs, job)
		// A second deployment for a job that has an active one is
		// always refused.
		if len(jobs) > 1 {
			other := jobs[rng.IntN(len(jobs)-1)]
			if tryPending(leader, deploymentID(10000+round), other) {
				duplicates++
			}
		}

		// Approve through a random server while another random server
		// is killed.
		servers := c.Servers()
		via := servers[rng.IntN(len(servers))]
		victim := rng.IntN(c.Size())
		type result struct {
			code int
			body []byte
			err  error
		}
		res := make(chan result, 1)
		approve := func() {
			a, err := tryCall(via, "POST", "/v1/deployment/"+id+"/approve", []byte(`{"comment":"round"}`))
			res <- result{a.code, a.body, err}
		}
		// The kill lands a little before or a little after the approve
		// starts: a forwarded approve may have to wait for a new leader.
		lag := time.Duration(rng.IntN(40)-20) * time.Millisecond
		killedLeader := c.Server(victim).IsLeader()
		if lag < 0 {
			c.Kill(victim)
			time.Sleep(-lag)
			go approve()
		} else {
			go approve()
			time.Sleep(lag)
			c.Kill(victim)
		}
		r := <-res
		if r.err == nil && r.code == http.StatusOK {
			// An acknowledgement is the approved deployment, nothing
			// less.
			var d structs.Deployment
			if err := json.Unmarshal(r.body, &d); err != nil || d.ID != id || len(d.Decisions) != 1 {
				t.Errorf("round %d: approve of %s answered 200 with %q", round, id, r.body)
			}
			acked = append(acked, id)
			if killedLeader && lag < 0 {
				ackedAcrossFailover++
			}
		} else {
			t.Logf("round %d: approve of %s through %s, server %d killed (leader %v) %s from its start: %d %v",
				round, id, via.Config().NodeName, victim, killedLeader, lag, r.code, r.err)
		}
		c.Start(victim)
	}
	c.WaitForLeader(30 * time.Second)
	t.Logf("%d rounds in %s, %d approvals acknowledged, %d of them sent after the leader was killed",
		len(jobs), time.Since(start).Round(time.Millisecond), len(acked), ackedAcrossFailover)
	if len(acked) == 0 {
		t.Fatal("no approval was acknowledged: the test shows nothing")
	}

	waitEverywhere(t, c, 30*time.Second, func(st *fsm.StateStore) error {
		for _, id := range acked {
			d, err := st.Deployment(id)
			if err != nil || d == nil {
				return fmt.Errorf("acknowledged approval of %s lost: %v\n%s", id, err, raftSummary(c))
			}
			if d.State != structs.StatePreHook && d.State != structs.StateApplying {
				return fmt.Errorf("acknowledged approval of %s: deployment in %s (modify index %d)\n%s", id, d.State, d.ModifyIndex, raftSummary(c))
			}
			if len(d.Decisions) != 1 || d.Decisions[0].Kind != structs.DecisionApprove || d.Decisions[0].Actor != "tester" {
				return fmt.Errorf("acknowledged approval of %s: decisions %+v", id, d.Decisions)
			}
		}
		active, err := st.ActiveDeployments()
		if err != nil {
			return err
		}
		perJob := map[string]int{}
		for _, d := range active {
			perJob[d.Key()]++
			if perJob[d.Key()] > 1 {
				return fmt.Errorf("job %s has %d active deployments", d.Key(), perJob[d.Key()])
			}
		}
		return nil
	})
	if duplicates > 0 {
		t.Fatalf("%d second deployments were created for jobs with an active one", duplicates)
	}
	// Every server converges on the same state.
	want := stateDigest(t, c.Leader().State())
	waitEverywhere(t, c, 30*time.Second, func(st *fsm.StateStore) error {
		if got := stateDigest(t, st); got != want {
			return fmt.Errorf("state differs from the leader's")
		}
		return nil
	})
	if v := watch.finish(); len(v) > 0 {
		t.Fatalf("deployment states went backwards:\n%v", v)
	}
}

// tryPending writes a pending deployment through the leader's Raft and
// reports whether it was committed.
func tryPending(leader *nopstest.Server, id, job string) bool {
	now := time.Now().UTC()
	meta := structs.WriteMeta{Time: now, Actor: "nops"}
	d := &structs.Deployment{ID: id, Namespace: "default", JobID: job, Repository: "ops", Commit: "0123456789abcdef",
		File: job + ".nomad.hcl", Policy: structs.PolicyApproval, State: structs.StateDetected, SpecHash: "spec-" + job,
		Spec: []byte(`{"ID":"` + job + `"}`), Diff: "+ job " + job, DiffHash: "diff-" + job}
	if _, err := leader.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta, Deployment: d}); err != nil {
		return false
	}
	_, err := leader.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: meta, ID: id, To: structs.StatePendingApproval})
	return err == nil
}

// raftSummary describes the Raft state of every running server, for
// failure messages.
func raftSummary(c *nopstest.Cluster) string {
	var b strings.Builder
	for _, s := range c.Servers() {
		st := s.Raft().Stats()
		fmt.Fprintf(&b, "%s (%s): state=%s term=%s last_log=%s commit=%s applied=%s fsm_index=%d config=%s\n",
			s.Config().NodeName, s.NodeID()[:8], st["state"], st["term"], st["last_log_index"], st["commit_index"],
			st["applied_index"], s.State().LatestIndex(), st["latest_configuration"])
	}
	return b.String()
}
