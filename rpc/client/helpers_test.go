package client_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// devMode makes a test server a dev server, as `nops serve -dev` runs.
func devMode(cfg *config.Config) { cfg.Dev = true }

// startServer starts a real single-server dev cluster on free ports, whose
// leader runs no loops, with opts, and waits for its leader.
func startServer(t *testing.T, opts ...nopstest.Option) *nopstest.Server {
	t.Helper()
	return nopstest.Start(t, "", append([]nopstest.Option{nopstest.WithoutReconcilers(), nopstest.WithConfig(devMode)}, opts...)...)
}

// startWithRoutes is startServer with extra API routes.
func startWithRoutes(t *testing.T, routes func(agent.RouteAdder)) *nopstest.Server {
	t.Helper()
	return startServer(t, nopstest.WithRoutes(routes))
}

// newClient returns a client of s with a fixed actor.
func newClient(t *testing.T, s *nopstest.Server, actor string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Address: "http://" + s.HTTPAddr(), Actor: actor})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return c
}

// createPending creates a deployment of a job of the default namespace
// through Raft and moves it to pending_approval.
func createPending(t *testing.T, s *nopstest.Server, jobID string) *structs.Deployment {
	t.Helper()
	return s.CreatePending("default", jobID)
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

func (e *extraRoutes) routes(add agent.RouteAdder) {
	jobs := []*structs.JobStatus{
		{Namespace: "default", JobID: "web", Sync: structs.SyncInSync, Policy: structs.PolicyAuto, ObservedAt: observedAt},
		{Namespace: "default", JobID: "api", Sync: structs.SyncDrift, DriftSummary: "count 2 -> 3", ObservedAt: observedAt},
	}
	ok := map[string]string{"ok": "true"}
	for pattern, answer := range map[string]any{
		"GET /v1/jobs":                     jobs,
		"POST /v1/job/{ns}/{id}/retry":     ok,
		"POST /v1/repo/{name}/refresh":     ok,
		"POST /v1/deployment/{id}/promote": ok,
		"GET /v1/repos": []*structs.RepoStatus{{Name: "ops", URL: "https://git.example/ops.git", Branch: "main", Path: "jobs",
			Head: strings.Repeat("c", 40), Files: 4, LastFetch: observedAt}},
		"GET /v1/orphans":      []*structs.JobStatus{{Namespace: "default", JobID: "old", Orphan: true, ObservedAt: observedAt}},
		"GET /v1/status/cycle": &structs.DetectionCycle{Leader: "n1", StartedAt: observedAt, FinishedAt: observedAt.Add(time.Second), Jobs: 2, Drifted: 1},
	} {
		add(pattern, strings.HasPrefix(pattern, "POST "), func(_ http.ResponseWriter, r *http.Request) (any, error) {
			e.record(r)
			return answer, nil
		})
	}
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
}
