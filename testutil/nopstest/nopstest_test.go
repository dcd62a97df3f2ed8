package nopstest_test

import (
	"net/http"
	"testing"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// extraRoute answers GET /v1/test/extra with {"from": from}.
func extraRoute(from string) func(agent.RouteAdder) {
	return func(add agent.RouteAdder) {
		add("GET /v1/test/extra", false, func(http.ResponseWriter, *http.Request) (any, error) {
			return map[string]string{"from": from}, nil
		})
	}
}

func wantExtra(t *testing.T, s *nopstest.Server, from string) {
	t.Helper()
	var got map[string]string
	if code, body := s.Do("GET", "/v1/test/extra", nil, &got); code != http.StatusOK || got["from"] != from {
		t.Fatalf("GET /v1/test/extra: %d %s, want 200 from %q", code, body, from)
	}
}

// TestWithRoutes_WithoutReconcilers: the extra routes are the server's
// only reconciler-like routes.
func TestWithRoutes_WithoutReconcilers(t *testing.T) {
	t.Parallel()
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithRoutes(extraRoute("bare")))
	wantExtra(t, s, "bare")
	if code, body := s.Do("GET", "/v1/repos", nil, nil); code != http.StatusNotFound {
		t.Fatalf("GET /v1/repos without reconcilers: %d %s, want 404", code, body)
	}
}

// TestWithRoutes_WithReconcilers: the extra routes come in addition to the
// reconcilers' routes, not instead of them.
func TestWithRoutes_WithReconcilers(t *testing.T) {
	t.Parallel()
	nomad := testutil.StartNomad(t)
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRoutes(extraRoute("full")))
	wantExtra(t, s, "full")
	var repos []*structs.RepoStatus
	if code, body := s.Do("GET", "/v1/repos", nil, &repos); code != http.StatusOK {
		t.Fatalf("GET /v1/repos with reconcilers: %d %s, want 200", code, body)
	}
}

// TestCreatePending: the deployment is stored, replicated through Raft and
// served by the API in pending_approval, with its two events.
func TestCreatePending(t *testing.T) {
	t.Parallel()
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	d := s.CreatePending("prod", "web")
	if d.State != structs.StatePendingApproval || d.Namespace != "prod" || d.JobID != "web" || d.Policy != structs.PolicyApproval {
		t.Fatalf("CreatePending returned %+v", d)
	}
	var got structs.Deployment
	if code, body := s.Do("GET", "/v1/deployment/"+d.ID, nil, &got); code != http.StatusOK || got.State != structs.StatePendingApproval {
		t.Fatalf("GET /v1/deployment/%s: %d %s", d.ID, code, body)
	}
	if list := s.Deployments("prod", "web"); len(list) != 1 || list[0].ID != d.ID {
		t.Fatalf("deployments of prod/web: %+v", list)
	}
	var events []*structs.Event
	s.Do("GET", "/v1/deployment/"+d.ID+"/events", nil, &events)
	if len(events) != 2 || events[1].From != string(structs.StateDetected) || events[1].To != string(structs.StatePendingApproval) {
		t.Fatalf("events of %s: %+v", d.ID, events)
	}
}
