// Package nopstest starts real Nops servers in tests: one in-process server,
// or a cluster of them on 127.0.0.1 with real TCP transports, wired with the
// real reconcilers against a real Nomad agent and real git repositories (or,
// WithoutReconcilers, with none, optionally answering their routes from a
// FakeReconciler WithReconciler); and clusters of `nops serve` processes of the built binary
// (ProcessCluster) for tests that kill a server. Server.CreatePending and
// StateRank are the fixtures and checks that tests of several packages
// share.
//
// Guarantee: every server it starts is shut down when the test ends, and
// every wait polls with a deadline; none sleeps a fixed time to synchronise.
package nopstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/agent/gctune"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// Clock is a settable clock for tests that cross sync window boundaries.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Option changes a test server's configuration.
type Option func(*options)

type options struct {
	mutate []func(*config.Config)
	clock  func() time.Time
	noLoop bool
	rec    agent.Reconciler
	build  []func(*agent.Server)
	tls    *TLSFiles
}

// WithConfig changes the server configuration before the server starts.
func WithConfig(fn func(*config.Config)) Option {
	return func(o *options) { o.mutate = append(o.mutate, fn) }
}

// WithNomad points the server at a Nomad agent.
func WithNomad(addr string) Option {
	return WithConfig(func(c *config.Config) { c.NomadAddr = addr })
}

// repoPollInterval is how often a test server fetches its repositories, so
// a commit a test makes is seen at once.
const repoPollInterval = RepoPollInterval

// RepoPollInterval is how often a test server fetches its repositories.
const RepoPollInterval = 200 * time.Millisecond

// WithRepo adds a watched repository.
func WithRepo(name, url, branch, path string) Option {
	return WithConfig(func(c *config.Config) {
		c.Repositories = append(c.Repositories, config.Repository{Name: name, URL: url, Branch: branch, Path: path,
			PollInterval: repoPollInterval})
	})
}

// WithClock gives the reconcilers a clock.
func WithClock(c *Clock) Option { return func(o *options) { o.clock = c.Now } }

// WithClockFunc gives the reconcilers a clock function, for example the
// real time shifted by an offset a test moves forward.
func WithClockFunc(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// WithoutReconcilers starts a server whose leader runs no loops.
func WithoutReconcilers() Option { return func(o *options) { o.noLoop = true } }

// WithReconciler has rec answer the reconcilers' API routes of a server
// started WithoutReconcilers (a FakeReconciler, for the tests of the
// client and the CLI). With the reconcilers, the server's own manager
// answers them and the test fails.
func WithReconciler(rec agent.Reconciler) Option {
	return func(o *options) { o.rec = rec }
}

// WithBuild runs fn on the server once its state and Raft exist, before it
// serves its API and before it acts on its leadership (as
// agent.Options.Build does): for test hooks that must be in place before a
// single server leads.
func WithBuild(fn func(s *agent.Server)) Option {
	return func(o *options) { o.build = append(o.build, fn) }
}

// TestRaftMultiplier is the raft_multiplier of test servers: three times
// the production timings (about the Raft library's defaults), so that two
// cores busy with several clusters, Nomad and the Go toolchain at once do
// not depose leaders in the middle of a test. The failover benchmark runs
// the production default (1) on its own.
const TestRaftMultiplier = 3

const (
	// singleLeaderTimeout bounds the wait for a one-server cluster to
	// elect itself: a second or so, more on a loaded machine.
	singleLeaderTimeout = 20 * time.Second
	// clusterLeaderTimeout bounds StartCluster's wait for a leader: the
	// servers must first find each other through gossip.
	clusterLeaderTimeout = 30 * time.Second
	// requestTimeout bounds one API request of a test: far over a write's
	// wait for Raft, so only a hung server fails the test this way.
	requestTimeout = 60 * time.Second
)

// Config returns the configuration of a single dev-like server on free ports
// with fast loops.
func Config(t testing.TB, dataDir string) *config.Config {
	cfg := config.Default()
	cfg.RaftMultiplier = TestRaftMultiplier
	cfg.DataDir = dataDir
	cfg.Bind, cfg.Advertise = "127.0.0.1", "127.0.0.1"
	cfg.HTTPPort, cfg.RPCPort, cfg.SerfPort = 0, 0, 0
	cfg.BootstrapExpect = 1
	cfg.NodeName = strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	// Loops a few times a second, so tests see a change within a second or
	// two; applies and hooks get minutes, as mock jobs on a loaded machine
	// can take that long to turn healthy.
	cfg.DriftInterval = 2 * time.Second
	cfg.EngineInterval = 200 * time.Millisecond
	cfg.ApplyTimeout = 2 * time.Minute
	cfg.HookTimeout = time.Minute
	cfg.Encrypt = GossipKey
	// In-process servers of one test talk over 127.0.0.1 in plain TCP
	// unless WithTLS gives them mutual TLS.
	cfg.InsecureRPC = true
	return cfg
}

// Logger returns a logger for test servers: quiet unless -v.
func Logger(name string) hclog.Logger {
	// An InterceptLogger, as nops serve's, so that log monitors work.
	if testing.Verbose() {
		return hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: hclog.Debug})
	}
	return hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: io.Discard})
}

// Server is a running test server.
type Server struct {
	*agent.Server
	t testing.TB
	// URL is the base URL of the HTTP API (https:// with HTTP TLS).
	URL    string
	client *http.Client
}

// HTTPClient returns a client of the server's API: with HTTP TLS it trusts
// the test CA and presents the CLI certificate.
func (s *Server) HTTPClient() *http.Client { return s.client }

// Start starts a single server on a data dir (t.TempDir() when empty) and
// waits until it leads.
func Start(t testing.TB, dataDir string, opts ...Option) *Server {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	cfg := Config(t, dataDir)
	return StartWith(t, cfg, opts...)
}

// StartDev starts a single dev server (as `nops serve -dev` runs) on a
// temporary data dir, whose leader runs no loops, with opts, and waits
// until it leads: the server of the tests of the API client and the CLI,
// which have the reconcilers' routes answered WithReconciler.
func StartDev(t testing.TB, opts ...Option) *Server {
	t.Helper()
	dev := func(c *config.Config) { c.Dev = true }
	return Start(t, "", append([]Option{WithoutReconcilers(), WithConfig(dev)}, opts...)...)
}

// StartWith starts a server from a configuration and waits for a leader.
func StartWith(t testing.TB, cfg *config.Config, opts ...Option) *Server {
	t.Helper()
	o := &options{}
	for _, fn := range opts {
		fn(o)
	}
	for _, fn := range o.mutate {
		fn(cfg)
	}
	var aopts agent.Options
	if !o.noLoop {
		aopts = agent.ReconcileOptions(cfg, Logger(cfg.NodeName), o.clock)
	}
	if o.rec != nil {
		if !o.noLoop {
			t.Fatal("nopstest.WithReconciler needs nopstest.WithoutReconcilers")
		}
		aopts.Reconciler = o.rec
	}
	if len(o.build) > 0 {
		aopts = withBuild(aopts, o.build)
	}
	s, err := agent.New(cfg, Logger(cfg.NodeName), aopts)
	if err != nil {
		t.Fatalf("start nops server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	scheme := "http://"
	if cfg.TLS.HTTP {
		scheme = "https://"
	}
	ts := &Server{Server: s, t: t, URL: scheme + s.HTTPAddr(), client: httpClient(t, cfg, o.tls)}
	if cfg.BootstrapExpect == 1 {
		testutil.WaitForResult(t, singleLeaderTimeout, func() (bool, error) {
			return s.IsLeader(), fmt.Errorf("server is not the leader yet")
		})
	}
	return ts
}

// withBuild runs fns on the server before the build of the options, if
// any.
func withBuild(opts agent.Options, fns []func(*agent.Server)) agent.Options {
	build := opts.Build
	opts.Build = func(s *agent.Server) (agent.LeaderFunc, agent.Reconciler, error) {
		for _, fn := range fns {
			fn(s)
		}
		if build == nil {
			return nil, nil, nil
		}
		return build(s)
	}
	return opts
}

// Do sends a request to the API and decodes a JSON answer into out (when
// not nil). It returns the status code and the raw body.
func (s *Server) Do(method, path string, body any, out any) (int, string) {
	s.t.Helper()
	rd, err := requestBody(body)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("X-Nops-Actor", "tester")
	SetContentType(req)
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("decode %s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, string(raw)
}

// requestBody is the body of a request to the API: none for nil, a string
// as it is, anything else encoded as JSON.
func requestBody(body any) (io.Reader, error) {
	switch b := body.(type) {
	case nil:
		return nil, nil
	case string:
		return strings.NewReader(b), nil
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("encoding the body: %w", err)
		}
		return bytes.NewReader(raw), nil
	}
}

// Deployments returns the deployments of a job, newest first.
func (s *Server) Deployments(namespace, jobID string) []*structs.Deployment {
	s.t.Helper()
	var out []*structs.Deployment
	s.Do("GET", fmt.Sprintf("/v1/deployments?namespace=%s&job=%s", namespace, jobID), nil, &out)
	return out
}

// WaitForDeployment waits until the job's newest deployment is in state and
// returns it.
func (s *Server) WaitForDeployment(namespace, jobID string, state structs.DeploymentState, timeout time.Duration) *structs.Deployment {
	s.t.Helper()
	var found *structs.Deployment
	testutil.WaitForResult(s.t, timeout, func() (bool, error) {
		list := s.Deployments(namespace, jobID)
		if len(list) == 0 {
			return false, fmt.Errorf("job %s/%s has no deployment", namespace, jobID)
		}
		found = list[0]
		if found.State != state {
			return false, fmt.Errorf("newest deployment %s of %s/%s is %s (%s), want %s", found.ID, namespace, jobID, found.State, found.Error, state)
		}
		return true, nil
	})
	return found
}

// JobStatus returns the observed status of a job of the default cluster,
// or nil.
func (s *Server) JobStatus(namespace, jobID string) *structs.JobStatus {
	return s.ClusterJobStatus(structs.DefaultCluster, namespace, jobID)
}

// ClusterJobStatus returns the observed status of a job of a cluster, or
// nil.
func (s *Server) ClusterJobStatus(cluster, namespace, jobID string) *structs.JobStatus {
	s.t.Helper()
	st, err := s.State().JobStatus(cluster, namespace, jobID)
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// WaitForJobStatus waits until the job's observed status satisfies ok.
func (s *Server) WaitForJobStatus(namespace, jobID string, timeout time.Duration, ok func(*structs.JobStatus) bool) *structs.JobStatus {
	s.t.Helper()
	var st *structs.JobStatus
	testutil.WaitForResult(s.t, timeout, func() (bool, error) {
		st = s.JobStatus(namespace, jobID)
		if st == nil {
			return false, fmt.Errorf("job %s/%s has no status", namespace, jobID)
		}
		if !ok(st) {
			return false, fmt.Errorf("job %s/%s status: %+v", namespace, jobID, *st)
		}
		return true, nil
	})
	return st
}

// Events returns the events of one object.
func (s *Server) Events(object string) []*structs.Event {
	s.t.Helper()
	var out []*structs.Event
	s.Do("GET", "/v1/events?object="+object, nil, &out)
	return out
}

// Trigger runs a detection cycle and an apply pass as soon as possible.
func (s *Server) Trigger() {
	if m := s.Manager(); m != nil {
		m.Trigger()
	}
}

// CreatePending creates a deployment of a job through Raft (s.Apply), as
// detection would for a job with the approval policy, and moves it to
// pending_approval. It returns the deployment as this server's state store
// holds it then.
func (s *Server) CreatePending(namespace, jobID string) *structs.Deployment {
	s.t.Helper()
	return s.CreatePendingWith(namespace, jobID, nil)
}

// CreatePendingWith is CreatePending with change applied to the
// deployment before it is created (its approval rules, its commit).
func (s *Server) CreatePendingWith(namespace, jobID string, change func(*structs.Deployment)) *structs.Deployment {
	s.t.Helper()
	d := &structs.Deployment{
		ID: uuid.NewString(), Namespace: namespace, JobID: jobID, Repository: "ops", Commit: strings.Repeat("ab", 20),
		File: "jobs/" + jobID + ".nomad.hcl", Policy: structs.PolicyApproval, State: structs.StateDetected,
		SpecHash: "spec-" + jobID, Diff: fmt.Sprintf("+/- Job: %q\n+/- Task Group: \"app\" (1 create/destroy update)\n", jobID),
	}
	if change != nil {
		change(d)
	}
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "nops"}
	if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta, Deployment: d}); err != nil {
		s.t.Fatalf("nopstest: create deployment of %s: %v", structs.JobKey("", namespace, jobID), err)
	}
	if _, err := s.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: meta, ID: d.ID, From: structs.StateDetected, To: structs.StatePendingApproval, Message: "waits for approval",
	}); err != nil {
		s.t.Fatalf("nopstest: move deployment %s to pending_approval: %v", d.ID, err)
	}
	stored, err := s.State().Deployment(d.ID)
	if err != nil || stored == nil {
		s.t.Fatalf("nopstest: read deployment %s back: %v", d.ID, err)
	}
	return stored
}

// SetContentType sets the content type a server requires of a write: a
// snapshot archive's on a restore, JSON on every other (with or without a
// body).
func SetContentType(req *http.Request) {
	switch {
	case req.Method == http.MethodGet || req.Method == http.MethodHead:
	case req.URL.Path == "/v1/operator/snapshot":
		req.Header.Set("Content-Type", "application/x-nops-snapshot")
	default:
		req.Header.Set("Content-Type", "application/json")
	}
}

// AgentGC gives the test process the garbage collector policy that `nops
// serve` gives its own (gctune with the default gc_min_heap), until the
// test ends: for benchmarks whose figures stand for server processes'.
// The servers of a test process share one heap, whose live size is theirs
// added up, so the policy raises GOGC less for it than for each process of
// a real cluster.
func AgentGC(tb testing.TB) {
	gc := gctune.Start(config.DefaultGCMinHeap, hclog.NewNullLogger())
	tb.Cleanup(gc.Stop)
}
