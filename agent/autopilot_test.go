package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// waitRaftSize waits until the leader's Raft configuration has n servers.
func waitRaftSize(t *testing.T, c *nopstest.Cluster, n int, timeout time.Duration) map[string]raft.Server {
	t.Helper()
	var got map[string]raft.Server
	testutil.WaitForResult(t, timeout, func() (bool, error) {
		l := c.Leader()
		if l == nil {
			return false, fmt.Errorf("no leader")
		}
		var err error
		got, err = nopstest.RaftServers(l)
		if err != nil {
			return false, err
		}
		return len(got) == n, fmt.Errorf("%d raft servers, want %d: %v", len(got), n, got)
	})
	return got
}

func health(t *testing.T, s *nopstest.Server) (*structs.AutopilotHealth, error) {
	t.Helper()
	var h structs.AutopilotHealth
	code, body := s.Do(http.MethodGet, "/v1/operator/autopilot/health", nil, &h)
	if code != http.StatusOK {
		return nil, fmt.Errorf("health: %d %s", code, body)
	}
	return &h, nil
}

// A 5-server cluster loses a server for good: autopilot removes it from
// Raft, and the four left are healthy with one failure to spare.
func TestAutopilot_RemovesDeadServer(t *testing.T) {
	c := nopstest.StartCluster(t, 5, nopstest.WithoutReconcilers())
	c.WaitForPeers(60*time.Second, c.NodeIDs()...)
	leader := c.WaitForLeader(30 * time.Second)
	victim := (c.Index(leader) + 1) % 5
	deadID := c.Server(victim).NodeID()
	c.Kill(victim)

	got := waitRaftSize(t, c, 4, 90*time.Second)
	if _, ok := got[deadID]; ok {
		t.Fatalf("the dead server %s is still a raft peer: %v", deadID, got)
	}
	follower := c.Followers()[0]
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		h, err := health(t, follower)
		if err != nil {
			return false, err
		}
		if !h.Healthy || h.FailureTolerance != 1 || len(h.Servers) != 4 || len(h.Voters) != 4 {
			return false, fmt.Errorf("health %+v", h)
		}
		for _, s := range h.Servers {
			if !s.Healthy || s.LastIndex == 0 || s.LastTerm == 0 || s.StableSince.IsZero() || s.Version != agent.Version {
				return false, fmt.Errorf("server %+v", s)
			}
		}
		return true, nil
	})
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		_, metrics := c.Leader().Do(http.MethodGet, "/metrics", nil, nil)
		return strings.Contains(metrics, "nops_autopilot_healthy 1") && strings.Contains(metrics, "nops_autopilot_failure_tolerance 1"),
			fmt.Errorf("leader metrics lack the autopilot figures")
	})
	// One health series per remaining server, none for the removed one.
	_, metrics := c.Leader().Do(http.MethodGet, "/metrics", nil, nil)
	if n := strings.Count(metrics, "\nnops_autopilot_server_healthy{"); n != 4 || strings.Contains(metrics, `id="`+deadID+`"`) {
		t.Errorf("the leader exports %d server health series (want 4, none for %s):\n%s", n, deadID, metrics)
	}
	if _, metrics := follower.Do(http.MethodGet, "/metrics", nil, nil); strings.Contains(metrics, "nops_autopilot_healthy") ||
		strings.Contains(metrics, "nops_autopilot_server_healthy") {
		t.Errorf("a follower exports autopilot metrics")
	}
}

// A 3-server cluster with min_quorum 3 keeps a dead server: removing it
// would leave fewer voters than the minimum. Lowering min_quorum through
// the API lets autopilot remove it, which shows the first wait was not
// for nothing.
func TestAutopilot_NeverBelowMinQuorum(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.Autopilot.MinQuorum = 3
	}))
	c.WaitForPeers(60*time.Second, c.NodeIDs()...)
	leader := c.WaitForLeader(30 * time.Second)
	victim := (c.Index(leader) + 1) % 3
	deadName := c.Config(victim).NodeName
	c.Kill(victim)

	// Wait until autopilot sees the server dead, then through several of
	// its reconcile passes (every 5s).
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		h, err := health(t, c.Leader())
		if err != nil {
			return false, err
		}
		for _, s := range h.Servers {
			if s.Name == deadName && s.SerfStatus == "failed" && !s.Healthy {
				return true, nil
			}
		}
		return false, fmt.Errorf("autopilot does not see %s failed yet: %+v", deadName, h.Servers)
	})
	deadline := time.Now().Add(16 * time.Second)
	for time.Now().Before(deadline) {
		got, err := nopstest.RaftServers(c.Leader())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("autopilot removed a server below min_quorum 3: %v", got)
		}
		time.Sleep(500 * time.Millisecond)
	}

	var conf structs.AutopilotConfiguration
	if code, body := c.Leader().Do(http.MethodGet, "/v1/operator/autopilot/configuration", nil, &conf); code != http.StatusOK {
		t.Fatalf("get config: %d %s", code, body)
	}
	if conf.MinQuorum != 3 || conf.ModifyIndex != 0 {
		t.Fatalf("config from the file = %+v", conf)
	}
	conf.MinQuorum = 2
	follower := c.Followers()[0]
	if code, body := follower.Do(http.MethodPut, "/v1/operator/autopilot/configuration?cas=0", conf, &conf); code != http.StatusOK {
		t.Fatalf("set config through a follower: %d %s", code, body)
	}
	waitRaftSize(t, c, 2, 60*time.Second)
}

// A server that joins a running cluster is a non-voter until it has been
// healthy for server_stabilization_time; then autopilot promotes it.
func TestAutopilot_NewServerIsNonVoterUntilStable(t *testing.T) {
	const stabilization = 8 * time.Second
	c := nopstest.NewCluster(t, 4, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.BootstrapExpect = 3
		cfg.Autopilot.ServerStabilizationTime = stabilization
	}))
	for i := 0; i < 3; i++ {
		c.Start(i)
	}
	c.WaitForLeader(30 * time.Second)
	c.WaitForPeers(60*time.Second, c.NodeIDs()...)
	// Autopilot ignores the stabilization time while it has run for less
	// than it (as on a fresh leader); wait past that.
	time.Sleep(stabilization + 2*time.Second)

	joined := time.Now()
	newID := c.Start(3).NodeID()
	var nonVoterSeen, voterAt time.Time
	testutil.WaitForResult(t, stabilization+60*time.Second, func() (bool, error) {
		got, err := nopstest.RaftServers(c.Leader())
		if err != nil {
			return false, err
		}
		srv, ok := got[newID]
		if !ok {
			return false, fmt.Errorf("new server not in raft yet: %v", got)
		}
		if srv.Suffrage == raft.Nonvoter && nonVoterSeen.IsZero() {
			nonVoterSeen = time.Now()
		}
		if srv.Suffrage != raft.Voter {
			return false, fmt.Errorf("new server is %v", srv.Suffrage)
		}
		voterAt = time.Now()
		return true, nil
	})
	if nonVoterSeen.IsZero() {
		t.Fatalf("the new server was never seen as a non-voter")
	}
	if d := voterAt.Sub(nonVoterSeen); d < stabilization-time.Second {
		t.Fatalf("promoted %s after it was first seen as a non-voter, before the stabilization time %s", d, stabilization)
	}
	t.Logf("joined, non-voter after %s, voter after %s", nonVoterSeen.Sub(joined), voterAt.Sub(joined))
}

// The autopilot configuration endpoint refuses bad input, and a
// compare-and-set at a stale index, changing nothing.
func TestAutopilot_ConfigurationValidation(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	var conf structs.AutopilotConfiguration
	if code, body := s.Do(http.MethodGet, "/v1/operator/autopilot/configuration", nil, &conf); code != http.StatusOK {
		t.Fatalf("get: %d %s", code, body)
	}
	if !conf.CleanupDeadServers || conf.LastContactThreshold != "200ms" || conf.MaxTrailingLogs != 250 || conf.ServerStabilizationTime != "10s" {
		t.Fatalf("defaults = %+v", conf)
	}
	for _, tc := range []struct {
		body any
		code int
		want string
	}{
		{`{"last_contact_threshold": "soon", "server_stabilization_time": "10s"}`, 400, "last_contact_threshold"},
		{`{"last_contact_threshold": "1s", "server_stabilization_time": "-1s"}`, 400, "server_stabilization_time"},
		{`{"last_contact_threshold": "1s", "server_stabilization_time": "1s", "min_quorum": 100}`, 400, "min_quorum"},
		{`{"last_contact_threshold": "1s", "server_stabilization_time": "1s", "bogus": 1}`, 400, "bogus"},
		{`{"last_contact_threshold": `, 400, "malformed"},
		{strings.Repeat(" ", 2<<20), 413, "too large"},
	} {
		code, body := s.Do(http.MethodPut, "/v1/operator/autopilot/configuration", tc.body, nil)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("PUT %.60v: %d %s, want %d naming %q", tc.body, code, body, tc.code, tc.want)
		}
	}
	good := `{"cleanup_dead_servers": false, "last_contact_threshold": "1s", "max_trailing_logs": 10, "min_quorum": 3, "server_stabilization_time": "30s"}`
	if code, body := s.Do(http.MethodPut, "/v1/operator/autopilot/configuration?cas=0", good, &conf); code != http.StatusOK {
		t.Fatalf("put: %d %s", code, body)
	}
	if conf.CleanupDeadServers || conf.MinQuorum != 3 || conf.ModifyIndex == 0 {
		t.Fatalf("after put = %+v", conf)
	}
	if code, body := s.Do(http.MethodPut, "/v1/operator/autopilot/configuration?cas=1", good, nil); code != http.StatusConflict {
		t.Fatalf("stale cas: %d %s", code, body)
	}
	if code, body := s.Do(http.MethodPut, "/v1/operator/autopilot/configuration?cas=x", good, nil); code != http.StatusBadRequest {
		t.Fatalf("bad cas: %d %s", code, body)
	}
	var again structs.AutopilotConfiguration
	s.Do(http.MethodGet, "/v1/operator/autopilot/configuration", nil, &again)
	if again != conf {
		t.Fatalf("refused writes changed the config: %+v, was %+v", again, conf)
	}
}

// An entry of a type no server knows, flagged ignorable (as a newer
// version writes what an older one may skip), is skipped by every server
// of a real cluster: none stops, and the next writes apply everywhere.
func TestUpgrade_UnknownIgnorableEntryIsSkipped(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(60*time.Second, c.NodeIDs()...)
	leader := c.WaitForLeader(30 * time.Second)
	unknown := []byte{byte(99 | structs.IgnoreUnknownTypeFlag), 0x81, 0xa1, 'x', 0x01}
	f := leader.Raft().Apply(unknown, 10*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if resp := f.Response(); resp != nil {
		t.Fatalf("response to an ignorable entry: %v", resp)
	}
	skipped := f.Index()
	if code, body := c.Followers()[0].Do(http.MethodPost, "/v1/pause", map[string]string{"reason": "after the unknown entry"}, nil); code != http.StatusOK {
		t.Fatalf("write after the unknown entry: %d %s", code, body)
	}
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		for _, s := range c.Servers() {
			if s.State().LatestIndex() <= skipped {
				return false, fmt.Errorf("%s is at index %d", s.Config().NodeName, s.State().LatestIndex())
			}
			if p, _ := s.State().Paused("", "default", "any"); p == nil {
				return false, fmt.Errorf("%s has not applied the pause", s.Config().NodeName)
			}
		}
		return true, nil
	})
}
