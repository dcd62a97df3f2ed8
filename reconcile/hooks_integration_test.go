package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// TestHooks_PreAndPostRunInOrderAroundTheApply: pre-hooks run in the
// declared order before the register, post-hooks once the new version is
// healthy; each run is a child of the hook's revision job, dispatched with
// the run's idempotency token and the nops_* meta the hook declares.
func TestHooks_PreAndPostRunInOrderAroundTheApply(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto,
			testutil.WithMeta("nops_pre_hooks", "backup,migrate"), testutil.WithMeta("nops_post_hooks", "notify"))...),
		"backup.nomad.hcl":  testutil.HookJobHCL("backup"),
		"migrate.nomad.hcl": testutil.HookJobHCL("migrate"),
		// notify declares only one of the keys Nops can pass.
		"notify.nomad.hcl": testutil.HookJobHCL("notify", testutil.WithHookMeta(nil, []string{"nops_phase"})),
	})
	head := e.repo.Head()
	d := e.s.WaitForDeployment("default", "web", structs.StateCompleted, hkWait)
	if !d.Registered || d.JobVersion != 0 {
		t.Fatalf("web: registered %v version %d", d.Registered, d.JobVersion)
	}
	if len(d.Hooks) != 3 || len(d.HookRuns) != 3 {
		t.Fatalf("hooks %+v runs %+v", d.Hooks, d.HookRuns)
	}

	wantMeta := map[string]map[string]string{
		"backup":  {"nops_deployment": d.ID, "nops_job": "web", "nops_commit": head, "nops_phase": "pre"},
		"migrate": {"nops_deployment": d.ID, "nops_job": "web", "nops_commit": head, "nops_phase": "pre"},
		"notify":  {"nops_phase": "post"},
	}
	var submitted []int64
	for _, c := range []struct {
		phase structs.HookPhase
		pos   int
		name  string
	}{{structs.PhasePre, 0, "backup"}, {structs.PhasePre, 1, "migrate"}, {structs.PhasePost, 0, "notify"}} {
		h := frozen(t, d, c.phase, c.pos)
		r := hookRun(t, d, c.phase, c.pos)
		if h.Name != c.name || r.Hook != c.name || r.State != structs.HookRunSucceeded {
			t.Fatalf("%s/%d: hook %+v run %+v", c.phase, c.pos, h, r)
		}
		if r.Token != structs.HookRunToken(d.ID, c.phase, c.pos) || r.StartedAt.IsZero() || r.FinishedAt.Before(r.StartedAt) {
			t.Fatalf("%s run: %+v", c.name, r)
		}
		// Nomad holds the revision job, registered once, and one child:
		// the run, with its token and meta.
		if v := e.registrations(h.RevisionJobID); len(v) != 1 {
			t.Fatalf("revision %s was registered %d times in Nomad", h.RevisionJobID, len(v))
		}
		kids := e.children(h.RevisionJobID)
		if len(kids) != 1 || kids[0].ID != r.DispatchedJobID {
			t.Fatalf("children of %s: %+v, want the run %s", h.RevisionJobID, kids, r.DispatchedJobID)
		}
		child := e.nomadJob(r.DispatchedJobID)
		if child == nil || child.DispatchIdempotencyToken == nil || *child.DispatchIdempotencyToken != r.Token {
			t.Fatalf("child %s: %+v", r.DispatchedJobID, child)
		}
		// The child's meta is the hook's (nops_role) and the dispatch meta.
		for _, k := range []string{"nops_deployment", "nops_job", "nops_commit", "nops_phase"} {
			got, ok := child.Meta[k]
			want, declared := wantMeta[c.name][k]
			if ok != declared || got != want {
				t.Fatalf("%s child meta %s = %q (set %v), want %q (set %v); all: %v", c.name, k, got, ok, want, declared, child.Meta)
			}
		}
		submitted = append(submitted, *child.SubmitTime)
	}
	// The runs went one after the other, around the register.
	web := e.nomadJob("web")
	if !(submitted[0] < submitted[1] && submitted[1] < *web.SubmitTime && *web.SubmitTime < submitted[2]) {
		t.Fatalf("submit times: backup %d, migrate %d, web %d, notify %d", submitted[0], submitted[1], *web.SubmitTime, submitted[2])
	}
	e.wantEvents(d.ID, "pre hook backup: dispatched", "pre hook backup succeeded", "pre hook migrate: dispatched",
		"pre hook migrate succeeded", "pre hooks succeeded", "registered job version 0", "healthy",
		"post hook notify: dispatched", "post hook notify succeeded", "post hooks succeeded")

	// The API's deployment, which `nops deployment status` shows, carries
	// the runs with their child jobs.
	got := e.deployment(d.ID)
	if len(got.HookRuns) != 3 {
		t.Fatalf("GET /v1/deployment/%s: hook runs %+v, want 3", d.ID, got.HookRuns)
	}
	for i, r := range got.HookRuns {
		if r.State != structs.HookRunSucceeded || r.DispatchedJobID != d.HookRuns[i].DispatchedJobID || r.DispatchedJobID == "" {
			t.Fatalf("GET /v1/deployment/%s: hook run %d is %+v, want %+v", d.ID, i, r, d.HookRuns[i])
		}
	}
}

// TestHooks_PreHookFailureRegistersNothing: a failed pre-hook fails the
// deployment before the register: a new job is not created, a live job keeps
// its version, and the job is blocked until git changes.
func TestHooks_PreHookFailureRegistersNothing(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl":     testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto)...),
		"api.nomad.hcl":     testutil.ServiceJobHCL("api", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "migrate"))...),
		"migrate.nomad.hcl": testutil.HookJobHCL("migrate", testutil.WithExitCode(1)),
	})
	// A new job: never registered.
	api := e.s.WaitForDeployment("default", "api", structs.StateFailed, hkWait)
	if api.Registered || !strings.Contains(api.Error, "pre hook migrate failed") {
		t.Fatalf("api: registered %v, error %q", api.Registered, api.Error)
	}
	if r := hookRun(t, api, structs.PhasePre, 0); r.State != structs.HookRunFailed || !strings.Contains(r.Error, "failed") || r.FinishedAt.IsZero() {
		t.Fatalf("api run: %+v", r)
	}
	if j := e.nomadJob("api"); j != nil {
		t.Fatalf("Nomad has job api: %+v", j)
	}
	e.wantEvents(api.ID, "pre hook migrate: dispatched", "pre hook migrate failed")

	// A live job: its version stays.
	web := e.s.WaitForDeployment("default", "web", structs.StateCompleted, hkWait)
	e.commit("web gets a failing pre-hook", map[string]string{
		"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "migrate"),
			testutil.WithEnv("RELEASE", "2"))...),
	})
	failed := e.waitNew("web", web)
	failed = e.waitDeployment(failed.ID, structs.StateFailed)
	if failed.Registered || !strings.Contains(failed.Error, "pre hook migrate failed") {
		t.Fatalf("web: %+v", failed)
	}
	if v := e.nomadVersions("web"); len(v) != 1 || *v[0].Version != 0 {
		t.Fatalf("web has %d versions in Nomad, want only version 0", len(v))
	}
	if _, ok := e.nomadJob("web").TaskGroups[0].Tasks[0].Env["RELEASE"]; ok {
		t.Fatal("the live web job has the new spec")
	}

	// Blocked: no deployment again while nothing changes.
	e.cycles(2)
	if n := e.count("web"); n != 2 {
		t.Fatalf("web has %d deployments, want 2", n)
	}
	if st := e.status("web"); !st.Blocked || st.Sync != structs.SyncDrift {
		t.Fatalf("web status: %+v", st)
	}
}

// TestHooks_PostHookFailureLeavesTheNewVersionLive: a failed post-hook fails
// the deployment, but the new version is already running in Nomad and stays.
func TestHooks_PostHookFailureLeavesTheNewVersionLive(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl":   testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_post_hooks", "smoke"))...),
		"smoke.nomad.hcl": testutil.HookJobHCL("smoke", testutil.WithExitCode(3)),
	})
	d := e.s.WaitForDeployment("default", "web", structs.StateFailed, hkWait)
	if !d.Registered || !strings.Contains(d.Error, "post hook smoke failed") {
		t.Fatalf("web: registered %v error %q", d.Registered, d.Error)
	}
	if r := hookRun(t, d, structs.PhasePost, 0); r.State != structs.HookRunFailed {
		t.Fatalf("run: %+v", r)
	}
	e.wantEvents(d.ID, "registered job version 0", "healthy", "post hook smoke: dispatched", "post hook smoke failed")
	web := e.nomadJob("web")
	if web == nil || *web.Version != 0 || *web.Status != "running" || stopped(web) {
		t.Fatalf("web in Nomad: %+v", web)
	}
	e.nomad.WaitForAllocs(t, "default", "web", "running", 1)
	// Failed after its register: blocked, and the live job is in sync.
	e.cycles(1)
	if st := e.status("web"); !st.Blocked || st.Sync != structs.SyncInSync {
		t.Fatalf("web status: %+v", st)
	}
}

// TestHooks_TimeoutFailsAndStopsTheRun: a hook that runs past its
// nops_hook_timeout fails the deployment, naming the timeout, and its run is
// stopped in Nomad.
func TestHooks_TimeoutFailsAndStopsTheRun(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl":  testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "slow"))...),
		"slow.nomad.hcl": testutil.HookJobHCL("slow", testutil.WithMeta("nops_hook_timeout", "3s"), testutil.WithRunFor(time.Minute)),
	})
	d := e.s.WaitForDeployment("default", "web", structs.StateFailed, hkWait)
	if d.Registered || !strings.Contains(d.Error, "pre hook slow timed out after 3s") {
		t.Fatalf("web: registered %v error %q", d.Registered, d.Error)
	}
	if h := frozen(t, d, structs.PhasePre, 0); h.Timeout != 3*time.Second {
		t.Fatalf("frozen timeout %s", h.Timeout)
	}
	r := hookRun(t, d, structs.PhasePre, 0)
	if r.State != structs.HookRunFailed || r.FinishedAt.Sub(r.StartedAt) < 3*time.Second || r.FinishedAt.Sub(r.StartedAt) > 15*time.Second {
		t.Fatalf("run: %+v (ran %s)", r, r.FinishedAt.Sub(r.StartedAt))
	}
	e.waitNomad("the timed-out run is stopped", func() bool { return stopped(e.nomadJob(r.DispatchedJobID)) })
	if j := e.nomadJob("web"); j != nil {
		t.Fatalf("Nomad has job web: %+v", j)
	}
}

// TestHooks_RevisionsAreSharedAndStoppedWhenUnused: deployments that freeze
// the same hook revision share one revision job, registered once; a revision
// is stopped once no active deployment needs it, and a change of the hook in
// git makes a new revision.
func TestHooks_RevisionsAreSharedAndStoppedWhenUnused(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl":    testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"))...),
		"api.nomad.hcl":    testutil.ServiceJobHCL("api", hkManaged(structs.PolicyApproval, testutil.WithMeta("nops_pre_hooks", "backup"))...),
		"backup.nomad.hcl": testutil.HookJobHCL("backup"),
	})
	web := e.s.WaitForDeployment("default", "web", structs.StateCompleted, hkWait)
	api := e.s.WaitForDeployment("default", "api", structs.StatePendingApproval, hkWait)
	rev := frozen(t, web, structs.PhasePre, 0).RevisionJobID
	if got := frozen(t, api, structs.PhasePre, 0).RevisionJobID; got != rev {
		t.Fatalf("api froze revision %s, web %s", got, rev)
	}
	// api waits for approval and needs the revision: it keeps running.
	e.cycles(2)
	if j := e.nomadJob(rev); j == nil || stopped(j) {
		t.Fatalf("revision %s stopped while api needs it: %+v", rev, j)
	}
	e.post("/v1/deployment/"+api.ID+"/approve", map[string]string{"comment": "go"})
	api = e.waitDeployment(api.ID, structs.StateCompleted)
	if v := e.registrations(rev); len(v) != 1 {
		t.Fatalf("revision %s registered %d times", rev, len(v))
	}
	if kids := e.children(rev); len(kids) != 2 || kids[0].ID != hookRun(t, web, structs.PhasePre, 0).DispatchedJobID ||
		kids[1].ID != hookRun(t, api, structs.PhasePre, 0).DispatchedJobID {
		t.Fatalf("children of %s: %+v", rev, kids)
	}
	e.waitNomad("the unused revision is stopped", func() bool { return stopped(e.nomadJob(rev)) })

	// A new hook spec is a new revision; web changes too, so it drifts.
	e.commit("new backup hook", map[string]string{
		"backup.nomad.hcl": testutil.HookJobHCL("backup", testutil.WithEnv("TARGET", "s3")),
		"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"),
			testutil.WithEnv("RELEASE", "2"))...),
	})
	web2 := e.waitNew("web", web)
	web2 = e.waitDeployment(web2.ID, structs.StateCompleted)
	rev2 := frozen(t, web2, structs.PhasePre, 0).RevisionJobID
	if rev2 == rev {
		t.Fatalf("the changed hook kept revision %s", rev)
	}
	if j := e.nomadJob(rev2); j == nil || j.TaskGroups[0].Tasks[0].Env["TARGET"] != "s3" {
		t.Fatalf("revision %s in Nomad: %+v", rev2, j)
	}
	if kids := e.children(rev2); len(kids) != 1 {
		t.Fatalf("children of %s: %+v", rev2, kids)
	}
	e.waitNomad("the new revision is stopped once unused", func() bool { return stopped(e.nomadJob(rev2)) })
	if j := e.nomadJob(rev); !stopped(j) {
		t.Fatalf("old revision %s runs again: %+v", rev, j)
	}
	// api is in sync: the hook change alone creates no deployment for it.
	if n := e.count("api"); n != 1 {
		t.Fatalf("api has %d deployments", n)
	}
}

// TestHooks_MissingHookFailsAtDetection: a job that declares a hook no file
// declares gets a deployment that fails at once, naming the hook; adding the
// hook to git unblocks it.
func TestHooks_MissingHookFailsAtDetection(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"),
			testutil.WithMeta("nops_post_hooks", "nosuch"))...),
		"backup.nomad.hcl": testutil.HookJobHCL("backup"),
		// A service job with the hook role is not a valid hook.
		"nosuch.nomad.hcl": testutil.ServiceJobHCL("nosuch", testutil.WithMeta("nops_role", "hook")),
	})
	d := e.s.WaitForDeployment("default", "web", structs.StateFailed, hkWait)
	if !strings.Contains(d.Error, `post hook "nosuch"`) || !strings.Contains(d.Error, "not a valid hook") || len(d.HookRuns) != 0 {
		t.Fatalf("web: error %q runs %+v", d.Error, d.HookRuns)
	}
	e.wantEvents(d.ID, "drift detected", `post hook "nosuch"`)
	// A deployment created failed counts as a failure.
	if v, err := testutil.MetricValue(e.s.Metrics(), "nops_deployments_failed_total"); err != nil || v != 1 {
		t.Errorf("nops_deployments_failed_total = %v (%v), want 1", v, err)
	}
	if j := e.nomadJob("web"); j != nil {
		t.Fatal("Nomad has job web")
	}
	if kids := e.children(frozen(t, d, structs.PhasePre, 0).RevisionJobID); len(kids) != 0 {
		t.Fatalf("backup ran: %+v", kids)
	}
	st := e.s.WaitForJobStatus("default", "web", hkWait, func(st *structs.JobStatus) bool { return st.Blocked })
	if len(st.Errors) == 0 || !strings.Contains(strings.Join(st.Errors, "\n"), `"nosuch"`) {
		t.Fatalf("status errors: %q", st.Errors)
	}

	// The hook missing altogether: a new spec hash, a new failure.
	e.repo.Remove(hkDir + "/nosuch.nomad.hcl")
	e.repo.Commit("no nosuch hook")
	d2 := e.waitNew("web", d)
	d2 = e.waitDeployment(d2.ID, structs.StateFailed)
	if !strings.Contains(d2.Error, `post hook "nosuch" is not declared by any file in namespace default`) {
		t.Fatalf("web: %q", d2.Error)
	}
	e.cycles(2)
	if n := e.count("web"); n != 2 {
		t.Fatalf("web has %d deployments while blocked", n)
	}

	// Declaring it unblocks the job.
	e.commit("add the hook", map[string]string{"nosuch.nomad.hcl": testutil.HookJobHCL("nosuch")})
	d3 := e.waitNew("web", d2)
	d3 = e.waitDeployment(d3.ID, structs.StateCompleted)
	if len(d3.HookRuns) != 2 {
		t.Fatalf("runs: %+v", d3.HookRuns)
	}
}

// TestHooks_UndispatchableOrLostRun: a hook that requires dispatch meta Nops
// does not pass is not a valid hook (the deployment fails at detection,
// naming it), and a run that disappears from Nomad fails the deployment at
// once rather than at the timeout.
func TestHooks_UndispatchableOrLostRun(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl":      testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "needs-db"))...),
		"needs-db.nomad.hcl": testutil.HookJobHCL("needs-db", testutil.WithHookMeta([]string{"db_name", "nops_job"}, []string{"nops_phase"})),
		"api.nomad.hcl":      testutil.ServiceJobHCL("api", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "slow"))...),
		"slow.nomad.hcl":     testutil.HookJobHCL("slow", testutil.WithRunFor(time.Minute)),
	})
	web := e.s.WaitForDeployment("default", "web", structs.StateFailed, hkWait)
	if want := `pre hook "needs-db" (jobs/needs-db.nomad.hcl) is not a valid hook: it requires dispatch meta db_name, which Nops does not pass`; !strings.Contains(web.Error, want) || len(web.HookRuns) != 0 {
		t.Fatalf("web: error %q runs %+v, want %q", web.Error, web.HookRuns, want)
	}
	if stubs, _, err := e.nomad.Client.Jobs().PrefixList("needs-db"); err != nil || len(stubs) != 0 {
		t.Fatalf("the undispatchable hook reached Nomad: %+v %v", stubs, err)
	}

	api := catch(t, "slow hook running", func() []*structs.Deployment { return e.s.Deployments("default", "api") }, preHookRunning)
	run := hookRun(t, api, structs.PhasePre, 0)
	if _, _, err := e.nomad.Client.Jobs().Deregister(run.DispatchedJobID, true, nil); err != nil {
		t.Fatal(err)
	}
	api = e.waitDeployment(api.ID, structs.StateFailed)
	if !strings.Contains(api.Error, "pre hook slow failed: Nomad no longer has its run "+run.DispatchedJobID) {
		t.Fatalf("api: %q", api.Error)
	}
	if d := api.StateEnteredAt.Sub(run.StartedAt); d > 30*time.Second {
		t.Fatalf("the lost run failed after %s", d)
	}
}
