package nomadx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/testutil"
)

func TestNew_Environment(t *testing.T) {
	t.Setenv("NOMAD_ADDR", "http://10.1.2.3:4646")
	t.Setenv("NOMAD_TOKEN", "env-token")
	t.Setenv("NOMAD_REGION", "env-region")

	c, err := New(Config{}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if c.Address() != "http://10.1.2.3:4646" {
		t.Errorf("address = %q, want NOMAD_ADDR", c.Address())
	}

	c, err = New(Config{Address: "http://127.0.0.1:1", Token: "flag-token", Region: "flag-region"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Address() != "http://127.0.0.1:1" {
		t.Errorf("explicit address lost: %q", c.Address())
	}

	for _, bad := range []string{"ftp://nomad:4646", "http://", "unix://", "http://[::1"} {
		if _, err := New(Config{Address: bad}, nil); err == nil || !strings.Contains(err.Error(), "invalid Nomad address") {
			t.Errorf("New(%q) error = %v, want an invalid address error", bad, err)
		}
	}

	t.Setenv("NOMAD_CLIENT_CERT", "/does/not/exist.pem")
	t.Setenv("NOMAD_CLIENT_KEY", "/does/not/exist-key.pem")
	if _, err := New(Config{}, nil); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("New with missing client cert: error = %v, want a TLS error", err)
	}
}

func TestNew_UnreachableCountsErrors(t *testing.T) {
	port := testutil.FreePorts(t, 1)[0]
	c, err := New(Config{Address: "http://127.0.0.1:" + strconv.Itoa(port)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(testContext(t)); err == nil {
		t.Fatal("Ping of a closed port succeeded")
	}
	st := c.Stats()
	if st.Requests != 1 || st.Errors != 1 || st.Operations["status.leader"].Errors != 1 {
		t.Errorf("stats after a failed ping = %+v, want one failed status.leader request", st)
	}
	// No answer is no verdict on the file.
	if _, err := c.Parse(testContext(t), `job "web" {}`, ""); err == nil || errors.Is(err, ErrInvalidJob) {
		t.Errorf("parse against a closed port: error = %v, want one that does not match ErrInvalidJob", err)
	}
}

func TestKeepLiveCounts_Clamps(t *testing.T) {
	job := &api.Job{TaskGroups: []*api.TaskGroup{
		{Name: new("scaled"), Count: new(2), Scaling: &api.ScalingPolicy{Min: new(int64(1)), Max: new(int64(4))}},
		{Name: new("fixed"), Count: new(2)},
		{Name: new("clamped"), Count: new(2), Scaling: &api.ScalingPolicy{Min: new(int64(1)), Max: new(int64(3))}},
		{Name: new("new"), Count: new(2), Scaling: &api.ScalingPolicy{Min: new(int64(1)), Max: new(int64(3))}},
	}}
	live := &api.Job{TaskGroups: []*api.TaskGroup{
		{Name: new("scaled"), Count: new(4)},
		{Name: new("fixed"), Count: new(7)},
		{Name: new("clamped"), Count: new(9)},
	}}
	KeepLiveCounts(job, live)
	want := map[string]int{"scaled": 4, "fixed": 2, "clamped": 3, "new": 2}
	for _, tg := range job.TaskGroups {
		if got := *tg.Count; got != want[*tg.Name] {
			t.Errorf("group %s count = %d, want %d", *tg.Name, got, want[*tg.Name])
		}
	}
	KeepLiveCounts(nil, live) // must not panic
	KeepLiveCounts(job, nil)
}

func TestDiffHash_IgnoresUnchangedAndPlacement(t *testing.T) {
	base := func() *api.JobDiff {
		return &api.JobDiff{Type: "Edited", ID: "web", TaskGroups: []*api.TaskGroupDiff{{
			Type: "Edited", Name: "web",
			Fields:  []*api.FieldDiff{{Type: "None", Name: "Count", Old: "3", New: "3"}},
			Updates: map[string]uint64{"create/destroy update": 3},
			Tasks: []*api.TaskDiff{{
				Type: "Edited", Name: "web", Annotations: []string{"forces create/destroy update"},
				Fields: []*api.FieldDiff{{Type: "Edited", Name: "Env[LEVEL]", Old: "info", New: "debug"}},
			}},
		}}}
	}
	a := base()
	b := base()
	b.TaskGroups[0].Fields[0].Old, b.TaskGroups[0].Fields[0].New = "5", "5"
	b.TaskGroups[0].Updates = map[string]uint64{"ignore": 1, "create/destroy update": 4}
	b.TaskGroups[0].Tasks[0].Annotations = nil
	if DiffHash(a) != DiffHash(b) {
		t.Error("DiffHash changed with an unchanged count, placements or annotations")
	}
	c := base()
	c.TaskGroups[0].Tasks[0].Fields[0].New = "warn"
	if DiffHash(a) == DiffHash(c) {
		t.Error("DiffHash did not change with a changed field")
	}
	none := &api.JobDiff{Type: "None", ID: "web", TaskGroups: []*api.TaskGroupDiff{{Type: "None", Name: "web"}}}
	if DiffHash(none) != DiffHash(nil) {
		t.Error("a diff without change must hash like no diff")
	}
}

// TestAgainstNomad runs every test that needs Nomad against one real dev
// agent, started once; the subtests use their own jobs and run in
// parallel.
func TestAgainstNomad(t *testing.T) {
	agent := testutil.StartNomad(t)
	for _, st := range []struct {
		name string
		run  func(t *testing.T, agent *testutil.NomadAgent)
	}{
		{"ParseWithVariables", nomadParseWithVariables},
		{"SpecHash", nomadSpecHash},
		{"PlanRegisterCAS", nomadPlanRegisterCAS},
		{"JobsAndNotFound", nomadJobsAndNotFound},
		{"HealthServiceHealthy", nomadHealthServiceHealthy},
		{"HealthServiceFailed", nomadHealthServiceFailed},
		{"HealthCanaryPromotion", nomadHealthCanaryPromotion},
		{"HealthBatch", nomadHealthBatch},
		{"HealthPeriodic", nomadHealthPeriodic},
		{"DispatchIdempotent", nomadDispatchIdempotent},
		{"KeepLiveCounts", nomadKeepLiveCounts},
		{"PrometheusCounters", nomadPrometheusCounters},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			st.run(t, agent)
		})
	}
}

// nomadParseWithVariables parses HCL2 with a variables file, and refuses
// broken HCL, a missing variable and an empty file as invalid jobs.
func nomadParseWithVariables(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	hcl := readTestdata(t, "web.nomad.hcl")

	job := mustParse(t, c, hcl, readTestdata(t, "web.vars.hcl"))
	if *job.ID != "web" || *job.TaskGroups[0].Count != 3 {
		t.Errorf("parsed job %s with web count %d, want web with count 3 from the variables file", *job.ID, *job.TaskGroups[0].Count)
	}
	if got := job.TaskGroups[0].Tasks[0].Env["LEVEL"]; got != "DEBUG" {
		t.Errorf("env LEVEL = %q, want DEBUG (HCL2 function over a variable)", got)
	}
	if job.Namespace == nil || *job.Namespace != "default" || job.Priority == nil {
		t.Error("parsed job is not canonicalized")
	}

	plain := mustParse(t, c, hcl, "")
	if *plain.TaskGroups[0].Count != 1 {
		t.Errorf("count without variables = %d, want the default 1", *plain.TaskGroups[0].Count)
	}

	_, err := c.Parse(testContext(t), `job "broken" { group "g" {`, "")
	if err == nil || !strings.Contains(err.Error(), "parse job") || !errors.Is(err, ErrInvalidJob) {
		t.Errorf("broken HCL: error = %v, want a parse error matching ErrInvalidJob", err)
	}
	_, err = c.Parse(testContext(t), `variable "image" {}
job "needs-image" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = var.image }
    }
  }
}`, "")
	if err == nil || !strings.Contains(err.Error(), "image") {
		t.Errorf("missing variable: error = %v, want it named", err)
	}
	if _, err := c.Parse(testContext(t), "  \n", ""); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("empty file: error = %v, want one matching ErrInvalidJob", err)
	}
}

// nomadSpecHash checks what SpecHash and JobHash keep and leave out.
func nomadSpecHash(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	hcl := readTestdata(t, "web.nomad.hcl")
	vars := readTestdata(t, "web.vars.hcl")

	a := mustParse(t, c, hcl, vars)
	b := mustParse(t, c, hcl, vars)
	if SpecHash(a, nil) != SpecHash(b, nil) || JobHash(a) != JobHash(b) {
		t.Fatal("two parses of one file hash differently")
	}
	if len(SpecHash(a, nil)) != 64 {
		t.Errorf("SpecHash %q is not hex SHA-256", SpecHash(a, nil))
	}

	// The "api" group has a scaling block: its count is the autoscaler's.
	scaled := mustParse(t, c, strings.Replace(hcl, "count = 2", "count = 4", 1), vars)
	if SpecHash(a, nil) != SpecHash(scaled, nil) {
		t.Error("SpecHash changed with the count of a scaled group")
	}
	if JobHash(a) == JobHash(scaled) {
		t.Error("JobHash must keep counts")
	}
	unscaled := mustParse(t, c, hcl, "count = 5\nlevel = \"debug\"\n")
	if SpecHash(a, nil) == SpecHash(unscaled, nil) {
		t.Error("SpecHash did not change with the count of a group without scaling")
	}
	if SpecHash(a, []string{"h1"}) == SpecHash(a, nil) || SpecHash(a, []string{"h1", "h2"}) == SpecHash(a, []string{"h2", "h1"}) {
		t.Error("SpecHash ignores hook hashes or their order")
	}

	// Fields Nomad sets at registration do not count.
	a.Version = new(uint64(7))
	a.Status = new("running")
	a.JobModifyIndex = new(uint64(99))
	a.SubmitTime = new(time.Now().UnixNano())
	if SpecHash(a, nil) != SpecHash(b, nil) {
		t.Error("SpecHash depends on server-set fields")
	}
}

// nomadPlanRegisterCAS plans and registers with the job modify index as a
// check-and-set: a stale or made-up index is refused.
func nomadPlanRegisterCAS(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	ctx := testContext(t)
	hcl := serviceHCL("cas", 1, `run_for = "1h"`, "")
	job := mustParse(t, c, hcl, "")

	plan, err := c.Plan(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Type != DiffTypeAdded || plan.JobModifyIndex != 0 || plan.InSync() {
		t.Fatalf("plan of a new job: type %q index %d, want Added at 0", plan.Type, plan.JobModifyIndex)
	}
	if !strings.HasPrefix(plan.Text, `+ Job: "cas"`) || !strings.Contains(plan.Text, `+ Task Group: "app" (1 create)`) {
		t.Errorf("plan text:\n%s", plan.Text)
	}

	reg := mustRegister(t, c, job, 0)
	if reg.EvalID == "" || reg.JobModifyIndex == 0 {
		t.Fatalf("register result %+v", reg)
	}

	// A second "create" must not overwrite the job.
	_, err = c.Register(ctx, job, 0)
	if !errors.Is(err, ErrIndexMismatch) {
		t.Fatalf("register of an existing job with index 0: error = %v, want ErrIndexMismatch", err)
	}

	// In sync now.
	plan, err = c.Plan(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.InSync() || plan.JobModifyIndex != reg.JobModifyIndex {
		t.Fatalf("plan after register: type %q index %d, want None at %d\n%s", plan.Type, plan.JobModifyIndex, reg.JobModifyIndex, plan.Text)
	}
	if DiffHash(plan.Diff) != DiffHash(nil) {
		t.Error("in-sync plan has a non-empty diff hash")
	}

	// An edit shows as Edited, with a stable diff hash.
	edited := mustParse(t, c, serviceHCL("cas", 2, `run_for = "2h"`, ""), "")
	p1, err := c.Plan(ctx, edited)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.Plan(ctx, edited)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Type != DiffTypeEdited || DiffHash(p1.Diff) != DiffHash(p2.Diff) || p1.Text != p2.Text {
		t.Fatalf("plans of one edit differ or are not Edited (%s):\n%s\n%s", p1.Type, p1.Text, p2.Text)
	}
	for _, want := range []string{`+/- Job: "cas"`, `+/- Count: "1" => "2"`, `+/- run_for: "1h" => "2h"`} {
		if !strings.Contains(p1.Text, want) {
			t.Errorf("plan text lacks %q:\n%s", want, p1.Text)
		}
	}

	// Someone else registers in between: the stale index fails.
	other := mustParse(t, c, serviceHCL("cas", 1, `run_for = "3h"`, ""), "")
	otherReg := mustRegister(t, c, other, reg.JobModifyIndex)
	_, err = c.Register(ctx, edited, reg.JobModifyIndex)
	if !errors.Is(err, ErrIndexMismatch) {
		t.Fatalf("register with a stale index: error = %v, want ErrIndexMismatch", err)
	}
	if _, err := c.Register(ctx, edited, otherReg.JobModifyIndex); err != nil {
		t.Fatalf("register with the current index: %v", err)
	}

	// A job that does not exist cannot be registered with an index.
	ghost := mustParse(t, c, serviceHCL("ghost", 1, `run_for = "1h"`, ""), "")
	if _, err := c.Register(ctx, ghost, 12345); !errors.Is(err, ErrIndexMismatch) {
		t.Errorf("register of a missing job with an index: error = %v, want ErrIndexMismatch", err)
	}
	st := c.Stats()
	if st.Operations["job.register"].Requests != 6 || st.Operations["job.register"].Errors != 3 || st.Operations["job.plan"].Requests != 4 {
		t.Errorf("stats %s: want 6 registers (3 refused) and 4 plans", st)
	}
}

// nomadJobsAndNotFound reads, lists, waits for and deregisters jobs, and
// answers what does not exist with the not-found errors.
func nomadJobsAndNotFound(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	ctx := testContext(t)

	if _, err := c.Job(ctx, "default", "nosuch"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("Job(nosuch) error = %v, want ErrJobNotFound", err)
	}
	if _, err := c.Deployment(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, ErrDeploymentNotFound) {
		t.Errorf("Deployment(unknown) error = %v, want ErrDeploymentNotFound", err)
	}
	if d, err := c.LatestDeployment(ctx, "default", "nosuch"); err != nil || d != nil {
		t.Errorf("LatestDeployment(nosuch) = %v, %v; want nil, nil", d, err)
	}
	if st := c.Stats(); st.Errors != 0 {
		t.Errorf("404 answers counted as errors: %s", st)
	}

	_, index, err := c.WaitJobs(ctx, "*", 0)
	if err != nil {
		t.Fatal(err)
	}
	job := mustParse(t, c, batchHCL("listed", `run_for = "1s"`, `meta { nops_managed = "true" }`), "")
	listed := waitListed(ctx, c, index, "listed")
	reg := mustRegister(t, c, job, 0)
	var w listedWait
	select {
	case w = <-listed:
	case <-time.After(30 * time.Second):
		t.Fatal("blocking WaitJobs did not return after a register")
	}
	if w.err != nil {
		t.Fatalf("WaitJobs: %v", w.err)
	}
	if w.stub.JobModifyIndex != reg.JobModifyIndex || w.stub.Meta["nops_managed"] != "true" || w.stub.Namespace != "default" {
		t.Fatalf("WaitJobs stub for the new job = %+v (after %d wake-ups)", w.stub, w.wakeups)
	}
	all, err := c.ListJobs(ctx, "default")
	if err != nil || len(all) == 0 {
		t.Fatalf("ListJobs(default) = %d jobs, %v", len(all), err)
	}

	versions, err := c.JobVersions(ctx, "default", "listed")
	if err != nil || len(versions) != 1 || *versions[0].Version != 0 {
		t.Fatalf("JobVersions = %d, %v", len(versions), err)
	}

	if _, err := c.Deregister(ctx, "default", "listed", true); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		_, err := c.Job(ctx, "default", "listed")
		return errors.Is(err, ErrJobNotFound), err
	})
}

// listedWait is what waitListed found: the job's stub, or an error.
type listedWait struct {
	stub    *api.JobListStub
	wakeups int
	err     error
}

// waitListed blocks on Nomad's job index, from index, until a job with ID
// id shows, and sends what it found; other subtests register jobs too, so
// one wake-up may be theirs.
func waitListed(ctx context.Context, c *Client, index uint64, id string) <-chan listedWait {
	out := make(chan listedWait, 1)
	go func() {
		var w listedWait
		for w.stub == nil && w.err == nil {
			stubs, next, err := c.WaitJobs(ctx, "*", index)
			if err == nil && next <= index {
				err = fmt.Errorf("blocking query returned index %d after %d", next, index)
			}
			w.err, index = err, next
			w.wakeups++
			for _, s := range stubs {
				if s.ID == id {
					w.stub = s
				}
			}
		}
		out <- w
	}()
	return out
}

// nomadHealthServiceHealthy follows a service job to healthy.
func nomadHealthServiceHealthy(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	job := mustParse(t, c, serviceHCL("healthy", 1, `run_for = "1h"`, ""), "")
	reg := mustRegister(t, c, job, 0)
	res := waitHealth(t, c, "default", "healthy", 0, reg.EvalID, HealthHealthy)
	if res.DeploymentID == "" {
		t.Errorf("healthy service job without a deployment ID: %+v", res)
	}
	// Without the evaluation ID (after a failover) the answer is the same.
	again, err := c.Health(testContext(t), "default", "healthy", 0, "")
	if err != nil || again.State != HealthHealthy || again.DeploymentID != res.DeploymentID {
		t.Errorf("Health without eval ID = %+v, %v", again, err)
	}
	allocs, err := c.JobAllocations(testContext(t), "default", "healthy")
	if err != nil || len(allocs) != 1 || allocs[0].ClientStatus != api.AllocClientStatusRunning {
		t.Errorf("JobAllocations = %d, %v", len(allocs), err)
	}
}

// nomadHealthServiceFailed follows a service job that fails to start.
func nomadHealthServiceFailed(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	job := mustParse(t, c, serviceHCL("failing", 1, `start_error = "boom"`, `progress_deadline = "0"`), "")
	reg := mustRegister(t, c, job, 0)
	res := waitHealth(t, c, "default", "failing", 0, reg.EvalID, HealthFailed)
	if res.DeploymentID == "" || res.Message == "" {
		t.Errorf("failed health lacks deployment or message: %+v", res)
	}
}

// nomadHealthCanaryPromotion waits for canaries, promotes them and sees the
// deployment finish.
func nomadHealthCanaryPromotion(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	ctx := testContext(t)
	v0 := mustParse(t, c, serviceHCL("canary", 1, `run_for = "1h"`, `canary = 1`), "")
	reg := mustRegister(t, c, v0, 0)
	waitHealth(t, c, "default", "canary", 0, reg.EvalID, HealthHealthy)

	v1 := mustParse(t, c, serviceHCL("canary", 1, `run_for = "2h"`, `canary = 1`), "")
	reg1 := mustRegister(t, c, v1, reg.JobModifyIndex)
	res := waitHealth(t, c, "default", "canary", 1, reg1.EvalID, HealthAwaitingPromotion)
	if res.DeploymentID == "" {
		t.Fatalf("awaiting promotion without deployment: %+v", res)
	}
	latest, err := c.LatestDeployment(ctx, "default", "canary")
	if err != nil || latest == nil || latest.ID != res.DeploymentID {
		t.Fatalf("LatestDeployment = %v, %v; want %s", latest, err, res.DeploymentID)
	}
	if err := c.PromoteDeployment(ctx, res.DeploymentID); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, c, "default", "canary", 1, reg1.EvalID, HealthHealthy)
}

// nomadHealthBatch follows a batch job that runs and one that fails.
func nomadHealthBatch(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	ok := mustParse(t, c, batchHCL("batch-ok", `run_for = "200ms"`, ""), "")
	reg := mustRegister(t, c, ok, 0)
	res := waitHealth(t, c, "default", "batch-ok", 0, reg.EvalID, HealthHealthy)
	if res.DeploymentID != "" {
		t.Errorf("batch job reported a deployment: %+v", res)
	}

	// A batch allocation counts as healthy while it runs, so the failing
	// one fails at start.
	bad := mustParse(t, c, batchHCL("batch-bad", `start_error = "boom"`, ""), "")
	reg = mustRegister(t, c, bad, 0)
	res = waitHealth(t, c, "default", "batch-bad", 0, reg.EvalID, HealthFailed)
	if !strings.Contains(res.Message, "failed") {
		t.Errorf("failure message %q", res.Message)
	}
}

// nomadHealthPeriodic reports a periodic job healthy at once.
func nomadHealthPeriodic(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	job := mustParse(t, c, batchHCL("nightly", `run_for = "1s"`, `periodic {
    crons            = ["0 3 * * *"]
    prohibit_overlap = true
  }`), "")
	reg := mustRegister(t, c, job, 0)
	res, err := c.Health(testContext(t), "default", "nightly", 0, reg.EvalID)
	if err != nil || res.State != HealthHealthy {
		t.Fatalf("periodic job health = %+v, %v; want healthy at once", res, err)
	}
}

// nomadDispatchIdempotent dispatches a hook once per idempotency token and
// follows the children to their outcome.
func nomadDispatchIdempotent(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	ctx := testContext(t)
	hook := mustParse(t, c, batchHCL("hook", `run_for = "200ms"`, `parameterized {
    meta_optional = ["nops_deployment", "nops_phase"]
  }
  meta { nops_role = "hook" }`), "")
	mustRegister(t, c, hook, 0)

	if _, _, err := c.Dispatch(ctx, "default", "hook", nil, ""); err == nil {
		t.Error("dispatch without a token was accepted")
	}
	meta := map[string]string{"nops_deployment": "d1", "nops_phase": "pre"}
	child, evalID, err := c.Dispatch(ctx, "default", "hook", meta, "d1/pre/0")
	if err != nil || child == "" || evalID == "" {
		t.Fatalf("first dispatch = %q, %q, %v", child, evalID, err)
	}
	again, _, err := c.Dispatch(ctx, "default", "hook", meta, "d1/pre/0")
	if err != nil || again != child {
		t.Fatalf("repeated dispatch = %q, %v; want the same child %q", again, err, child)
	}
	stubs, err := c.ListJobs(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	children := 0
	for _, s := range stubs {
		if s.ParentID == "hook" {
			children++
		}
	}
	if children != 1 {
		t.Errorf("%d children after two dispatches with one token, want 1", children)
	}

	found, err := c.FindDispatched(ctx, "default", "hook", "d1/pre/0")
	if err != nil || found != child {
		t.Errorf("FindDispatched = %q, %v; want %q", found, err, child)
	}
	if _, err := c.FindDispatched(ctx, "default", "hook", "d1/post/0"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("FindDispatched(unknown token) error = %v, want ErrJobNotFound", err)
	}
	waitOutcome(t, c, "default", child, DispatchSucceeded)

	failing := mustParse(t, c, batchHCL("hook-bad", `run_for = "200ms"
        exit_code = 3`, `parameterized {}`), "")
	mustRegister(t, c, failing, 0)
	child, _, err = c.Dispatch(ctx, "default", "hook-bad", nil, "d2/pre/0")
	if err != nil {
		t.Fatal(err)
	}
	msg := waitOutcome(t, c, "default", child, DispatchFailed)
	if !strings.Contains(msg, "failed") {
		t.Errorf("failure message %q", msg)
	}
}

// nomadKeepLiveCounts keeps the autoscaler's count of a scaled group.
func nomadKeepLiveCounts(t *testing.T, agent *testutil.NomadAgent) {
	c := newTestClient(t, agent)
	ctx := testContext(t)
	hcl := strings.ReplaceAll(readTestdata(t, "web.nomad.hcl"), `job "web"`, `job "scaled"`)
	job := mustParse(t, c, hcl, "")
	reg := mustRegister(t, c, job, 0)
	// Nomad refuses to scale during a deployment.
	waitHealth(t, c, "default", "scaled", 0, reg.EvalID, HealthHealthy)

	// The autoscaler moves the "api" group to 4.
	if _, _, err := c.API().Jobs().Scale("scaled", "api", new(4), "autoscaler", false, nil, nil); err != nil {
		t.Fatal(err)
	}
	live, err := c.Job(ctx, "default", "scaled")
	if err != nil {
		t.Fatal(err)
	}

	fromGit := mustParse(t, c, hcl, "")
	plan, err := c.Plan(ctx, fromGit)
	if err != nil {
		t.Fatal(err)
	}
	if plan.InSync() {
		t.Fatal("git count differs from the scaled count, yet the plan is in sync")
	}
	KeepLiveCounts(fromGit, live)
	if *fromGit.TaskGroups[1].Count != 4 || *fromGit.TaskGroups[0].Count != 1 {
		t.Fatalf("counts after KeepLiveCounts: web %d api %d, want 1 and 4", *fromGit.TaskGroups[0].Count, *fromGit.TaskGroups[1].Count)
	}
	plan, err = c.Plan(ctx, fromGit)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.InSync() {
		raw, _ := json.MarshalIndent(plan.Diff, "", " ")
		t.Fatalf("plan with live counts is not in sync (%s):\n%s\n%s", plan.Type, plan.Text, raw)
	}
	if SpecHash(fromGit, nil) != SpecHash(job, nil) {
		t.Error("SpecHash changed with the live count of a scaled group")
	}
}

// nomadPrometheusCounters counts the requests of two clients on one
// registry.
func nomadPrometheusCounters(t *testing.T, agent *testutil.NomadAgent) {
	reg := prometheus.NewRegistry()
	c1, err := New(Config{Address: agent.Addr, Registerer: reg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := New(Config{Address: agent.Addr, Registerer: reg}, nil)
	if err != nil {
		t.Fatalf("second client on one registry: %v", err)
	}
	ctx := testContext(t)
	if err := c1.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.ListJobs(ctx, "*"); err != nil {
		t.Fatal(err)
	}
	// A request made through the raw API client is counted too.
	if _, err := c2.API().Agent().Self(); err != nil {
		t.Fatal(err)
	}
	if s := c2.Stats(); s.Requests != 2 || s.Operations["GET /v1/agent"].Requests != 1 {
		t.Errorf("c2 stats = %s, want jobs.list and GET /v1/agent", s)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "nops_nomad_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if got["status.leader"] != 1 || got["jobs.list"] != 1 || got["GET /v1/agent"] != 1 {
		t.Errorf("prometheus counters = %v", got)
	}
	// Every operation asked has its error series, at 0 while none failed.
	for _, op := range []string{"status.leader", "jobs.list", "GET /v1/agent"} {
		if v, err := testutil.MetricValue(reg, "nops_nomad_request_errors_total", "operation", op); err != nil || v != 0 {
			t.Errorf("errors of %s: %v (%v), want 0", op, v, err)
		}
	}
}

// WaitJobs is the blocking form of ListJobs: it returns once Nomad's job index
// is above index (or after the blocking wait), with the index to pass next.
// index 0 answers at once.
func (c *Client) WaitJobs(ctx context.Context, ns string, index uint64) ([]*api.JobListStub, uint64, error) {
	return c.listJobs(ctx, ns, index)
}
