package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// syncBuffer is a buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shutdownWait bounds the wait for a test server's shutdown.
const shutdownWait = 3 * time.Second

// startServer starts a real single-server dev cluster on free ports and
// waits for its leader. Its log is printed when the test fails.
func startServer(t *testing.T, opts agent.Options) *agent.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Dev = true
	cfg.DataDir = t.TempDir()
	cfg.HTTPPort, cfg.RPCPort, cfg.SerfPort = 0, 0, 0
	cfg.Bind, cfg.Advertise = "127.0.0.1", "127.0.0.1"
	cfg.BootstrapExpect = 1
	cfg.NodeName = "client-test-" + uuid.NewString()[:8]
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "nops", Level: hclog.Debug, Output: logs})
	s, err := agent.New(cfg, logger, opts)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Shutdown()
		}()
		select {
		case <-done:
		case <-time.After(shutdownWait):
			t.Logf("server %s did not shut down within %s", cfg.NodeName, shutdownWait)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.WaitForLeader(ctx, 10*time.Second); err != nil {
		t.Fatalf("wait for leader: %v", err)
	}
	return s
}

// newClient returns a client of s with a fixed actor.
func newClient(t *testing.T, s *agent.Server, actor string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Address: "http://" + s.HTTPAddr(), Actor: actor})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return c
}

// createPending creates a deployment through Raft and moves it to
// pending_approval.
func createPending(t *testing.T, s *agent.Server, jobID string) *structs.Deployment {
	t.Helper()
	d := &structs.Deployment{
		ID: uuid.NewString(), Namespace: "default", JobID: jobID, Repository: "ops", Commit: strings.Repeat("ab", 20),
		File: "jobs/" + jobID + ".nomad.hcl", Policy: structs.PolicyApproval, State: structs.StateDetected,
		SpecHash: "spec-" + jobID, Diff: fmt.Sprintf("+/- Job: %q\n+/- Task Group: \"app\"\n", jobID),
	}
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "nops"}
	if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta, Deployment: d}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	if _, err := s.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: meta, ID: d.ID, From: structs.StateDetected, To: structs.StatePendingApproval, Message: "waits for approval",
	}); err != nil {
		t.Fatalf("move deployment to pending_approval: %v", err)
	}
	return d
}

// extraRoutes serves, through the server's route hook, the routes that the
// reconcilers add to a full server, answering fixed values and recording
// the calls.
type extraRoutes struct {
	mu    sync.Mutex
	calls []string
}

func (e *extraRoutes) record(r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, r.Method+" "+r.URL.Path)
}

func (e *extraRoutes) called() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

var observedAt = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func (e *extraRoutes) options() agent.Options {
	jobs := []*structs.JobStatus{
		{Namespace: "default", JobID: "web", Sync: structs.SyncInSync, Policy: structs.PolicyAuto, ObservedAt: observedAt},
		{Namespace: "default", JobID: "api", Sync: structs.SyncDrift, DriftSummary: "count 2 -> 3", ObservedAt: observedAt},
	}
	return agent.Options{Routes: func(add agent.RouteAdder) {
		add("GET /v1/jobs", false, func(_ http.ResponseWriter, r *http.Request) (any, error) {
			e.record(r)
			return jobs, nil
		})
		add("GET /v1/job/{ns}/{id}", false, func(_ http.ResponseWriter, r *http.Request) (any, error) {
			e.record(r)
			if r.PathValue("id") != "web" {
				return nil, fmt.Errorf("%w: job %s/%s", structs.ErrNotFound, r.PathValue("ns"), r.PathValue("id"))
			}
			return map[string]any{
				"status":            jobs[0],
				"active_deployment": nil,
				"last_deployment":   &structs.Deployment{ID: "d-last", Namespace: "default", JobID: "web", State: structs.StateCompleted},
				"block":             nil,
				"pause":             &structs.Pause{Key: "default/web", Namespace: "default", JobID: "web", Actor: "ann@ops", Reason: "db upgrade"},
			}, nil
		})
		for _, p := range []string{"POST /v1/job/{ns}/{id}/retry", "POST /v1/repo/{name}/refresh", "POST /v1/deployment/{id}/promote"} {
			add(p, true, func(_ http.ResponseWriter, r *http.Request) (any, error) {
				e.record(r)
				return map[string]string{"ok": "true"}, nil
			})
		}
		add("GET /v1/repos", false, func(_ http.ResponseWriter, r *http.Request) (any, error) {
			e.record(r)
			return []*structs.RepoStatus{{Name: "ops", URL: "https://git.example/ops.git", Branch: "main", Path: "jobs", Head: strings.Repeat("c", 40), Files: 4, LastFetch: observedAt}}, nil
		})
		add("GET /v1/orphans", false, func(_ http.ResponseWriter, r *http.Request) (any, error) {
			e.record(r)
			return []*structs.JobStatus{{Namespace: "default", JobID: "old", Orphan: true, ObservedAt: observedAt}}, nil
		})
		add("GET /v1/status/cycle", false, func(_ http.ResponseWriter, r *http.Request) (any, error) {
			e.record(r)
			return &structs.DetectionCycle{Leader: "n1", StartedAt: observedAt, FinishedAt: observedAt.Add(time.Second), Jobs: 2, Drifted: 1}, nil
		})
	}}
}
