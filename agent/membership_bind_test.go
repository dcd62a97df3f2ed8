package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// holdFor is how long a test watches the Raft configuration after an
// attack: two of the leader's periodic reconciles of peers (10s) and
// several of autopilot's dead-server cleanups (5s).
const holdFor = 25 * time.Second

// votersHold fails the test as soon as, within holdFor, the leader's Raft
// configuration is not every server of c as a voter at its own address.
func votersHold(t *testing.T, c *nopstest.Cluster, leader *nopstest.Server) {
	t.Helper()
	want := map[string]raft.ServerAddress{}
	for _, s := range c.Servers() {
		want[s.NodeID()] = raft.ServerAddress(s.RPCAddr())
	}
	for end := time.Now().Add(holdFor); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		servers, err := nopstest.RaftServers(leader)
		if err != nil {
			t.Fatal(err)
		}
		for id, addr := range want {
			srv, ok := servers[id]
			if !ok || srv.Suffrage != raft.Voter || srv.Address != addr {
				t.Fatalf("server %s at %s is no longer a voter: raft configuration %v", id, addr, servers)
			}
		}
		if len(servers) != len(want) {
			t.Fatalf("raft configuration changed: %v", servers)
		}
	}
}

// waitRefused waits until s answers GET /v1/agent/members with each named
// member refused for claiming the node ID of the server it names.
func waitRefused(t *testing.T, s *nopstest.Server, refused map[string]string) {
	t.Helper()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		var members []structs.Member
		if code, body := s.Do("GET", "/v1/agent/members", nil, &members); code != http.StatusOK {
			return false, fmt.Errorf("members: %d %s", code, body)
		}
		got := map[string]string{}
		for _, m := range members {
			got[m.Name] = m.Refused
		}
		for name, victim := range refused {
			if !strings.Contains(got[name], "of server "+victim) {
				return false, fmt.Errorf("member %s is not refused as claiming server %s: %v", name, victim, got)
			}
		}
		for name, why := range got {
			if _, ok := refused[name]; !ok && why != "" {
				return false, fmt.Errorf("member %s is refused: %s", name, why)
			}
		}
		return true, nil
	})
}

// waitStatus waits until s sees member name with status st, or no longer
// sees it when st is serf.StatusNone.
func waitStatus(t *testing.T, s *nopstest.Server, name string, st serf.MemberStatus) {
	t.Helper()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		for _, m := range s.Members() {
			if m.Name == name {
				return m.Status == st, fmt.Errorf("member %s is %s, want %s", name, m.Status, st)
			}
		}
		return st == serf.StatusNone, fmt.Errorf("member %s is gone, want %s", name, st)
	})
}

// startBoundCluster starts a cluster of three servers without reconcilers
// and waits until each has bound every peer; it returns the cluster and its
// leader.
func startBoundCluster(t *testing.T) (*nopstest.Cluster, *nopstest.Server) {
	t.Helper()
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.Leader()
	for _, s := range c.Servers() {
		waitBound(t, c, s)
	}
	return c, leader
}

// waitBound waits until s names every Raft peer of c by its server's name
// in list-peers: s has bound each peer to its own member.
func waitBound(t *testing.T, c *nopstest.Cluster, s *nopstest.Server) {
	t.Helper()
	want := map[string]string{}
	for _, srv := range c.Servers() {
		want[srv.NodeID()] = srv.Config().NodeName
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		var conf structs.RaftConfiguration
		if code, body := s.Do("GET", "/v1/operator/raft/configuration", nil, &conf); code != http.StatusOK {
			return false, fmt.Errorf("raft configuration: %d %s", code, body)
		}
		for _, p := range conf.Servers {
			if p.Node != want[p.ID] {
				return false, fmt.Errorf("peer %s is named %q, want %q", p.ID, p.Node, want[p.ID])
			}
		}
		return len(conf.Servers) == len(want), fmt.Errorf("%d peers, want %d", len(conf.Servers), len(want))
	})
}

// impostorTags are the tags of a member that claims server v: its node ID
// and its real RPC address, where v answers the identity probe itself.
func impostorTags(v *nopstest.Server) map[string]string {
	return nopstest.MemberTags(v.NodeID(), v.RPCAddr(), "global")
}

// TestMembership_ImpostorsLeaveWithoutRemovingPeers: members that claim the
// node IDs and RPC addresses of both followers under new names, then
// leave, remove nobody (before, the leader removed both, leaving one voter
// of three), and every server shows them as refused.
func TestMembership_ImpostorsLeaveWithoutRemovingPeers(t *testing.T) {
	testImpostorsLeave(t)
}

// TestMembership_ImpostorsLeaveWithoutRemovingPeersMTLS is the same with
// mutual TLS on the RPC port: the servers bind their peers over it.
func TestMembership_ImpostorsLeaveWithoutRemovingPeersMTLS(t *testing.T) {
	testImpostorsLeave(t, nopstest.WithTLS(nopstest.NewTLS(t, ""), true))
}

func testImpostorsLeave(t *testing.T, opts ...nopstest.Option) {
	c := nopstest.StartCluster(t, 3, append([]nopstest.Option{nopstest.WithoutReconcilers()}, opts...)...)
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.Leader()
	refused := map[string]string{}
	var impostors []*serf.Serf
	for i, v := range c.Followers() {
		name := fmt.Sprintf("impostor-%d", i)
		impostors = append(impostors, nopstest.FakeMember(t, leader, name, impostorTags(v)))
		refused[name] = v.Config().NodeName
	}
	for _, s := range c.Servers() {
		waitRefused(t, s, refused)
	}
	for _, imp := range impostors {
		if err := imp.Leave(); err != nil {
			t.Fatal(err)
		}
	}
	for name := range refused {
		waitStatus(t, leader, name, serf.StatusLeft)
	}
	leader.ReconcilePeersNow()
	votersHold(t, c, leader)
	// Left, they are still refused while gossip remembers them.
	waitRefused(t, leader, refused)
}

// TestMembership_SteadyClusterProbesOnlyContestedPeers: once every peer is
// bound, a round of the bindings asks no peer again (before, every server
// asked every peer every 10 s, each over a new connection); a member that
// claims a follower's node ID under another name makes each round ask that
// follower, and no other.
func TestMembership_SteadyClusterProbesOnlyContestedPeers(t *testing.T) {
	c, leader := startBoundCluster(t)
	before := leader.BindPeersNow()
	for range 3 {
		if n := leader.BindPeersNow(); n != before {
			t.Fatalf("a round over bound, uncontested peers probed %d peers", n-before)
		}
	}
	v := c.Followers()[0]
	nopstest.FakeMember(t, leader, "impostor", impostorTags(v))
	waitRefused(t, leader, map[string]string{"impostor": v.Config().NodeName})
	before = leader.BindPeersNow()
	after := leader.BindPeersNow()
	if after-before != 1 {
		t.Fatalf("a round with one contested peer probed %d peers, want 1", after-before)
	}
	waitRefused(t, leader, map[string]string{"impostor": v.Config().NodeName})
}

// TestMembership_CutOffServerRemovesNoPeer: a server that reaches no other
// voter must not remove a failed one (it may be the one cut off, and the
// removal would leave the others short of a quorum of the configuration
// they receive); with one peer dead and the other answering, the dead one
// may go.
func TestMembership_CutOffServerRemovesNoPeer(t *testing.T) {
	c, leader := startBoundCluster(t)
	followers := c.Followers()
	dead, alive := followers[0], followers[1]
	deadID, deadName := dead.NodeID(), dead.Config().NodeName
	dead.Shutdown()
	if err := leader.CheckFailedPeer(deadID, deadName); err != nil {
		t.Fatalf("one dead peer, the other answering: %v; want it removable", err)
	}
	alive.Shutdown()
	err := leader.CheckFailedPeer(deadID, deadName)
	if err == nil || !strings.Contains(err.Error(), "may be the one cut off") {
		t.Fatalf("no other voter answering: %v; want a refusal", err)
	}
}

// TestMembership_FailedAndReapedImpostorRemovesNothing: a member that
// claims a follower's node ID and RPC address fails, then is reaped at
// once (a second member forces it out with a pruning leave); neither
// autopilot's dead-server cleanup nor the reap removes the follower.
func TestMembership_FailedAndReapedImpostorRemovesNothing(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.Leader()
	victim := c.Followers()[0]
	imp := nopstest.FakeMember(t, leader, "impostor", impostorTags(victim))
	waitRefused(t, leader, map[string]string{"impostor": victim.Config().NodeName})
	if err := imp.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, leader, "impostor", serf.StatusFailed)
	pruner := nopstest.FakeMember(t, leader, "pruner", map[string]string{"role": "pruner"})
	if err := pruner.RemoveFailedNodePrune("impostor"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, leader, "impostor", serf.StatusNone)
	votersHold(t, c, leader)
}

// TestMembership_ForcedReapOfLiveServerRemovesNothing: anyone with the
// gossip key can have a live server's own member reaped (a pruning leave
// in its name); the server still answers at its RPC address, so it stays a
// voter.
func TestMembership_ForcedReapOfLiveServerRemovesNothing(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.Leader()
	victim := c.Followers()[0]
	waitBound(t, c, leader)
	pruner := nopstest.FakeMember(t, leader, "pruner", map[string]string{"role": "pruner"})
	if err := pruner.RemoveFailedNodePrune(victim.Config().NodeName); err != nil {
		t.Fatal(err)
	}
	votersHold(t, c, leader)
}
