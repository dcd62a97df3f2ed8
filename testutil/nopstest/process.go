package nopstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// Process clusters: real `nops serve` processes of the built binary, for
// tests that kill a server with SIGKILL and start it again.
const (
	// processStartTimeout bounds the start of one process, from exec to an
	// HTTP API that answers.
	processStartTimeout = 30 * time.Second

	// ProcessLeaderTimeout bounds ProcessCluster.Leader and WaitForCluster:
	// the election of a leader with the default Raft timings, on a machine
	// shared with other tests.
	ProcessLeaderTimeout = 45 * time.Second

	// processStartAttempts is how many times a cluster is started on new
	// ports when another process took one of the ports it was given.
	processStartAttempts = 3

	// processLogTail is how many lines of each server's log a failed test
	// shows.
	processLogTail = 80

	// processActor is the X-Nops-Actor of the requests of the helpers.
	processActor = "tester"
)

// ProcessCluster is a cluster of `nops serve` processes on 127.0.0.1. Each
// server keeps its ports, data directory and log file for the whole test,
// so a server that was killed restarts on the same address with its Raft
// state, as an operator's server would.
//
// Every process is stopped in t.Cleanup (SIGINT, then SIGKILL of its
// process group); on Linux the kernel also kills them if the test binary
// dies. When the test failed, the tail of each server's log is printed.
type ProcessCluster struct {
	// TLS is the PKI of the servers' RPC port, nil with -insecure-rpc.
	TLS *TLSFiles

	t       testing.TB
	bin     string
	servers []*Process
	client  *http.Client
	// tlsConfig is the config file of the servers' tls block.
	tlsConfig string
	setup     ProcessSetup
}

// ProcessSetup adjusts the command line of one server before its first
// start: it gets the server, with its ports and addresses, and the
// arguments the cluster made, and returns the arguments to run. It may set
// the server's RPCAddr when it changes the advertised address. It is
// called again with new ports when the cluster is started again on others.
type ProcessSetup func(p *Process, args []string) ([]string, error)

// Process is one `nops serve` process of a ProcessCluster.
type Process struct {
	// Index is the server's position in its cluster, from 0.
	Index int
	// Name is the server's -node name, nops-<Index+1>.
	Name string
	// DataDir is the server's -data-dir; it survives Kill and Restart.
	DataDir string
	// LogPath is the file that collects the server's stdout and stderr,
	// over every start.
	LogPath string

	HTTPPort int
	RPCPort  int
	SerfPort int

	// URL is the base URL of the HTTP API, "http://127.0.0.1:<port>".
	URL string
	// RPCAddr is the Raft address, as GET /v1/status/leader shows it.
	RPCAddr string

	cluster *ProcessCluster
	args    []string
	// bin, when set, replaces the cluster's binary (RestartWith).
	bin string

	mu     sync.Mutex
	proc   *testutil.Process // the current or last run; nil before the first
	starts int
}

// StartProcessCluster starts n servers of the Nops binary
// (testutil.NopsBinary) that form one cluster: `nops serve` with
// -bootstrap-expect n, -retry-join of every other server's serf address,
// -nomad-addr nomadAddr and -repo repo (a -repo value, url#branch:path),
// a -drift-interval of 10s, an -engine-interval of 500ms and mutual TLS on
// the RPC port (a config file of a fresh test PKI, TLS; not when extraArgs
// hold -insecure-rpc, which serves the RPC port in plain TCP). extraArgs are
// appended to every server's command line, so they can override those
// settings. It returns once every server agrees on a leader that lists n
// Raft peers.
func StartProcessCluster(t testing.TB, n int, nomadAddr, repo string, extraArgs ...string) *ProcessCluster {
	t.Helper()
	return StartProcessClusterWith(t, n, nomadAddr, repo, nil, extraArgs...)
}

// StartProcessClusterWith is StartProcessCluster with a setup that can
// change each server's command line (nil changes nothing), for tests that
// route servers' traffic through proxies.
func StartProcessClusterWith(t testing.TB, n int, nomadAddr, repo string, setup ProcessSetup, extraArgs ...string) *ProcessCluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("nopstest: a process cluster needs at least one server, got %d", n)
	}
	c := &ProcessCluster{
		t:      t,
		bin:    testutil.NopsBinary(t),
		client: &http.Client{Timeout: 10 * time.Second},
		setup:  setup,
	}
	if !slices.Contains(extraArgs, "-insecure-rpc") {
		c.TLS = NewTLS(t, "")
		c.tlsConfig = c.TLS.RPCConfigFile(t)
	}
	root := t.TempDir()
	t.Cleanup(c.cleanup)

	var err error
	for attempt := 1; attempt <= processStartAttempts; attempt++ {
		err = c.start(filepath.Join(root, fmt.Sprintf("attempt-%d", attempt)), n, nomadAddr, repo, extraArgs)
		if err == nil {
			break
		}
		c.stopAll()
		if !errors.Is(err, testutil.ErrPortInUse) {
			break
		}
		t.Logf("nopstest: %v; starting the cluster again on new ports", err)
	}
	if err != nil {
		t.Fatalf("nopstest: starting a %d-server process cluster: %v", n, err)
	}
	start := time.Now()
	c.WaitForCluster()
	t.Logf("nopstest: %d-server process cluster ready in %s (leader %s)", n, time.Since(start).Round(time.Millisecond), c.servers[c.Leader()].Name)
	return c
}

// start lays out n servers under dir on fresh ports and starts them all.
func (c *ProcessCluster) start(dir string, n int, nomadAddr, repo string, extraArgs []string) error {
	ports := testutil.FreePorts(c.t, 3*n)
	c.servers = make([]*Process, n)
	for i := range n {
		p := &Process{
			Index:    i,
			Name:     fmt.Sprintf("nops-%d", i+1),
			DataDir:  filepath.Join(dir, fmt.Sprintf("nops-%d", i+1), "data"),
			LogPath:  filepath.Join(dir, fmt.Sprintf("nops-%d", i+1), "nops.log"),
			HTTPPort: ports[3*i],
			RPCPort:  ports[3*i+1],
			SerfPort: ports[3*i+2],
			cluster:  c,
		}
		p.URL = fmt.Sprintf("http://127.0.0.1:%d", p.HTTPPort)
		p.RPCAddr = fmt.Sprintf("127.0.0.1:%d", p.RPCPort)
		c.servers[i] = p
	}
	for _, p := range c.servers {
		var join []string
		for _, o := range c.servers {
			if o != p {
				join = append(join, fmt.Sprintf("127.0.0.1:%d", o.SerfPort))
			}
		}
		p.args = []string{"serve",
			"-node", p.Name,
			"-data-dir", p.DataDir,
			"-bind", "127.0.0.1", "-advertise", "127.0.0.1",
			"-http-port", strconv.Itoa(p.HTTPPort),
			"-rpc-port", strconv.Itoa(p.RPCPort),
			"-serf-port", strconv.Itoa(p.SerfPort),
			"-bootstrap-expect", strconv.Itoa(n),
			"-nomad-addr", nomadAddr,
			"-repo", repo,
			"-drift-interval", "10s",
			"-engine-interval", "500ms",
			"-log-level", "debug",
			"-encrypt", GossipKey,
			"-raft-multiplier", strconv.Itoa(TestRaftMultiplier),
		}
		if c.tlsConfig != "" {
			p.args = append(p.args, "-config", c.tlsConfig)
		}
		if len(join) > 0 {
			p.args = append(p.args, "-retry-join", strings.Join(join, ","))
		}
		p.args = append(p.args, extraArgs...)
		if c.setup != nil {
			args, err := c.setup(p, p.args)
			if err != nil {
				return fmt.Errorf("setting up %s: %w", p.Name, err)
			}
			p.args = args
		}
		if err := os.MkdirAll(filepath.Dir(p.LogPath), 0o755); err != nil {
			return fmt.Errorf("creating the directory of %s: %w", p.Name, err)
		}
		if err := p.exec(); err != nil {
			return err
		}
	}
	for _, p := range c.servers {
		if err := p.waitHTTP(); err != nil {
			return err
		}
	}
	return nil
}

// Len returns the number of servers.
func (c *ProcessCluster) Len() int { return len(c.servers) }

// Server returns server i.
func (c *ProcessCluster) Server(i int) *Process {
	c.t.Helper()
	if i < 0 || i >= len(c.servers) {
		c.t.Fatalf("nopstest: no server %d in a cluster of %d", i, len(c.servers))
	}
	return c.servers[i]
}

// Running returns the indexes of the servers whose process runs.
func (c *ProcessCluster) Running() []int {
	var out []int
	for _, p := range c.servers {
		if p.Running() {
			out = append(out, p.Index)
		}
	}
	return out
}

// Kill sends SIGKILL to server i and waits until the process is gone. The
// server gets no chance to leave the cluster or flush anything.
func (c *ProcessCluster) Kill(i int) {
	c.t.Helper()
	p := c.Server(i)
	if !p.Running() {
		c.t.Fatalf("nopstest: kill %s: not running", p.Name)
	}
	p.kill()
}

// Stop stops server i gracefully (SIGINT), and kills it if it has not
// exited after a grace period.
func (c *ProcessCluster) Stop(i int) {
	c.t.Helper()
	c.Server(i).stop()
}

// Restart starts server i again, with the same command line, ports and
// data directory, and returns once its HTTP API answers. It does not wait
// for the server to rejoin; WaitForCluster does.
func (c *ProcessCluster) Restart(i int) {
	c.t.Helper()
	p := c.Server(i)
	if p.Running() {
		c.t.Fatalf("nopstest: restart %s: still running", p.Name)
	}
	// A restart keeps its ports (the other servers know them), so a port
	// taken meanwhile cannot be traded for a new one as at the start. It
	// is waited for instead, a while: what takes one so soon after a kill
	// is mostly brief (another test process trying the port as a free
	// one, a socket of the killed process the kernel has not closed).
	deadline := time.Now().Add(restartPortWait)
	for {
		err := p.exec()
		if err == nil {
			err = p.waitHTTP()
		}
		if err == nil {
			return
		}
		if !errors.Is(err, testutil.ErrPortInUse) || time.Now().After(deadline) {
			c.t.Fatalf("nopstest: restart %s: %v", p.Name, err)
		}
		c.t.Logf("nopstest: restart %s: %v; trying again", p.Name, err)
		time.Sleep(200 * time.Millisecond)
	}
}

// restartPortWait bounds how long Restart waits for a port of the server
// that another process holds.
const restartPortWait = 10 * time.Second

// RestartWith is Restart with another build of nops, as a rolling upgrade
// replaces one server's binary at a time. Later restarts of the server use
// bin too.
func (c *ProcessCluster) RestartWith(i int, bin string) {
	c.t.Helper()
	p := c.Server(i)
	p.mu.Lock()
	p.bin = bin
	p.mu.Unlock()
	c.Restart(i)
}

// LeaderIndex checks once whether the running servers agree on a leader:
// every running server reports the same leader address, that address is a
// running server, and that server says it leads with its leader loops
// running. It returns the leader's index, or an error that says what is
// missing.
func (c *ProcessCluster) LeaderIndex() (int, error) {
	running := c.Running()
	if len(running) == 0 {
		return -1, errors.New("no server is running")
	}
	var addr string
	for _, i := range running {
		p := c.servers[i]
		var got string
		if _, _, err := p.Call(http.MethodGet, "/v1/status/leader", nil, &got); err != nil {
			return -1, fmt.Errorf("%s: %w", p.Name, err)
		}
		if got == "" {
			return -1, fmt.Errorf("%s knows no leader", p.Name)
		}
		if addr != "" && got != addr {
			return -1, fmt.Errorf("servers disagree on the leader: %s and %s", addr, got)
		}
		addr = got
	}
	for _, i := range running {
		p := c.servers[i]
		if p.RPCAddr != addr {
			continue
		}
		self, err := p.Self()
		if err != nil {
			return -1, err
		}
		if !self.IsLeader || !self.LoopsOn {
			return -1, fmt.Errorf("%s is the leader for the others, but says is_leader=%t, leader loops running=%t", p.Name, self.IsLeader, self.LoopsOn)
		}
		return i, nil
	}
	return -1, fmt.Errorf("the leader %s is not a running server", addr)
}

// Leader waits until the running servers agree on a leader (see
// LeaderIndex) and returns its index.
func (c *ProcessCluster) Leader() int {
	c.t.Helper()
	leader := -1
	testutil.WaitForResult(c.t, ProcessLeaderTimeout, func() (bool, error) {
		var err error
		leader, err = c.LeaderIndex()
		return err == nil, err
	})
	return leader
}

// Followers returns the running servers other than the leader.
func (c *ProcessCluster) Followers() []int {
	c.t.Helper()
	leader := c.Leader()
	var out []int
	for _, i := range c.Running() {
		if i != leader {
			out = append(out, i)
		}
	}
	return out
}

// WaitForCluster waits until every server runs, every one agrees on the
// leader, every one lists every server as a Raft peer, and every peer is a
// voter. It returns the leader's index.
func (c *ProcessCluster) WaitForCluster() int {
	c.t.Helper()
	leader := -1
	testutil.WaitForResult(c.t, ProcessLeaderTimeout, func() (bool, error) {
		for _, p := range c.servers {
			if !p.Running() {
				return false, fmt.Errorf("%s is not running", p.Name)
			}
		}
		var err error
		if leader, err = c.LeaderIndex(); err != nil {
			return false, err
		}
		want := make([]string, 0, len(c.servers))
		for _, p := range c.servers {
			want = append(want, p.RPCAddr)
		}
		slices.Sort(want)
		for _, p := range c.servers {
			peers, err := p.Peers()
			if err != nil {
				return false, err
			}
			slices.Sort(peers)
			if !slices.Equal(peers, want) {
				return false, fmt.Errorf("%s lists Raft peers %v, want %v", p.Name, peers, want)
			}
		}
		// A server that rejoined is a non-voter until autopilot promotes
		// it: the cluster is whole once every server votes again.
		var conf structs.RaftConfiguration
		if _, _, err := c.servers[leader].Call(http.MethodGet, "/v1/operator/raft/configuration", nil, &conf); err != nil {
			return false, err
		}
		for _, srv := range conf.Servers {
			if !srv.Voter {
				return false, fmt.Errorf("%s (%s) is not a voter yet", srv.Node, srv.Address)
			}
		}
		return true, nil
	})
	return leader
}

// cleanup prints the log tails of a failed test, then stops every server.
func (c *ProcessCluster) cleanup() {
	if c.t.Failed() {
		for _, p := range c.servers {
			c.t.Logf("nopstest: %s log (%s), last %d lines:\n%s", p.Name, p.LogPath, processLogTail, testutil.TailFile(p.LogPath, processLogTail))
		}
	}
	c.stopAll()
}

// stopAll stops every server at once.
func (c *ProcessCluster) stopAll() {
	var wg sync.WaitGroup
	for _, p := range c.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	wg.Wait()
}

// exec starts the process, appending its output to its log file after a
// line that marks the start.
func (p *Process) exec() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts++
	bin := p.cluster.bin
	if p.bin != "" {
		bin = p.bin
	}
	header := fmt.Sprintf("==== nopstest: start %d of %s at %s: %s %s\n", p.starts, p.Name,
		time.Now().UTC().Format(time.RFC3339Nano), bin, strings.Join(p.args, " "))
	if err := appendFile(p.LogPath, header); err != nil {
		return fmt.Errorf("writing the log of %s: %w", p.Name, err)
	}
	proc, err := testutil.StartProcess(testutil.ProcessConfig{
		Name: p.Name, Bin: bin, Args: p.args, LogPath: p.LogPath, AppendLog: true,
	})
	if err != nil {
		return err
	}
	p.proc = proc
	return nil
}

// process returns the current or last run, or nil before the first.
func (p *Process) process() *testutil.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc
}

// waitHTTP waits until the HTTP API answers, or the process exits.
func (p *Process) waitHTTP() error {
	proc := p.process()
	deadline := time.Now().Add(processStartTimeout)
	for {
		select {
		case <-proc.Done():
			return p.exitError(proc)
		default:
		}
		if _, err := p.Self(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: HTTP API at %s did not answer within %s\nlast lines of %s:\n%s",
				p.Name, p.URL, processStartTimeout, p.LogPath, testutil.TailFile(p.LogPath, processLogTail))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exitError describes an early exit of a run: one that wraps
// testutil.ErrPortInUse when a port was taken, else one with the tail of
// the log.
func (p *Process) exitError(proc *testutil.Process) error {
	err := proc.ExitError()
	if errors.Is(err, testutil.ErrPortInUse) {
		return err
	}
	return fmt.Errorf("%w\nlast lines of %s:\n%s", err, p.LogPath, testutil.TailFile(p.LogPath, processLogTail))
}

// Running reports whether the process runs.
func (p *Process) Running() bool {
	proc := p.process()
	if proc == nil {
		return false
	}
	exited, _ := proc.Exited()
	return !exited
}

// PID returns the process ID of the running process, or 0.
func (p *Process) PID() int {
	if !p.Running() {
		return 0
	}
	return p.process().Pid()
}

func (p *Process) kill() {
	if proc := p.process(); proc != nil {
		proc.Kill()
	}
}

func (p *Process) stop() {
	if proc := p.process(); proc != nil {
		proc.Stop()
	}
}

// Call sends a request to the server's API and decodes a JSON answer with
// a 2xx status into out (when not nil). A body that is not a string or nil
// is sent as JSON. It returns the status and the raw answer; the error is
// set when the request could not be made or the answer not decoded, and
// for a status of 300 or more. It never fails the test, so it fits
// polling.
func (p *Process) Call(method, path string, body, out any) (int, []byte, error) {
	return p.CallAs(processActor, method, path, body, out)
}

// CallAs is Call with actor as the request's X-Nops-Actor: the identity a
// server without ACLs records, as two approvers of one deployment need.
func (p *Process) CallAs(actor, method, path string, body, out any) (int, []byte, error) {
	rd, err := requestBody(body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.URL+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s on %s: %w", method, path, p.Name, err)
	}
	req.Header.Set("X-Nops-Actor", actor)
	SetContentType(req)
	resp, err := p.cluster.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s on %s: %w", method, path, p.Name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s on %s: reading the answer: %w", method, path, p.Name, err)
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, raw, fmt.Errorf("%s %s on %s: status %d: %s", method, path, p.Name, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, raw, fmt.Errorf("%s %s on %s: decoding %s: %w", method, path, p.Name, raw, err)
		}
	}
	return resp.StatusCode, raw, nil
}

// Do is Call for requests that must succeed: it fails the test on any
// error or on a status other than want.
func (p *Process) Do(method, path string, body, out any, want int) []byte {
	t := p.cluster.t
	t.Helper()
	code, raw, err := p.Call(method, path, body, out)
	if code != want {
		t.Fatalf("nopstest: %s %s on %s: status %d, want %d: %v", method, path, p.Name, code, want, err)
	}
	if err != nil && code < 300 {
		t.Fatalf("nopstest: %v", err)
	}
	return raw
}

// Self returns the server as GET /v1/agent/self shows it.
func (p *Process) Self() (*structs.AgentSelf, error) {
	var out structs.AgentSelf
	if _, _, err := p.Call(http.MethodGet, "/v1/agent/self", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Peers returns the Raft peer addresses the server lists.
func (p *Process) Peers() ([]string, error) {
	var out []string
	if _, _, err := p.Call(http.MethodGet, "/v1/status/peers", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Cycle returns the last completed detection cycle the server knows, or
// nil when none has completed yet.
func (p *Process) Cycle() (*structs.DetectionCycle, error) {
	var out structs.DetectionCycle
	code, _, err := p.Call(http.MethodGet, "/v1/status/cycle", nil, &out)
	if code == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Deployments returns the deployments of a job from the server's local
// state, newest first.
func (p *Process) Deployments(namespace, jobID string) ([]*structs.Deployment, error) {
	var out []*structs.Deployment
	path := fmt.Sprintf("/v1/deployments?namespace=%s&job=%s", namespace, jobID)
	if _, _, err := p.Call(http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Deployment returns one deployment from the server's local state.
func (p *Process) Deployment(id string) (*structs.Deployment, error) {
	var out structs.Deployment
	if _, _, err := p.Call(http.MethodGet, "/v1/deployment/"+id, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeploymentEvents returns the events of one deployment, oldest first.
func (p *Process) DeploymentEvents(id string) ([]*structs.Event, error) {
	var out []*structs.Event
	if _, _, err := p.Call(http.MethodGet, "/v1/deployment/"+id+"/events", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// WaitForDeployment waits until the newest deployment of a job, read from
// this server, satisfies ok, and returns it.
func (p *Process) WaitForDeployment(namespace, jobID string, timeout time.Duration, ok func(*structs.Deployment) error) *structs.Deployment {
	t := p.cluster.t
	t.Helper()
	var found *structs.Deployment
	testutil.WaitForResult(t, timeout, func() (bool, error) {
		list, err := p.Deployments(namespace, jobID)
		if err != nil {
			return false, err
		}
		if len(list) == 0 {
			return false, fmt.Errorf("%s: job %s has no deployment", p.Name, structs.JobKey("", namespace, jobID))
		}
		found = list[0]
		if err := ok(found); err != nil {
			return false, fmt.Errorf("%s: deployment %s of %s (%s): %w", p.Name, found.ID, found.Key(), found.State, err)
		}
		return true, nil
	})
	return found
}

// InState is a WaitForDeployment condition: the deployment is in state.
func InState(state structs.DeploymentState) func(*structs.Deployment) error {
	return func(d *structs.Deployment) error {
		if d.State != state {
			if d.Error != "" {
				return fmt.Errorf("state %s (error: %s), want %s", d.State, d.Error, state)
			}
			return fmt.Errorf("state %s, want %s", d.State, state)
		}
		return nil
	}
}

// appendFile appends text to the file at path, creating it.
func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
