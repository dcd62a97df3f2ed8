package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// routesServer starts one server with the reconcilers' routes but not
// their loops (no Nomad, no git: nothing changes the state a test writes),
// with ACLs on or off and the Nomad UI's address (empty for none).
func routesServer(tb testing.TB, acl bool, nomadUI string) (*agent.Server, string) {
	tb.Helper()
	cfg := nopstest.Config(tb, tb.TempDir())
	cfg.ACL.Enabled = acl
	cfg.NomadUIURL = nomadUI
	logger := hclog.NewNullLogger()
	s, err := agent.New(cfg, logger, agent.Options{Build: func(s *agent.Server) (agent.LeaderFunc, agent.Reconciler, error) {
		m, err := agent.NewFleet(s, cfg, logger, nil)
		if err != nil {
			return nil, nil, err
		}
		return func(context.Context, *agent.Server) {}, m, nil
	}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Shutdown)
	testutil.WaitForResult(tb, 20*time.Second, func() (bool, error) { return s.IsLeader(), fmt.Errorf("no leader") })
	return s, "http://" + s.HTTPAddr()
}

// testTree is the plan diff of a change to job id: an edited group whose
// count forces a create, an edited task that forces a create/destroy
// update (an env value changed, one removed, one added empty, a config
// block changed) and an added task.
func testTree(id string) *structs.PlanDiff {
	edit := func(name, old, new string, ann ...string) structs.DiffField {
		return structs.DiffField{Type: structs.DiffEdited, Name: name, Old: old, New: new, Annotations: ann}
	}
	return &structs.PlanDiff{Type: structs.DiffEdited, ID: id, Groups: []structs.GroupDiff{{
		Type: structs.DiffEdited, Name: "web", Updates: []string{"1 create", "1 create/destroy update"},
		Fields: []structs.DiffField{edit("Count", "1", "2", "forces create")},
		Tasks: []structs.TaskDiff{
			{Type: structs.DiffEdited, Name: "web", Annotations: []string{"forces create/destroy update"},
				Fields: []structs.DiffField{edit("Env[LEVEL]", "info", "debug"),
					{Type: structs.DiffDeleted, Name: "Env[OLD]", Old: "gone"}, {Type: structs.DiffAdded, Name: "Env[EMPTY]"},
					edit("Env[DB_PASSWORD]", "(redacted)", "(redacted)")},
				Objects: []structs.DiffObject{{Type: structs.DiffEdited, Name: "Config",
					Fields: []structs.DiffField{edit("image", "web:1", "web:2")}}}},
			{Type: structs.DiffAdded, Name: "sidecar", Annotations: []string{"forces create"}},
		},
	}}}
}

// TestDashboard_PlanDiffTreeHealthAndLinks: the deployment page shows the
// plan diff as a tree (changed, removed and added fields with old and new
// values, by group and task, the forced create/destroy called out) with
// the text beside it, and links its evaluation and job version to the
// Nomad UI; a paused job's page shows the diff of its drift with no
// deployment; the jobs list has a health column beside sync, linked to the
// job's allocations in Nomad; the list of the API leaves the diff out.
// Without the Nomad UI's address no link to it is shown.
func TestDashboard_PlanDiffTreeHealthAndLinks(t *testing.T) {
	const nomadUI = "http://nomad.example:4646"
	s, base := routesServer(t, false, nomadUI)
	meta := func() structs.WriteMeta { return structs.WriteMeta{Time: time.Now().UTC(), Actor: "test"} }
	apply := func(typ structs.MessageType, req any) {
		t.Helper()
		if _, err := s.Apply(typ, req); err != nil {
			t.Fatal(err)
		}
	}
	status := func(id string, sync structs.SyncState, drift *structs.PlanDiff, h *structs.JobHealth) *structs.JobStatus {
		return &structs.JobStatus{Namespace: "default", JobID: id, Repository: "ops", File: "jobs/" + id + ".nomad.hcl",
			Commit: strings.Repeat("ab", 20), Policy: structs.PolicyApproval, Sync: sync, DriftSummary: "edited: +/- Job: \"" + id + "\"",
			Drift: drift, Health: h, ObservedAt: time.Now().UTC()}
	}
	apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: meta(), Statuses: []*structs.JobStatus{
		status("web", structs.SyncDrift, testTree("web"), &structs.JobHealth{Running: 2, Healthy: 1, Pending: 1}),
		status("api", structs.SyncInSync, nil, nil),
		status("db", structs.SyncInSync, nil, nil),
	}})
	apply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: meta(), Namespace: "default", JobID: "web", Reason: "incident"})
	d := &structs.Deployment{ID: uuid.NewString(), Namespace: "default", JobID: "api", Repository: "ops", Commit: strings.Repeat("cd", 20),
		File: "jobs/api.nomad.hcl", Policy: structs.PolicyAuto, State: structs.StateDetected, SpecHash: "spec-api",
		Diff: "+/- Job: \"api\"\n+/- Task Group: \"web\" (1 create, 1 create/destroy update)\n", PlanDiff: testTree("api")}
	apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta(), Deployment: d})
	apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: meta(), ID: d.ID,
		From: structs.StateDetected, To: structs.StateApplying, Message: "starting"})
	registered, version, eval := true, uint64(3), "5c1e2a0b-0000-4000-8000-000000000001"
	apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: meta(), ID: d.ID, State: structs.StateApplying,
		Update: &structs.DeploymentPatch{Registered: &registered, JobVersion: &version, NomadEvalID: &eval}})

	c := newClient(t, base)
	get := func(path string) string {
		t.Helper()
		code, _, page := c.do("GET", path, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%.1000s", path, code, page)
		}
		return page
	}
	want := func(what, page string, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if !strings.Contains(page, p) {
				t.Errorf("%s lacks %s", what, p)
			}
		}
	}

	page := get("/ui/deployment/" + d.ID)
	want("the deployment page", page,
		`<div id="plan-diff">`, `class="pd-callout"`, "group web, Count: forces create", "group web, task web: forces create/destroy update",
		"group web, task sidecar: forces create",
		`Task group <code>web</code>`, `Task <code>sidecar</code> <span class="pd-kind add">added</span>`,
		`<code class="pd-name">Env[LEVEL]</code><span class="sr-only"> changed</span>:`,
		`<del class="pd-old">info</del>`, `<ins class="pd-new">debug</ins>`, `<del class="pd-old">gone</del>`,
		`<span class="pd-empty">(empty)</span>`, `<del class="pd-old">(redacted)</del>`, `<code>Config</code>`,
		`<ins class="pd-new">web:2</ins>`, `<span class="pd-ann forces">1 create/destroy update</span>`,
		`<span class="pd-ann forces">forces create/destroy update</span>`,
		`<summary>As text</summary><pre class="diff" id="diff">`,
		`href="`+nomadUI+`/ui/evaluations?currentEval=`+eval+`&amp;namespace=default"`,
		`href="`+nomadUI+`/ui/jobs/api@default/versions"`, `href="`+nomadUI+`/ui/jobs/api@default"`)

	page = get("/ui/job/default/web")
	i := strings.Index(page, `id="job-drift"`)
	if i < 0 {
		t.Fatalf("the job page has no drift panel:\n%.3000s", page)
	}
	want("the paused job's drift panel", page[i:], `class="pd"`, `<ins class="pd-new">debug</ins>`, "group web, task web: forces create/destroy update")
	want("the paused job's page", page, `<span class="badge warn">paused</span>`, `<span class="badge warn">progressing</span>`,
		`<a href="`+nomadUI+`/ui/jobs/web@default/allocations" rel="noopener" class="health-counts">2 running, 1 healthy, 1 pending, 0 failed</a>`)
	// An in-sync job has no drift to show: its drift region is empty and
	// hidden, kept for the live updates to fill.
	want("the in-sync job's page", get("/ui/job/default/db"), `<section id="job-drift" data-live hidden></section>`, "not counted yet")
	// A job with an active deployment shows the deployment's diff.
	want("the page of a job being deployed", get("/ui/job/default/api"), `<ins class="pd-new">debug</ins>`)

	page = get("/ui/jobs")
	want("the jobs list", page, `<th scope="col">Sync</th><th scope="col">Health</th>`, `class="health-counts">2 running, 1 healthy, 1 pending, 0 failed</a>`,
		"not counted yet")

	var list []map[string]any
	mustDoURL(t, base, "", "GET", "/v1/jobs", nil, &list)
	for _, j := range list {
		if _, ok := j["drift"]; ok {
			t.Errorf("GET /v1/jobs carries the drift's diff of %v", j["job_id"])
		}
	}
	var detail struct {
		Status *structs.JobStatus `json:"status"`
	}
	mustDoURL(t, base, "", "GET", "/v1/job/default/web", nil, &detail)
	if detail.Status == nil || detail.Status.Drift == nil || len(detail.Status.Drift.Groups) != 1 || detail.Status.Health == nil {
		t.Errorf("GET /v1/job/default/web: %+v; want the drift's diff and the health", detail.Status)
	}

	// Without the Nomad UI's address, no link to it.
	s2, base2 := routesServer(t, false, "")
	apply2 := func(typ structs.MessageType, req any) {
		t.Helper()
		if _, err := s2.Apply(typ, req); err != nil {
			t.Fatal(err)
		}
	}
	apply2(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: meta(), Statuses: []*structs.JobStatus{
		status("web", structs.SyncDrift, testTree("web"), &structs.JobHealth{Running: 1, Healthy: 1})}})
	d.CreateIndex, d.ModifyIndex, d.State = 0, 0, structs.StateDetected
	apply2(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta(), Deployment: d})
	c2 := newClient(t, base2)
	for _, path := range []string{"/ui/jobs", "/ui/job/default/web", "/ui/deployment/" + d.ID} {
		code, _, page := c2.do("GET", path, nil, nil)
		if code != http.StatusOK || strings.Contains(page, "nomad.example") || strings.Contains(page, "/ui/evaluations") || strings.Contains(page, "@default") {
			t.Errorf("GET %s without a Nomad UI: %d, or a link to it", path, code)
		}
	}
}
