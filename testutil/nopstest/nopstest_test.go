package nopstest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestWithReconciler_AnswersTheReconcilerRoutes: a server without the
// reconcilers serves none of their routes; WithReconciler has the stand-in
// answer them, through the agent's routes.
func TestWithReconciler_AnswersTheReconcilerRoutes(t *testing.T) {
	t.Parallel()
	bare := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	if code, body := bare.Do("GET", "/v1/repos", nil, nil); code != http.StatusNotFound || !strings.Contains(body, "no such endpoint") {
		t.Fatalf("GET /v1/repos without reconcilers: %d %s, want 404 no such endpoint", code, body)
	}
	fake := &nopstest.FakeReconciler{RepoList: []*structs.RepoStatus{{Name: "ops", Files: 3}}}
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithReconciler(fake))
	var repos []*structs.RepoStatus
	if code, body := s.Do("GET", "/v1/repos", nil, &repos); code != http.StatusOK || len(repos) != 1 || repos[0].Files != 3 {
		t.Fatalf("GET /v1/repos with the stand-in: %d %s", code, body)
	}
	if code, body := s.Do("GET", "/v1/status/cycle", nil, nil); code != http.StatusNotFound || strings.Contains(body, "no such endpoint") {
		t.Fatalf("GET /v1/status/cycle before a cycle: %d %s, want the reconciler's 404", code, body)
	}
	if got := fake.Calls(); strings.Join(got, "|") != "Repos|Cycle" {
		t.Fatalf("calls %q, want Repos then Cycle", got)
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
