package failover_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/faultnet"
	"github.com/nops-dev/nops/testutil/nopstest"
)

const (
	// convergeTimeout bounds the wait for every server to hold the same
	// state after a heal.
	convergeTimeout = 60 * time.Second
	// minorityLeaderTimeout bounds the wait for the majority side of a
	// partition to elect a leader of its own.
	minorityLeaderTimeout = 45 * time.Second
)

// partitionFixture is a fixture whose servers talk to each other through a
// faultnet.Network and to Nomad each through a recording proxy.
type partitionFixture struct {
	*fixture
	net   *faultnet.Network
	nomad *nomadRecorder
}

// newPartitionFixture commits files and starts Nomad and a 3-server
// cluster whose server-to-server traffic goes through a fault network.
func newPartitionFixture(t *testing.T, files map[string]string, extraArgs ...string) *partitionFixture {
	t.Helper()
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "jobs", files)
	logPath := filepath.Join(t.TempDir(), "faultnet.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = logFile.Close()
		if t.Failed() {
			t.Logf("fault network log (%s):\n%s", logPath, testutil.TailFile(logPath, 40))
		}
	})
	logger := hclog.New(&hclog.LoggerOptions{Name: "faultnet", Level: hclog.Warn, Output: logFile})
	fn := faultnet.New(logger)
	t.Cleanup(fn.Close)
	rec := newNomadRecorder(t, nomad.Addr)
	setup := func(p *nopstest.Process, args []string) ([]string, error) {
		ip := faultnet.AdvertiseIP(p.Index)
		if err := fn.AddNode(faultnet.Node{Index: p.Index, IP: ip, RPCPort: p.RPCPort, SerfPort: p.SerfPort, PID: p.PID}); err != nil {
			return nil, err
		}
		p.RPCAddr = net.JoinHostPort(ip, strconv.Itoa(p.RPCPort))
		args = setFlag(args, "-advertise", ip)
		args = setFlag(args, "-nomad-addr", rec.proxy(p.Index))
		return setFlag(args, "-retry-join", proxiedJoin(p.Index, args)), nil
	}
	cluster := nopstest.StartProcessClusterWith(t, 3, nomad.Addr, repo.URL()+"#main:jobs", setup, extraArgs...)
	if n := fn.Unattributed(); n != 0 {
		t.Errorf("the fault network could not attribute %d connections or packets to a server", n)
	}
	return &partitionFixture{fixture: &fixture{nomad: nomad, repo: repo, cluster: cluster}, net: fn, nomad: rec}
}

// proxiedJoin turns the -retry-join addresses of server self's arguments
// (127.0.0.1:<serf port> of every other server, in index order) into the
// addresses those servers advertise.
func proxiedJoin(self int, args []string) string {
	var out []string
	j := 0
	for _, addr := range strings.Split(flagValue(args, "-retry-join"), ",") {
		if j == self {
			j++
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		out = append(out, net.JoinHostPort(faultnet.AdvertiseIP(j), port))
		j++
	}
	return strings.Join(out, ",")
}

// setFlag sets the value of a flag in args, appending it when absent.
func setFlag(args []string, name, value string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == name {
			out[i+1] = value
			return out
		}
	}
	return append(out, name, value)
}

func flagValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// nomadWrite is one call that changes Nomad, made by one Nops server.
type nomadWrite struct {
	Server       int
	Method, Path string
	// JobID is the job a register names in its body.
	JobID      string
	Status     int
	Start, End time.Time
}

// isRegister reports whether the write registers job id.
func (w nomadWrite) isRegister(id string) bool { return w.JobID == id }

// registeredJob returns the ID of the job a register request names
// (PUT or POST /v1/jobs or /v1/job/<id>), or "", and leaves the body
// readable.
func registeredJob(req *http.Request) string {
	if req.Method == http.MethodDelete || (req.URL.Path != "/v1/jobs" && strings.Count(req.URL.Path, "/") != 3) ||
		!strings.HasPrefix(req.URL.Path, "/v1/job") {
		return ""
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return ""
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var reg struct{ Job struct{ ID string } }
	if json.Unmarshal(body, &reg) != nil {
		return ""
	}
	return reg.Job.ID
}

// nomadRecorder runs one reverse proxy to Nomad per Nops server and
// records every call that changes Nomad, so each write is attributed to
// the server that made it and its time.
type nomadRecorder struct {
	t      testing.TB
	target *url.URL

	mu     sync.Mutex
	writes []nomadWrite
}

func newNomadRecorder(t testing.TB, addr string) *nomadRecorder {
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatalf("Nomad address %q: %v", addr, err)
	}
	return &nomadRecorder{t: t, target: u}
}

// proxy starts the proxy of server i and returns its address.
func (r *nomadRecorder) proxy(server int) string {
	rp := httputil.NewSingleHostReverseProxy(r.target)
	rp.FlushInterval = -1 // event streams and long polls pass at once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !changesNomad(req) {
			rp.ServeHTTP(w, req)
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		job := registeredJob(req)
		rp.ServeHTTP(sw, req)
		r.mu.Lock()
		r.writes = append(r.writes, nomadWrite{Server: server, Method: req.Method, Path: req.URL.Path, JobID: job, Status: sw.status, Start: start, End: time.Now()})
		r.mu.Unlock()
	}))
	r.t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// Writes returns the recorded writes, in the order they ended.
func (r *nomadRecorder) Writes() []nomadWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}

// changesNomad reports whether a call can change Nomad: every call but
// GET, HEAD and the read-only POSTs (plan, parse, search).
func changesNomad(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	p := req.URL.Path
	return !strings.HasSuffix(p, "/plan") && p != "/v1/jobs/parse" && !strings.HasPrefix(p, "/v1/search")
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// leaderAmong waits until the servers of set agree on a leader among them
// whose leader loops run, and returns it and when it was first seen.
func (f *partitionFixture) leaderAmong(t *testing.T, set []int) (int, time.Time) {
	t.Helper()
	leader := -1
	testutil.WaitForResult(t, minorityLeaderTimeout, func() (bool, error) {
		var err error
		leader, err = f.agreedLeader(set)
		return err == nil, err
	})
	return leader, time.Now()
}

func (f *partitionFixture) agreedLeader(set []int) (int, error) {
	leader, addr := -1, ""
	selves := map[int]*structs.AgentSelf{}
	for _, i := range set {
		self, err := f.cluster.Server(i).Self()
		if err != nil {
			return -1, err
		}
		selves[i] = self
		if self.IsLeader && self.LoopsOn {
			if leader >= 0 {
				return -1, fmt.Errorf("both %d and %d lead", leader, i)
			}
			leader, addr = i, self.RPCAddr
		}
	}
	if leader < 0 {
		return -1, fmt.Errorf("no server of %v leads", set)
	}
	for i, self := range selves {
		if self.Leader != addr {
			return -1, fmt.Errorf("%s sees leader %q, not %s", f.cluster.Server(i).Name, self.Leader, addr)
		}
	}
	return leader, nil
}

// others returns every server index but i.
func (f *partitionFixture) others(i int) []int {
	var out []int
	for j := range f.cluster.Len() {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// waitStepDown waits until server i no longer leads and returns when it
// was first seen so.
func (f *partitionFixture) waitStepDown(t *testing.T, i int) time.Time {
	t.Helper()
	testutil.WaitForResult(t, minorityLeaderTimeout, func() (bool, error) {
		self, err := f.cluster.Server(i).Self()
		if err != nil {
			return false, err
		}
		if self.IsLeader || self.LoopsOn {
			return false, fmt.Errorf("%s still leads (is_leader=%t, loops=%t)", f.cluster.Server(i).Name, self.IsLeader, self.LoopsOn)
		}
		return true, nil
	})
	return time.Now()
}

// stateDigest is what a server's local state shows of the objects the
// tests change: pauses, windows and deployments.
type stateDigest struct {
	AppliedIndex string
	Pauses       json.RawMessage
	Windows      json.RawMessage
	Deployments  json.RawMessage
}

func digestOf(p *nopstest.Process) (*stateDigest, error) {
	self, err := p.Self()
	if err != nil {
		return nil, err
	}
	d := &stateDigest{AppliedIndex: self.Stats["applied_index"]}
	for path, out := range map[string]*json.RawMessage{"/v1/pauses": &d.Pauses, "/v1/windows": &d.Windows, "/v1/deployments": &d.Deployments} {
		if _, _, err := p.Call(http.MethodGet, path, nil, out); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// errDiverged is returned while servers hold different states.
var errDiverged = errors.New("servers diverge")

// converged checks once that every running server agrees on a leader, is
// a Raft voter again (a server cut off for long may have been removed or
// demoted, and rejoins as a non-voter until autopilot promotes it: until
// then the cluster does not tolerate the next fault) and holds the same
// applied index and the same state.
func (f *partitionFixture) converged() error {
	running := f.cluster.Running()
	leader, err := f.agreedLeader(running)
	if err != nil {
		return err
	}
	var conf structs.RaftConfiguration
	if _, _, err := f.cluster.Server(leader).Call(http.MethodGet, "/v1/operator/raft/configuration", nil, &conf); err != nil {
		return err
	}
	voters := 0
	for _, srv := range conf.Servers {
		if srv.Voter {
			voters++
		}
	}
	if voters != len(running) {
		return fmt.Errorf("%d Raft voters, want %d: %+v", voters, len(running), conf.Servers)
	}
	var first *stateDigest
	for _, i := range running {
		d, err := digestOf(f.cluster.Server(i))
		if err != nil {
			return err
		}
		if first == nil {
			first = d
			continue
		}
		if d.AppliedIndex != first.AppliedIndex {
			return fmt.Errorf("%w: applied index %s on %s, %s on the first", errDiverged, d.AppliedIndex, f.cluster.Server(i).Name, first.AppliedIndex)
		}
		if string(d.Pauses) != string(first.Pauses) || string(d.Windows) != string(first.Windows) || string(d.Deployments) != string(first.Deployments) {
			return fmt.Errorf("%w: %s holds another state at applied index %s", errDiverged, f.cluster.Server(i).Name, d.AppliedIndex)
		}
	}
	return nil
}

// waitConverged waits until the running servers converge and returns how
// long it took.
func (f *partitionFixture) waitConverged(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	testutil.WaitForResult(t, convergeTimeout, func() (bool, error) {
		err := f.converged()
		return err == nil, err
	})
	return time.Since(start)
}

// checkNoWriteAfter checks that server made no Nomad write that started
// after deadline.
func (f *partitionFixture) checkNoWriteAfter(t *testing.T, server int, deadline time.Time) {
	t.Helper()
	for _, w := range f.nomad.Writes() {
		if w.Server == server && w.Start.After(deadline) {
			t.Errorf("%s wrote to Nomad %s after it lost its lease: %s %s (%d) at %s",
				f.cluster.Server(server).Name, w.Start.Sub(deadline).Round(time.Millisecond), w.Method, w.Path, w.Status, w.Start.Format(time.RFC3339Nano))
		}
	}
}

// registers returns the successful registers of job id, by server.
func (f *partitionFixture) registers(id string) []nomadWrite {
	var out []nomadWrite
	for _, w := range f.nomad.Writes() {
		if w.isRegister(id) && w.Status < 300 {
			out = append(out, w)
		}
	}
	return out
}
