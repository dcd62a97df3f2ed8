package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

var errInjected = errors.New("injected establish failure")

// failFirst returns an establish hook that fails the first n attempts (all
// of them when n is negative) and counts every attempt in attempts.
func failFirst(n int32, attempts *atomic.Int32) func() error {
	return func() error {
		if a := attempts.Add(1); n < 0 || a <= n {
			return errInjected
		}
		return nil
	}
}

// TestLeader_SingleServerRetriesFailedEstablish fails the first attempts of
// a single server to establish its leadership. With no other voter to hand
// the leadership to, it stays the Raft leader, so it must try again: it
// ends up leading, with its loops, and takes writes.
func TestLeader_SingleServerRetriesFailedEstablish(t *testing.T) {
	const failures = 3
	var attempts atomic.Int32
	// Start waits (20s) until the server leads: 1s+2s+4s of backoff.
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithBuild(func(s *agent.Server) {
		agent.SetEstablishHook(s, failFirst(failures, &attempts))
	}))
	if got := attempts.Load(); got != failures+1 {
		t.Fatalf("%d attempts to establish leadership, want %d", got, failures+1)
	}
	if !s.LeaderLoopsRunning() {
		t.Fatal("the server leads without its leader loops")
	}
	call(t, s, "POST", "/v1/pause", []byte(`{"reason":"after failed establishes"}`)).ok(t, "write", nil)
}

// TestLeader_ClusterRecoversFromFailedEstablish fails the first attempts of
// every server of a 3-server cluster to establish leadership: the cluster
// still ends with a working leader. Then a follower that always fails is
// handed the leadership: it hands it over again, the cluster gets a working
// leader, and the deposed server stops trying.
func TestLeader_ClusterRecoversFromFailedEstablish(t *testing.T) {
	const failures = 2
	attempts := make([]*atomic.Int32, 3)
	c := nopstest.NewCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithBuild(func(s *agent.Server) {
		// Servers start one by one, in order.
		for i := range attempts {
			if attempts[i] == nil {
				attempts[i] = new(atomic.Int32)
				agent.SetEstablishHook(s, failFirst(failures, attempts[i]))
				return
			}
		}
	}))
	for i := 0; i < c.Size(); i++ {
		c.Start(i)
	}
	leader := c.WaitForLeader(60 * time.Second)
	if got := attempts[c.Index(leader)].Load(); got <= failures {
		t.Fatalf("the leader leads after %d attempts to establish, want more than %d", got, failures)
	}
	if !leader.LeaderLoopsRunning() {
		t.Fatal("the leader runs no leader loops")
	}
	call(t, c.Followers()[0], "POST", "/v1/pause", []byte(`{"reason":"first"}`)).ok(t, "write through a follower", nil)

	// A follower that always fails is handed the leadership.
	bad := c.Followers()[0]
	var badAttempts atomic.Int32
	agent.SetEstablishHook(bad.Server, failFirst(-1, &badAttempts))
	f := leader.Raft().LeadershipTransferToServer(raft.ServerID(bad.NodeID()), raft.ServerAddress(bad.RPCAddr()))
	if err := f.Error(); err != nil {
		t.Fatalf("transfer the leadership to %s: %v", bad.Config().NodeName, err)
	}
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return badAttempts.Load() > 0, fmt.Errorf("%s never tried to establish its leadership", bad.Config().NodeName)
	})
	var good *nopstest.Server
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		good = c.Leader()
		if good == nil || good == bad || bad.Raft().State() == raft.Leader {
			return false, fmt.Errorf("no working leader; %s is %s", bad.Config().NodeName, bad.Raft().State())
		}
		return true, nil
	})
	call(t, bad, "POST", "/v1/resume", []byte(`{"reason":"second"}`)).ok(t, "write through the deposed server", nil)

	// Deposed, it makes no more attempts: it would have made at least one
	// in this while (backoffs of 1s, then 2s) had it kept trying.
	tried := badAttempts.Load()
	time.Sleep(4 * time.Second)
	if bad.Raft().State() == raft.Leader {
		t.Skip("the failing server was elected again; cannot judge its retries")
	}
	if got := badAttempts.Load(); got != tried {
		t.Fatalf("the deposed server went on trying to establish leadership: %d attempts, then %d", tried, got)
	}
	if bad.LeaderLoopsRunning() {
		t.Fatal("the deposed server runs leader loops")
	}
}

// TestLeader_DeposedServerStopsRetrying makes a server of a 3-server
// cluster the leader with two failures at once: it fails to establish its
// leadership, and no voter can take it over, since the other two are down.
// It retries while it is the Raft leader; once it steps down for want of a
// quorum, it stops trying.
func TestLeader_DeposedServerStopsRetrying(t *testing.T) {
	c, leader := startBareCluster(t)
	followers := c.Followers()
	bad, other := followers[0], followers[1]
	c.Kill(c.Index(other))
	oldIdx := c.Index(leader)
	var attempts atomic.Int32
	var killOnce sync.Once
	agent.SetEstablishHook(bad.Server, func() error {
		// Before its first failure, the old leader goes down too: the
		// transfer finds no one to take the leadership.
		killOnce.Do(func() { c.Kill(oldIdx) })
		attempts.Add(1)
		return errInjected
	})
	f := leader.Raft().LeadershipTransferToServer(raft.ServerID(bad.NodeID()), raft.ServerAddress(bad.RPCAddr()))
	if err := f.Error(); err != nil {
		t.Fatalf("transfer the leadership to %s: %v", bad.Config().NodeName, err)
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if attempts.Load() == 0 || bad.Raft().State() == raft.Leader {
			return false, fmt.Errorf("%d attempts to establish; %s is %s", attempts.Load(), bad.Config().NodeName, bad.Raft().State())
		}
		return true, nil
	})
	t.Logf("%d attempts before stepping down", attempts.Load())
	tried := attempts.Load()
	// Had it kept trying, it would have tried again in this while: the
	// backoff is at most 30s, but starts at 1s.
	time.Sleep(4 * time.Second)
	if got := attempts.Load(); got != tried {
		t.Fatalf("the deposed server went on trying to establish leadership: %d attempts, then %d", tried, got)
	}
	if bad.LeaderLoopsRunning() || bad.IsLeader() {
		t.Fatal("the deposed server leads")
	}
}

// TestLeader_ShutdownStopsRetrying shuts down a single server that keeps
// failing to establish its leadership, and so keeps retrying: Shutdown
// returns promptly, the attempts stop, and no goroutine of the server stays
// behind.
func TestLeader_ShutdownStopsRetrying(t *testing.T) {
	before := runtime.NumGoroutine()
	cfg := nopstest.Config(t, t.TempDir())
	var attempts atomic.Int32
	s, err := agent.New(cfg, nopstest.Logger(cfg.NodeName), agent.Options{
		Build: func(s *agent.Server) (agent.LeaderFunc, agent.Reconciler, error) {
			agent.SetEstablishHook(s, failFirst(-1, &attempts))
			return nil, nil, nil
		},
	})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	// The first attempt, and a retry after 1s.
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return attempts.Load() >= 2, fmt.Errorf("%d attempts to establish leadership, want a retry", attempts.Load())
	})
	if s.Raft().State() != raft.Leader || s.IsLeader() {
		t.Fatalf("raft state %s, established %v: want a Raft leader without its leadership", s.Raft().State(), s.IsLeader())
	}

	done := make(chan struct{})
	go func() {
		s.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown of a server retrying its leadership did not return")
	}
	tried := attempts.Load()
	time.Sleep(3 * time.Second)
	if got := attempts.Load(); got != tried {
		t.Fatalf("attempts went on after the shutdown: %d, then %d", tried, got)
	}
	http.DefaultClient.CloseIdleConnections()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		n := runtime.NumGoroutine()
		if n <= before+2 {
			return true, nil
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return false, fmt.Errorf("%d goroutines, %d before the server:\n%s", n, before, leftovers(buf, t.Name()))
	})
}

// TestLeader_LoopsStartAfterTheLogIsApplied restarts a server on a log of
// entries its state has not applied, and slows its applies: its leader
// loops start only once the state holds every entry the log had when it
// was elected (the barrier of leadership.establish), never on a state that
// lags its log.
func TestLeader_LoopsStartAfterTheLogIsApplied(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, devConfig(t, dir))
	for i := range 40 {
		if code, body, _ := do(t, s, "POST", fmt.Sprintf("/v1/job/default/job-%02d/pause", i), `{"reason":"x"}`); code != http.StatusOK {
			t.Fatalf("pause: %d %v", code, body)
		}
	}
	s.Shutdown()

	type start struct{ applied, lastAtElection uint64 }
	var lastAtElection atomic.Uint64
	started := make(chan start, 8)
	build := func(s *agent.Server) (agent.LeaderFunc, agent.Reconciler, error) {
		agent.SetApplyHook(s, func() { time.Sleep(time.Second) })
		agent.SetEstablishHook(s, func() error {
			lastAtElection.Store(s.Raft().LastIndex())
			return nil
		})
		leader := func(ctx context.Context, s *agent.Server) {
			started <- start{applied: s.Raft().AppliedIndex(), lastAtElection: lastAtElection.Load()}
			<-ctx.Done()
		}
		return leader, nil, nil
	}
	s2, err := agent.New(devConfig(t, dir), hclog.NewNullLogger(), agent.Options{Build: build})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Shutdown)
	select {
	case st := <-started:
		if st.lastAtElection < 40 {
			t.Fatalf("the log held %d entries at the election; want at least the 40 written", st.lastAtElection)
		}
		if st.applied < st.lastAtElection {
			t.Fatalf("the leader loops started at applied index %d, behind the log's %d at the election", st.applied, st.lastAtElection)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the leader loops never started")
	}
	if p, err := s2.State().Paused("", "default", "job-39"); err != nil || p == nil {
		t.Fatalf("the last pause is not in the state: %+v %v", p, err)
	}
}
