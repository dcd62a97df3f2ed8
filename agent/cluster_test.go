package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// answer is one HTTP answer of a server.
type answer struct {
	code    int
	body    []byte
	header  http.Header
	elapsed time.Duration
}

// startBareCluster starts a cluster of three servers without reconcilers
// and returns it and its leader.
func startBareCluster(t *testing.T) (*nopstest.Cluster, *nopstest.Server) {
	t.Helper()
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	return c, c.WaitForLeader(30 * time.Second)
}

// call sends one request to a server's HTTP API.
func call(t testing.TB, s *nopstest.Server, method, path string, body []byte) answer {
	t.Helper()
	a, err := tryCall(s, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryCall is call for a goroutine other than the test's: it returns what
// went wrong.
func tryCall(s *nopstest.Server, method, path string, body []byte) (answer, error) {
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("X-Nops-Actor", "tester")
	nopstest.SetContentType(req)
	client := *s.HTTPClient()
	client.Timeout = 60 * time.Second
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s%s: %w", method, s.URL, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s%s: read body: %w", method, s.URL, path, err)
	}
	return answer{code: resp.StatusCode, body: raw, header: resp.Header, elapsed: time.Since(start)}, nil
}

// ok fails the test unless the answer is a 200, and decodes it into out
// when out is not nil.
func (a answer) ok(t testing.TB, what string, out any) {
	t.Helper()
	if a.code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", what, a.code, a.body)
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			t.Fatalf("%s: decode %s: %v", what, a.body, err)
		}
	}
}

// errorMessage returns the "error" of a JSON error answer.
func (a answer) errorMessage() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error
}

// checkClusterHeaders fails unless the answer carries the index and leader
// headers every answer must carry.
func checkClusterHeaders(t testing.TB, what string, a answer, knownLeader bool) {
	t.Helper()
	for _, h := range []string{"X-Nops-Index", "X-Nops-Known-Leader", "X-Nops-Last-Contact"} {
		if n := len(a.header.Values(h)); n != 1 {
			t.Errorf("%s: %d values of %s, want 1", what, n, h)
		}
	}
	idx := a.header.Get("X-Nops-Index")
	if _, err := strconv.ParseUint(idx, 10, 64); err != nil {
		t.Errorf("%s: X-Nops-Index %q is not an index", what, idx)
	}
	if got := a.header.Get("X-Nops-Known-Leader"); got != strconv.FormatBool(knownLeader) {
		t.Errorf("%s: X-Nops-Known-Leader %q, want %v", what, got, knownLeader)
	}
	if ms, err := strconv.ParseInt(a.header.Get("X-Nops-Last-Contact"), 10, 64); err != nil || ms < 0 {
		t.Errorf("%s: X-Nops-Last-Contact %q is not a duration in ms", what, a.header.Get("X-Nops-Last-Contact"))
	}
}

// pendingDeployment writes a deployment waiting for approval through the
// leader's Raft, as detection would.
func pendingDeployment(t testing.TB, leader *nopstest.Server, id, job string) {
	t.Helper()
	now := time.Now().UTC()
	d := &structs.Deployment{ID: id, Namespace: "default", JobID: job, Repository: "ops", Commit: "0123456789abcdef",
		File: job + ".nomad.hcl", Policy: structs.PolicyApproval, State: structs.StateDetected, SpecHash: "spec-" + job,
		Spec: []byte(`{"ID":"` + job + `"}`), Diff: "+ job " + job, DiffHash: "diff-" + job}
	if _, err := leader.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "nops"}, Deployment: d}); err != nil {
		t.Fatalf("create deployment %s: %v", id, err)
	}
	if _, err := leader.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "nops"}, ID: id, To: structs.StatePendingApproval}); err != nil {
		t.Fatalf("deployment %s to pending_approval: %v", id, err)
	}
}

// deploymentID returns a deployment ID unique to n.
func deploymentID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// waitEverywhere waits until cond holds on the state of every running
// server of the cluster.
func waitEverywhere(t testing.TB, c *nopstest.Cluster, timeout time.Duration, cond func(st *fsm.StateStore) error) {
	t.Helper()
	testutil.WaitForResult(t, timeout, func() (bool, error) {
		for _, s := range c.Servers() {
			if err := cond(s.State()); err != nil {
				return false, fmt.Errorf("server %s: %w", s.Config().NodeName, err)
			}
		}
		return true, nil
	})
}

func rpcAddrs(c *nopstest.Cluster) []string {
	var out []string
	for _, s := range c.Servers() {
		out = append(out, s.RPCAddr())
	}
	sort.Strings(out)
	return out
}

// TestCluster_FormsFromBootstrapExpect forms clusters of 3 and 5 servers
// from -bootstrap-expect and -retry-join: every server lists every peer,
// and the operator's view shows exactly one leader, every server a voter.
func TestCluster_FormsFromBootstrapExpect(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d servers", n), func(t *testing.T) {
			c := nopstest.StartCluster(t, n, nopstest.WithoutReconcilers())
			leader := c.WaitForLeader(30 * time.Second)
			c.WaitForPeers(30*time.Second, c.NodeIDs()...)
			want := rpcAddrs(c)

			for _, s := range c.Servers() {
				var peers []string
				call(t, s, "GET", "/v1/status/peers", nil).ok(t, "peers", &peers)
				sort.Strings(peers)
				if !slices.Equal(peers, want) {
					t.Errorf("server %s lists peers %v, want %v", s.Config().NodeName, peers, want)
				}
				var addr string
				call(t, s, "GET", "/v1/status/leader", nil).ok(t, "leader", &addr)
				if addr != leader.RPCAddr() {
					t.Errorf("server %s names leader %q, want %q", s.Config().NodeName, addr, leader.RPCAddr())
				}

				var conf structs.RaftConfiguration
				call(t, s, "GET", "/v1/operator/raft/configuration", nil).ok(t, "raft configuration", &conf)
				if len(conf.Servers) != n {
					t.Fatalf("server %s: list-peers shows %d servers, want %d", s.Config().NodeName, len(conf.Servers), n)
				}
				leaders := 0
				for _, p := range conf.Servers {
					if p.Leader {
						leaders++
						if p.ID != leader.NodeID() {
							t.Errorf("list-peers on %s marks %s leader, want %s", s.Config().NodeName, p.ID, leader.NodeID())
						}
					}
					if !p.Voter || p.Node == "(unknown)" || p.RaftProtocol == "" {
						t.Errorf("list-peers on %s: %+v", s.Config().NodeName, p)
					}
				}
				if leaders != 1 {
					t.Errorf("list-peers on %s shows %d leaders", s.Config().NodeName, leaders)
				}
			}

			// One cluster: every server is in the same term.
			term := leader.Raft().Stats()["term"]
			for _, s := range c.Servers() {
				if got := s.Raft().Stats()["term"]; got != term {
					t.Errorf("server %s is in term %s, the leader in %s", s.Config().NodeName, got, term)
				}
			}
		})
	}
}

// TestCluster_BootstrapExpectWaitsAndStateWins starts two of three
// expected servers: they form nothing. The third forms exactly one cluster.
// A server restarted on its data dir, and then every server at once,
// rejoin that same cluster: existing Raft state wins over bootstrap.
func TestCluster_BootstrapExpectWaitsAndStateWins(t *testing.T) {
	c := nopstest.NewCluster(t, 3, nopstest.WithoutReconcilers())
	s0, s1 := c.Start(0), c.Start(1)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		for _, s := range []*nopstest.Server{s0, s1} {
			if n := len(s.Members()); n != 2 {
				return false, fmt.Errorf("server %s sees %d serf members, want 2", s.Config().NodeName, n)
			}
		}
		return true, nil
	})
	// Seeing each other is not enough: they must wait for the third.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, s := range []*nopstest.Server{s0, s1} {
			if addr, _ := s.Leader(); addr != "" {
				t.Fatalf("server %s knows a leader (%s) with 2 of 3 expected servers", s.Config().NodeName, addr)
			}
			if idx := s.Raft().LastIndex(); idx != 0 {
				t.Fatalf("server %s has raft state (index %d) with 2 of 3 expected servers", s.Config().NodeName, idx)
			}
		}
	}
	if code := call(t, s0, "GET", "/v1/health", nil).code; code != http.StatusServiceUnavailable {
		t.Fatalf("health without a cluster: %d, want 503", code)
	}

	c.Start(2)
	leader := c.WaitForLeader(30 * time.Second)
	ids := c.NodeIDs()
	c.WaitForPeers(30*time.Second, ids...)
	call(t, leader, "PUT", "/v1/window/nights", []byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`)).ok(t, "window", nil)

	// Exactly one cluster: every server holds the configuration entry of
	// the same bootstrap.
	confIndex := func(s *nopstest.Server) uint64 {
		f := s.Raft().GetConfiguration()
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		return f.Index()
	}
	want := confIndex(leader)
	for _, s := range c.Servers() {
		if got := confIndex(s); got != want {
			t.Fatalf("server %s has configuration index %d, the leader %d", s.Config().NodeName, got, want)
		}
	}

	// Restart a follower on its data dir: same node ID, same peers, no
	// new configuration entry (a bootstrap would have written one).
	i := c.Index(c.Followers()[0])
	before, err := nopstest.RaftServers(c.Server(i))
	if err != nil {
		t.Fatal(err)
	}
	id := c.Server(i).NodeID()
	r := c.Restart(i)
	if r.NodeID() != id {
		t.Fatalf("restart changed the node ID: %s -> %s", id, r.NodeID())
	}
	c.WaitForLeader(30 * time.Second)
	waitEverywhere(t, c, 20*time.Second, func(st *fsm.StateStore) error {
		if w, _ := st.Window("nights"); w == nil {
			return fmt.Errorf("window nights missing")
		}
		return nil
	})
	after, err := nopstest.RaftServers(r)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("raft configuration changed across a restart:\nbefore %v\nafter  %v", before, after)
	}
	if got := confIndex(r); got != want {
		t.Fatalf("restarted server has configuration index %d, want %d", got, want)
	}

	// Restart every server at once: they find the same cluster again.
	for i := 0; i < c.Size(); i++ {
		c.Kill(i)
	}
	for i := 0; i < c.Size(); i++ {
		c.Start(i)
	}
	c.WaitForLeader(30 * time.Second)
	c.WaitForPeers(30*time.Second, ids...)
	for _, s := range c.Servers() {
		if got := confIndex(s); got != want {
			t.Fatalf("after a full restart server %s has configuration index %d, want %d", s.Config().NodeName, got, want)
		}
	}
	waitEverywhere(t, c, 20*time.Second, func(st *fsm.StateStore) error {
		if w, _ := st.Window("nights"); w == nil {
			return fmt.Errorf("window nights missing")
		}
		return nil
	})
}

// TestCluster_WriteThroughFollower sends writes to followers: each is
// applied by the leader, answered with the leader's answer, and replicated
// to every server.
func TestCluster_WriteThroughFollower(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	leader := c.Leader()
	followers := c.Followers()

	a := call(t, followers[0], "PUT", "/v1/window/nights",
		[]byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h","timezone":"Europe/Paris","jobs":["web*"]}`))
	var w structs.SyncWindow
	a.ok(t, "window through a follower", &w)
	if w.Name != "nights" || w.Timezone != "Europe/Paris" || w.ModifyIndex == 0 {
		t.Fatalf("window answer: %+v", w)
	}
	checkClusterHeaders(t, "forwarded write", a, true)
	if idx, _ := strconv.ParseUint(a.header.Get("X-Nops-Index"), 10, 64); idx < w.ModifyIndex {
		t.Fatalf("answer index %d is older than the write it answers (%d)", idx, w.ModifyIndex)
	}

	var pauses []structs.Pause
	call(t, followers[1], "POST", "/v1/pause", []byte(`{"reason":"freeze"}`)).ok(t, "pause through a follower", &pauses)
	if len(pauses) != 1 || !pauses[0].Global || pauses[0].Actor != "tester" || pauses[0].Reason != "freeze" {
		t.Fatalf("pause answer: %+v", pauses)
	}

	// A decision through a follower, answered with the deployment.
	pendingDeployment(t, leader, deploymentID(1), "web")
	var d structs.Deployment
	call(t, followers[0], "POST", "/v1/deployment/"+deploymentID(1)+"/reject", []byte(`{"reason":"not now"}`)).ok(t, "reject", &d)
	if d.State != structs.StateRejected || len(d.Decisions) != 1 || d.Decisions[0].Actor != "tester" {
		t.Fatalf("reject answer: %+v", d)
	}
	// The leader's business errors come back as they are.
	a = call(t, followers[1], "POST", "/v1/deployment/"+deploymentID(1)+"/approve", nil)
	if a.code != http.StatusConflict || !strings.Contains(a.errorMessage(), "not pending approval") {
		t.Fatalf("approve of a rejected deployment through a follower: %d %s", a.code, a.body)
	}
	a = call(t, followers[1], "PUT", "/v1/window/bad", []byte(`{"kind":"maybe","schedule":"0 1 * * *","duration":"1h"}`))
	if a.code != http.StatusBadRequest || !strings.Contains(a.errorMessage(), "kind") {
		t.Fatalf("bad window through a follower: %d %s", a.code, a.body)
	}

	waitEverywhere(t, c, 10*time.Second, func(st *fsm.StateStore) error {
		if w, _ := st.Window("nights"); w == nil || w.Timezone != "Europe/Paris" {
			return fmt.Errorf("window nights: %+v", w)
		}
		if p, _ := st.Paused("", "default", "any"); p == nil || p.Reason != "freeze" {
			return fmt.Errorf("global pause: %+v", p)
		}
		if d, _ := st.Deployment(deploymentID(1)); d == nil || d.State != structs.StateRejected {
			return fmt.Errorf("deployment: %+v", d)
		}
		if b, _ := st.Block("", "default", "web"); b == nil {
			return fmt.Errorf("no block after the reject")
		}
		if w, _ := st.Window("bad"); w != nil {
			return fmt.Errorf("a bad window was stored")
		}
		return nil
	})
}

// TestCluster_ConsistentReadsAndHeaders shows that ?consistent reads are
// answered by the leader, that every answer carries the cluster headers,
// and that without a leader a write is held for about 5s, then refused
// with 503.
func TestCluster_ConsistentReadsAndHeaders(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	leader := c.Leader()
	f := c.Followers()[0]

	var self structs.AgentSelf
	a := call(t, f, "GET", "/v1/agent/self", nil)
	a.ok(t, "stale self", &self)
	checkClusterHeaders(t, "stale read on a follower", a, true)
	if self.IsLeader || self.NodeID != f.NodeID() {
		t.Fatalf("a default read on a follower is not answered by the follower: %+v", self)
	}
	a = call(t, f, "GET", "/v1/agent/self?consistent", nil)
	a.ok(t, "consistent self", &self)
	checkClusterHeaders(t, "consistent read through a follower", a, true)
	if !self.IsLeader || self.NodeID != leader.NodeID() {
		t.Fatalf("a consistent read through a follower is not answered by the leader: %+v", self)
	}
	a = call(t, leader, "GET", "/v1/windows?consistent", nil)
	a.ok(t, "consistent read on the leader", nil)
	checkClusterHeaders(t, "consistent read on the leader", a, true)
	if lc := a.header.Get("X-Nops-Last-Contact"); lc != "0" {
		t.Errorf("the leader reports a last contact of %sms", lc)
	}
	a = call(t, f, "GET", "/v1/deployment/"+deploymentID(9), nil)
	if a.code != http.StatusNotFound {
		t.Fatalf("missing deployment: %d", a.code)
	}
	checkClusterHeaders(t, "404 on a follower", a, true)
	a = call(t, f, "GET", "/v1/no/such/thing", nil)
	if a.code != http.StatusNotFound {
		t.Fatalf("unknown endpoint: %d", a.code)
	}
	checkClusterHeaders(t, "unknown endpoint", a, true)
	a = call(t, f, "POST", "/v1/pause", []byte(`{"reason":`))
	if a.code != http.StatusBadRequest {
		t.Fatalf("malformed write through a follower: %d %s", a.code, a.body)
	}
	checkClusterHeaders(t, "malformed write through a follower", a, true)
	a = call(t, f, "POST", "/v1/pause", []byte(`{"reason":"x"}`))
	a.ok(t, "write through a follower", nil)
	checkClusterHeaders(t, "write through a follower", a, true)
	waitEverywhere(t, c, 10*time.Second, func(st *fsm.StateStore) error {
		if p, _ := st.Paused("", "default", "any"); p == nil {
			return fmt.Errorf("pause not replicated")
		}
		return nil
	})

	// Without a leader: stop two of three servers. The last one holds a
	// write for leaderWait, then refuses it.
	for _, s := range c.Servers() {
		if s != f {
			c.Kill(c.Index(s))
		}
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		addr, _ := f.Leader()
		return addr == "", fmt.Errorf("the survivor still knows leader %s", addr)
	})
	a = call(t, f, "POST", "/v1/resume", []byte(`{"reason":"y"}`))
	if a.code != http.StatusServiceUnavailable || a.errorMessage() != "no cluster leader" {
		t.Fatalf("write without a leader: %d %s", a.code, a.body)
	}
	if a.elapsed < 4500*time.Millisecond || a.elapsed > 10*time.Second {
		t.Fatalf("write without a leader answered after %s, want about 5s", a.elapsed)
	}
	checkClusterHeaders(t, "write without a leader", a, false)
	a = call(t, f, "GET", "/v1/pauses?consistent", nil)
	if a.code != http.StatusServiceUnavailable {
		t.Fatalf("consistent read without a leader: %d %s", a.code, a.body)
	}
	// A default read is still served from the local state.
	var pauses []structs.Pause
	a = call(t, f, "GET", "/v1/pauses", nil)
	a.ok(t, "stale read without a leader", &pauses)
	checkClusterHeaders(t, "stale read without a leader", a, false)
	if len(pauses) != 1 {
		t.Fatalf("the survivor lost the replicated pause: %+v", pauses)
	}
}

// TestCluster_Operator covers the operator endpoints on a live cluster:
// serf members, leadership transfer with and without a target, and the
// removal of a dead server (by hand: autopilot's cleanup is off).
func TestCluster_Operator(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.Autopilot.CleanupDeadServers = false
	}))
	leader := c.Leader()
	f := c.Followers()[0]

	var members []structs.Member
	call(t, f, "GET", "/v1/agent/members", nil).ok(t, "members", &members)
	if len(members) != 3 {
		t.Fatalf("members: %+v", members)
	}
	for _, m := range members {
		if m.Status != "alive" || m.Tags["role"] != "nops" || m.Tags["id"] == "" || m.Tags["rpc_addr"] == "" {
			t.Errorf("member %+v", m)
		}
	}

	// Transfer without a target, asked of a follower.
	var moved map[string]string
	call(t, f, "POST", "/v1/operator/raft/transfer-leadership", nil).ok(t, "transfer", &moved)
	next := c.WaitForLeader(20 * time.Second)
	if next.NodeID() == leader.NodeID() {
		t.Fatalf("leadership did not move from %s", leader.NodeID())
	}
	// Transfer to a named server.
	target := c.Followers()[0]
	call(t, next, "POST", "/v1/operator/raft/transfer-leadership?id="+target.NodeID(), nil).ok(t, "transfer to a server", &moved)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		l := c.Leader()
		return l != nil && l.NodeID() == target.NodeID(), fmt.Errorf("leader is %v, want %s", l, target.NodeID())
	})
	c.WaitForLeader(20 * time.Second)
	a := call(t, f, "POST", "/v1/operator/raft/transfer-leadership?id=no-such-server", nil)
	if a.code != http.StatusNotFound {
		t.Fatalf("transfer to an unknown server: %d %s", a.code, a.body)
	}
	a = call(t, f, "DELETE", "/v1/operator/raft/peer", nil)
	if a.code != http.StatusBadRequest || !strings.Contains(a.errorMessage(), "id") {
		t.Fatalf("remove-peer without id: %d %s", a.code, a.body)
	}
	a = call(t, f, "DELETE", "/v1/operator/raft/peer?id=no-such-server", nil)
	if a.code != http.StatusNotFound {
		t.Fatalf("remove-peer of an unknown server: %d %s", a.code, a.body)
	}

	// Remove a dead server once gossip has declared it failed.
	dead := c.Followers()[0]
	deadID := dead.NodeID()
	c.Kill(c.Index(dead))
	l := c.WaitForLeader(20 * time.Second)
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		var ms []structs.Member
		call(t, l, "GET", "/v1/agent/members", nil).ok(t, "members", &ms)
		for _, m := range ms {
			if m.Tags["id"] == deadID {
				return m.Status == "failed", fmt.Errorf("dead member is %s", m.Status)
			}
		}
		return false, fmt.Errorf("dead member not listed")
	})
	survivor := c.Followers()[0]
	var removed map[string]string
	call(t, survivor, "DELETE", "/v1/operator/raft/peer?id="+deadID, nil).ok(t, "remove-peer", &removed)
	if removed["removed"] != deadID {
		t.Fatalf("remove-peer answer: %v", removed)
	}
	c.WaitForPeers(20*time.Second, c.NodeIDs()...)
	// The two left commit on their own.
	call(t, survivor, "POST", "/v1/pause", []byte(`{"reason":"after removal"}`)).ok(t, "write after removal", nil)
}

// digest renders objects of a state store, one line each, for
// comparisons; a read that fails fails the test.
type digest struct {
	t testing.TB
	b strings.Builder
}

func (d *digest) add(name string, v any, err error) {
	d.t.Helper()
	if err != nil {
		d.t.Fatalf("read %s: %v", name, err)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		d.t.Fatal(err)
	}
	fmt.Fprintf(&d.b, "%s=%s\n", name, raw)
}

// addHolds adds the pauses, windows and lifts.
func (d *digest) addHolds(st *fsm.StateStore) {
	d.t.Helper()
	pauses, err := st.Pauses()
	d.add("pauses", pauses, err)
	windows, err := st.Windows()
	d.add("windows", windows, err)
	lifts, err := st.Lifts()
	d.add("lifts", lifts, err)
}

// stateDigest renders every object of a state store, for comparisons.
func stateDigest(t testing.TB, st *fsm.StateStore) string {
	t.Helper()
	d := &digest{t: t}
	deps, _, err := st.Deployments(fsm.DeploymentFilter{})
	d.add("deployments", deps, err)
	events, err := st.Events(fsm.EventFilter{})
	d.add("events", events, err)
	d.addHolds(st)
	blocks, err := st.Blocks()
	d.add("blocks", blocks, err)
	statuses, err := st.JobStatuses()
	d.add("job statuses", statuses, err)
	repos, err := st.RepoStatuses()
	d.add("repo statuses", repos, err)
	cycle, err := st.DetectionCycle()
	d.add("detection cycle", cycle, err)
	return d.b.String()
}

// TestCluster_SnapshotSaveRestore saves a snapshot of one cluster through a
// follower and restores it on a fresh cluster: every object of every kind
// comes back on every server. A bad archive changes nothing.
func TestCluster_SnapshotSaveRestore(t *testing.T) {
	src := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	leader := src.Leader()
	now := time.Now().UTC()
	meta := structs.WriteMeta{Time: now, Actor: "nops"}
	pendingDeployment(t, leader, deploymentID(1), "web")
	pendingDeployment(t, leader, deploymentID(2), "api")
	pendingDeployment(t, leader, deploymentID(3), "db")
	f := src.Followers()[0]
	call(t, f, "POST", "/v1/deployment/"+deploymentID(1)+"/approve", []byte(`{"comment":"go"}`)).ok(t, "approve", nil)
	call(t, f, "POST", "/v1/deployment/"+deploymentID(2)+"/reject", []byte(`{"reason":"no"}`)).ok(t, "reject", nil)
	call(t, f, "POST", "/v1/job/default/db/pause", []byte(`{"reason":"migrating"}`)).ok(t, "job pause", nil)
	call(t, f, "POST", "/v1/pause", []byte(`{"reason":"freeze"}`)).ok(t, "pause", nil)
	call(t, f, "PUT", "/v1/window/nights", []byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`)).ok(t, "window", nil)
	call(t, f, "POST", "/v1/job/default/web/deploy-now", nil).ok(t, "deploy now", nil)
	if _, err := leader.Apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: meta,
		Statuses: []*structs.JobStatus{{Namespace: "default", JobID: "web", Repository: "ops", File: "web.nomad.hcl",
			Policy: structs.PolicyApproval, Sync: structs.SyncDrift, DriftSummary: "count 1 -> 2", ObservedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Apply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: meta,
		Repos: []*structs.RepoStatus{{Name: "ops", URL: "https://git.example.com/ops.git", Branch: "main", Head: "0123456", Files: 3}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Apply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: meta,
		Cycle: &structs.DetectionCycle{Leader: leader.NodeID(), StartedAt: now, FinishedAt: now, Jobs: 3}}); err != nil {
		t.Fatal(err)
	}
	want := stateDigest(t, leader.State())
	counts, err := leader.State().Counts()
	if err != nil {
		t.Fatal(err)
	}
	for kind, n := range counts {
		if n == 0 {
			t.Fatalf("the source state has no %s: the test would not show it restored", kind)
		}
	}

	a := call(t, f, "GET", "/v1/operator/snapshot", nil)
	a.ok(t, "snapshot save", nil)
	archive := a.body
	if a.header.Get("Content-Type") != "application/x-nops-snapshot" || len(archive) == 0 {
		t.Fatalf("snapshot answer: %v, %d bytes", a.header, len(archive))
	}
	// A second save with nothing new in between works too.
	call(t, leader, "GET", "/v1/operator/snapshot", nil).ok(t, "second snapshot save", nil)

	dst := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	call(t, dst.Leader(), "PUT", "/v1/window/mornings", []byte(`{"kind":"allow","schedule":"0 6 * * *","duration":"2h"}`)).ok(t, "window", nil)
	dstFollower := dst.Followers()[0]
	before := stateDigest(t, dst.Leader().State())
	waitEverywhere(t, dst, 10*time.Second, func(st *fsm.StateStore) error {
		if got := stateDigest(t, st); got != before {
			return fmt.Errorf("not replicated yet")
		}
		return nil
	})

	corrupt := bytes.Clone(archive)
	corrupt[len(corrupt)/2] ^= 0xff
	for _, bad := range []struct {
		name string
		body []byte
	}{
		{"garbage", []byte("this is not a snapshot")},
		{"truncated", archive[:len(archive)/2]},
		{"corrupt", corrupt},
		{"empty", nil},
	} {
		a := call(t, dstFollower, "PUT", "/v1/operator/snapshot", bad.body)
		if a.code != http.StatusBadRequest || !strings.Contains(a.errorMessage(), "snapshot") {
			t.Fatalf("restore of a %s archive: %d %s", bad.name, a.code, a.body)
		}
	}
	waitEverywhere(t, dst, 5*time.Second, func(st *fsm.StateStore) error {
		if got := stateDigest(t, st); got != before {
			return fmt.Errorf("a bad archive changed the state:\n%s\nwant\n%s", got, before)
		}
		return nil
	})

	var restored map[string]any
	call(t, dstFollower, "PUT", "/v1/operator/snapshot", archive).ok(t, "restore", &restored)
	waitEverywhere(t, dst, 20*time.Second, func(st *fsm.StateStore) error {
		if got := stateDigest(t, st); got != want {
			return fmt.Errorf("restored state differs:\n%s\nwant\n%s", got, want)
		}
		return nil
	})
	// The restored cluster goes on taking writes, on top of the restored
	// state, and a restarted server comes back with it.
	call(t, dstFollower, "POST", "/v1/resume", []byte(`{"reason":"thaw"}`)).ok(t, "resume after restore", nil)
	i := dst.Index(dst.Followers()[0])
	dst.Restart(i)
	dst.WaitForLeader(30 * time.Second)
	waitEverywhere(t, dst, 20*time.Second, func(st *fsm.StateStore) error {
		d, err := st.Deployment(deploymentID(1))
		if err != nil || d == nil || d.State != structs.StatePreHook && d.State != structs.StateApplying {
			return fmt.Errorf("approved deployment after restore and restart: %+v %v", d, err)
		}
		if p, _ := st.Paused("", "default", "other"); p != nil {
			return fmt.Errorf("the resume after the restore is missing: %+v", p)
		}
		if p, _ := st.Paused("", "default", "db"); p == nil {
			return fmt.Errorf("the restored job pause is missing")
		}
		return nil
	})
}

// TestCluster_LeaderLeaves makes the leader leave gracefully: it hands
// leadership over first, the new leader takes it out of the Raft
// configuration, and the two left go on committing.
func TestCluster_LeaderLeaves(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	old := c.Leader()
	old.Leave()
	c.Kill(c.Index(old))
	leader := c.WaitForLeader(20 * time.Second)
	if leader.NodeID() == old.NodeID() {
		t.Fatal("the server that left still leads")
	}
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	call(t, c.Followers()[0], "POST", "/v1/pause", []byte(`{"reason":"after a leave"}`)).ok(t, "write after the leader left", nil)
}

// TestCluster_ShutdownLeavesNoGoroutines runs a cluster through forwarded
// writes, a held write, a long poll, a failover and a snapshot, then shuts
// every server down: Shutdown returns promptly every time, and no
// goroutine of the servers stays behind.
func TestCluster_ShutdownLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	f := c.Followers()[0]
	call(t, f, "POST", "/v1/pause", []byte(`{"reason":"x"}`)).ok(t, "forwarded write", nil)
	call(t, f, "GET", "/v1/windows?consistent", nil).ok(t, "consistent read", nil)
	call(t, f, "GET", "/v1/operator/snapshot", nil).ok(t, "snapshot", nil)
	// A long poll in flight on a follower while it shuts down.
	polled := make(chan error, 1)
	go func() {
		_, err := tryCall(f, "GET", "/v1/events?since=999999&wait=5m", nil)
		polled <- err
	}()
	c.Kill(c.Index(c.Leader()))
	c.WaitForLeader(20 * time.Second)
	call(t, f, "POST", "/v1/resume", []byte(`{"reason":"y"}`)).ok(t, "write after failover", nil)

	for i := 0; i < c.Size(); i++ {
		if c.Server(i) == nil {
			continue
		}
		start := time.Now()
		c.Kill(i)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("shutdown of server %d took %s", i, d)
		}
	}
	select {
	case <-polled:
	case <-time.After(5 * time.Second):
		t.Fatal("a long poll outlived its server's shutdown")
	}
	http.DefaultClient.CloseIdleConnections()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		n := runtime.NumGoroutine()
		if n <= before+2 {
			t.Logf("%d goroutines after the shutdown, %d before the cluster", n, before)
			return true, nil
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return false, fmt.Errorf("%d goroutines, %d before the cluster:\n%s", n, before, leftovers(buf, t.Name()))
	})
}

// leftovers returns the goroutine stacks that involve server code, leaving
// out the test's own (test is its name), for a readable failure.
func leftovers(stacks []byte, test string) string {
	var out []string
	for _, g := range strings.Split(string(stacks), "\n\n") {
		if strings.Contains(g, "testing.(*M)") || strings.Contains(g, test) ||
			strings.Contains(g, "testing.tRunner") && !strings.Contains(g, "nops") {
			continue
		}
		out = append(out, g)
	}
	return strings.Join(out, "\n\n")
}

// TestCluster_HeldWriteRefusedOnShutdown shuts a server down while it holds
// a write waiting for a leader: the write is refused with 503, never
// answered 200 as if it had been applied.
func TestCluster_HeldWriteRefusedOnShutdown(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	s := c.Followers()[0]
	for _, o := range c.Servers() {
		if o != s {
			c.Kill(c.Index(o))
		}
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		addr, _ := s.Leader()
		return addr == "", fmt.Errorf("the survivor still knows leader %s", addr)
	})
	type result struct {
		code int
		body []byte
		err  error
	}
	res := make(chan result, 1)
	written := make(chan struct{})
	go func() {
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(written) }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
			"POST", s.URL+"/v1/pause", strings.NewReader(`{"reason":"held"}`))
		if err != nil {
			res <- result{err: err}
			return
		}
		nopstest.SetContentType(req)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		res <- result{resp.StatusCode, body, err}
	}()
	// Once the server has the write, it holds it for want of a leader.
	<-written
	c.Kill(c.Index(s))
	r := <-res
	if r.err != nil {
		t.Fatalf("held write: %v", r.err)
	}
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "no cluster leader") {
		t.Fatalf("held write at shutdown answered %d %q, want 503", r.code, r.body)
	}
}
