package reconcile_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// webV and apiV return the job files of web (policy auto) and api (policy
// approval) at a release: a new release is drift.
func webV(release string) map[string]string {
	return map[string]string{"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithEnv("RELEASE", release))...)}
}

func apiV(release string) map[string]string {
	return map[string]string{"api.nomad.hcl": testutil.ServiceJobHCL("api", hkManaged(structs.PolicyApproval, testutil.WithEnv("RELEASE", release))...)}
}

func both(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// hkStartWebAPI starts a world with web and api at release 1, with opts,
// and waits until web is deployed and api waits for approval.
func hkStartWebAPI(t *testing.T, opts ...nopstest.Option) (e *hkEnv, web, api *structs.Deployment) {
	t.Helper()
	e = hkStart(t, both(webV("1"), apiV("1")), opts...)
	web = e.s.WaitForDeployment("default", "web", structs.StateCompleted, hkWait)
	api = e.s.WaitForDeployment("default", "api", structs.StatePendingApproval, hkWait)
	return e, web, api
}

// windowClock returns the day of the sync window scenarios, and a clock at
// 10:00 that day.
func windowClock() (time.Time, *nopstest.Clock) {
	day := time.Date(2030, time.March, 4, 0, 0, 0, 0, time.UTC)
	return day, nopstest.NewClock(day.Add(10 * time.Hour))
}

// approve approves a deployment and returns the status code and body.
func (e *hkEnv) approve(id string) (int, string) {
	e.t.Helper()
	return e.s.Do("POST", "/v1/deployment/"+id+"/approve", map[string]string{"comment": "go"}, nil)
}

// held waits until a job's status shows drift and a hold containing want,
// and checks that it has n deployments.
func (e *hkEnv) held(job, want string, n int) {
	e.t.Helper()
	e.s.WaitForJobStatus("default", job, hkWait, func(st *structs.JobStatus) bool {
		return st.Sync == structs.SyncDrift && strings.Contains(st.Hold, want)
	})
	e.cycles(1)
	if got := e.count(job); got != n {
		e.t.Fatalf("job %s has %d deployments while held (%s), want %d", job, got, want, n)
	}
}

// TestHolds_PausesBlockCreationAndApproval: a pause of a job, and a pause of
// every job, supersede a waiting deployment, create none while drift shows,
// and refuse approvals; a resume lets detection create again.
func TestHolds_PausesBlockCreationAndApproval(t *testing.T) {
	t.Parallel()
	e, web, api := hkStartWebAPI(t)

	// A job pause: api's waiting deployment goes, and cannot be approved.
	e.post("/v1/job/default/api/pause", map[string]string{"reason": "db maintenance"})
	if code, body := e.approve(api.ID); code != http.StatusConflict ||
		!(strings.Contains(body, "is paused by tester (db maintenance)") || strings.Contains(body, "is superseded")) {
		t.Fatalf("approve while paused: %d %s", code, body)
	}
	api = e.waitDeployment(api.ID, structs.StateSuperseded)
	e.wantEvents(api.ID, "waiting for approval", "the job is held: paused by tester: db maintenance")
	e.held("api", "paused by tester: db maintenance", 1)

	// web paused: a change shows as drift, with no deployment.
	e.post("/v1/job/default/web/pause", map[string]string{"reason": "web freeze"})
	e.commit("web 2", webV("2"), "web")
	e.held("web", "paused by tester: web freeze", 1)
	if v := e.nomadVersions("web"); len(v) != 1 {
		t.Fatalf("web has %d versions in Nomad", len(v))
	}

	// Resuming api: detection creates again.
	e.post("/v1/job/default/api/resume", map[string]string{"reason": "done"})
	api2 := e.waitNew("api", api)
	api2 = e.waitDeployment(api2.ID, structs.StatePendingApproval)

	// A pause of every job holds both, whatever their own pauses.
	e.post("/v1/pause", map[string]string{"reason": "change freeze"})
	if code, body := e.approve(api2.ID); code != http.StatusConflict ||
		!(strings.Contains(body, "every job is paused by tester (change freeze)") || strings.Contains(body, "is superseded")) {
		t.Fatalf("approve while every job is paused: %d %s", code, body)
	}
	api2 = e.waitDeployment(api2.ID, structs.StateSuperseded)
	e.wantEvents(api2.ID, "the job is held: paused (every job) by tester: change freeze")
	e.post("/v1/job/default/web/resume", map[string]string{"reason": "web thaw"})
	e.held("web", "paused (every job) by tester: change freeze", 1)
	e.held("api", "paused (every job) by tester: change freeze", 2)

	// Resuming every job: both deploy.
	e.post("/v1/resume", map[string]string{"reason": "thaw"})
	web2 := e.waitNew("web", web)
	e.waitDeployment(web2.ID, structs.StateCompleted)
	if v := e.nomadJob("web"); *v.Version != 1 || v.TaskGroups[0].Tasks[0].Env["RELEASE"] != "2" {
		t.Fatalf("web in Nomad: version %d env %v", *v.Version, v.TaskGroups[0].Tasks[0].Env)
	}
	api3 := e.waitNew("api", api2)
	e.waitDeployment(api3.ID, structs.StatePendingApproval)
	if code, body := e.approve(api3.ID); code != 200 {
		t.Fatalf("approve after resume: %d %s", code, body)
	}
	e.waitDeployment(api3.ID, structs.StateCompleted)

	var pauses []*structs.Pause
	e.s.Do("GET", "/v1/pauses", nil, &pauses)
	if len(pauses) != 0 {
		t.Fatalf("pauses left: %+v", pauses)
	}
	var events []*structs.Event
	e.s.Do("GET", "/v1/events?kind="+structs.EventKindPause, nil, &events)
	var log []string
	for _, ev := range events {
		log = append(log, ev.Object+" "+ev.To+" "+ev.Message)
	}
	want := []string{"default/api paused db maintenance", "default/web paused web freeze", "default/api resumed done",
		"* paused change freeze", "default/web resumed web thaw", "* resumed thaw"}
	if strings.Join(log, "|") != strings.Join(want, "|") {
		t.Fatalf("pause events:\n%s\nwant:\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
}

// TestHolds_PausedApprovalIsRefused checks the approve route against a real
// server whose deployment waits in pending_approval and no loop moves it: a
// pause of the job, then of every job, answers 409 naming the pause; after
// the resumes the approval goes through.
func TestHolds_PausedApprovalIsRefused(t *testing.T) {
	t.Parallel()
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	d := &structs.Deployment{ID: uuid.NewString(), Namespace: "default", JobID: "api", Policy: structs.PolicyApproval,
		State: structs.StateDetected, SpecHash: "h1", Commit: "c1"}
	now := time.Now().UTC()
	if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "nops"}, Deployment: d}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "nops"}, ID: d.ID, From: structs.StateDetected, To: structs.StatePendingApproval}); err != nil {
		t.Fatal(err)
	}
	approve := func() (int, string) {
		return s.Do("POST", "/v1/deployment/"+d.ID+"/approve", map[string]string{"comment": "go"}, nil)
	}
	post := func(path, reason string) {
		if code, body := s.Do("POST", path, map[string]string{"reason": reason}, nil); code != 200 {
			t.Fatalf("POST %s: %d %s", path, code, body)
		}
	}
	post("/v1/job/default/api/pause", "migration")
	if code, body := approve(); code != http.StatusConflict || !strings.Contains(body, "job default/api is paused by tester (migration)") {
		t.Fatalf("approve while the job is paused: %d %s", code, body)
	}
	post("/v1/pause", "freeze")
	post("/v1/job/default/api/resume", "migration done")
	if code, body := approve(); code != http.StatusConflict || !strings.Contains(body, "every job is paused by tester (freeze)") {
		t.Fatalf("approve while every job is paused: %d %s", code, body)
	}
	post("/v1/resume", "thaw")
	var got structs.Deployment
	if code, body := s.Do("POST", "/v1/deployment/"+d.ID+"/approve", map[string]string{"comment": "go"}, &got); code != 200 {
		t.Fatalf("approve after resume: %d %s", code, body)
	}
	if got.State != structs.StateApplying || len(got.Decisions) != 1 || got.Decisions[0].Actor != "tester" {
		t.Fatalf("approved deployment: %+v", got)
	}
}

// putWindow creates or replaces a sync window.
func (e *hkEnv) putWindow(name string, spec map[string]any) {
	e.t.Helper()
	if code, body := e.s.Do("PUT", "/v1/window/"+name, spec, nil); code != 200 {
		e.t.Fatalf("PUT window %s: %d %s", name, code, body)
	}
}

// at moves the clock and runs detection and apply.
func (e *hkEnv) at(clock *nopstest.Clock, when time.Time) {
	clock.Set(when)
	e.s.Trigger()
}

// TestHolds_SyncWindows moves the clock across a deny window and an allow
// window: while a job's window is closed its drift shows, no deployment is
// created and a waiting one is superseded; once it opens, detection creates
// the deployment.
func TestHolds_SyncWindows(t *testing.T) {
	t.Parallel()
	day, clock := windowClock()
	e, web, api := hkStartWebAPI(t, nopstest.WithClock(clock))

	// A deny window at lunch, for every job; at 10:00 it is not active.
	e.putWindow("lunch", map[string]any{"kind": "deny", "schedule": "0 12 * * *", "duration": "1h"})
	e.cycles(1)
	if d := e.deployment(api.ID); d.State != structs.StatePendingApproval {
		t.Fatalf("api before the window: %s", d.State)
	}

	// 12:00: the window closes the jobs.
	e.at(clock, day.Add(12*time.Hour))
	api = e.waitDeployment(api.ID, structs.StateSuperseded)
	e.wantEvents(api.ID, "the job is held: sync window: deny window lunch is active")
	e.commit("web 2", webV("2"), "web")
	e.held("web", "sync window: deny window lunch is active", 1)
	e.held("api", "sync window: deny window lunch is active", 1)

	// 12:59:59 is still inside; 13:00 opens: web deploys, api waits again.
	e.at(clock, day.Add(13*time.Hour-time.Second))
	e.held("web", "deny window lunch", 1)
	e.at(clock, day.Add(13*time.Hour))
	web2 := e.waitNew("web", web)
	e.waitDeployment(web2.ID, structs.StateCompleted)
	api2 := e.waitNew("api", api)
	api2 = e.waitDeployment(api2.ID, structs.StatePendingApproval)
	// The cycle that created api's deployment may have run while web's
	// was still deploying: web's status shows in sync once a cycle after
	// its completion has recorded it.
	e.s.WaitForJobStatus("default", "web", hkWait, func(st *structs.JobStatus) bool {
		return st.Hold == "" && st.Sync == structs.SyncInSync
	})

	// An allow window for api* only, 09:00-10:00 each day: at 13:00 api is
	// outside it, web is not concerned.
	e.putWindow("mornings", map[string]any{"kind": "allow", "schedule": "0 9 * * *", "duration": "1h", "jobs": []string{"api*"},
		"timezone": "UTC"})
	api2 = e.waitDeployment(api2.ID, structs.StateSuperseded)
	e.wantEvents(api2.ID, "the job is held: sync window: outside allow window mornings")
	e.held("api", "outside allow window mornings", 2)
	e.commit("web 3", webV("3"), "web")
	web3 := e.waitNew("web", web2)
	e.waitDeployment(web3.ID, structs.StateCompleted)

	// Next morning at 09:00 the allow window opens: api waits for approval,
	// and runs once approved.
	e.at(clock, day.Add(33*time.Hour))
	api3 := e.waitNew("api", api2)
	api3 = e.waitDeployment(api3.ID, structs.StatePendingApproval)
	if code, body := e.approve(api3.ID); code != 200 {
		t.Fatalf("approve in the allow window: %d %s", code, body)
	}
	e.waitDeployment(api3.ID, structs.StateCompleted)
	if v := e.nomadJob("api"); v.TaskGroups[0].Tasks[0].Env["RELEASE"] != "1" || *v.Version != 0 {
		t.Fatalf("api in Nomad: %+v", v.TaskGroups[0].Tasks[0].Env)
	}
}

// TestHolds_DeployNow: deploy now lifts a closed window for exactly one
// deployment, which is not superseded by that window and can be approved
// while it stays closed; the next drift in the closed window waits; deploy
// now does not lift a pause; a deploy now made while no window is closed is
// used by the next deployment all the same, so it cannot lift a later
// window.
func TestHolds_DeployNow(t *testing.T) {
	t.Parallel()
	day, clock := windowClock()
	e, web, api := hkStartWebAPI(t, nopstest.WithClock(clock))
	e.approve(api.ID)
	api = e.waitDeployment(api.ID, structs.StateCompleted)

	// No window yet: the request is stored, and the next deployment uses it.
	e.post("/v1/job/default/web/deploy-now", map[string]string{})
	e.commit("web 2", webV("2"), "web")
	web2 := e.waitNew("web", web)
	if !web2.LiftedWindow {
		t.Fatalf("the next deployment did not use the deploy now: %+v", web2)
	}
	e.waitDeployment(web2.ID, structs.StateCompleted)

	e.putWindow("freeze", map[string]any{"kind": "deny", "schedule": "0 12 * * *", "duration": "6h", "timezone": "UTC"})
	e.at(clock, day.Add(12*time.Hour))
	e.commit("web 3", webV("3"), "web")
	e.held("web", "deny window freeze", 2)

	// Deploy now: exactly one deployment, recorded as lifting the window.
	e.post("/v1/job/default/web/deploy-now", map[string]string{})
	web3 := e.waitNew("web", web2)
	if !web3.LiftedWindow || web3.LiftedBy != "tester" {
		t.Fatalf("web deployment: lifted %v by %q", web3.LiftedWindow, web3.LiftedBy)
	}
	e.wantEvents(web3.ID, "deploy now by tester lifts the sync window")
	e.waitDeployment(web3.ID, structs.StateCompleted)
	if lift, err := e.s.State().Lift("", "default", "web"); err != nil || lift != nil {
		t.Fatalf("lift left: %+v %v", lift, err)
	}

	// The next drift, with the window still closed, waits.
	e.at(clock, day.Add(12*time.Hour+30*time.Minute))
	e.commit("web 4", webV("4"), "web")
	e.held("web", "deny window freeze", 3)

	// An approval job: the lifted deployment waits for approval through the
	// window's checks, and a window does not refuse an approval.
	e.commit("api 2", apiV("2"), "api")
	e.held("api", "deny window freeze", 1)
	e.post("/v1/job/default/api/deploy-now", map[string]string{})
	api2 := e.waitNew("api", api)
	api2 = e.waitDeployment(api2.ID, structs.StatePendingApproval)
	e.cycles(2)
	if d := e.deployment(api2.ID); d.State != structs.StatePendingApproval || !d.LiftedWindow {
		t.Fatalf("lifted api deployment: %s lifted %v", d.State, d.LiftedWindow)
	}
	if code, body := e.approve(api2.ID); code != 200 {
		t.Fatalf("approve in a closed window: %d %s", code, body)
	}
	e.waitDeployment(api2.ID, structs.StateCompleted)

	// Deploy now does not lift a pause: the request waits for the resume.
	e.post("/v1/job/default/web/pause", map[string]string{"reason": "incident"})
	e.post("/v1/job/default/web/deploy-now", map[string]string{})
	e.held("web", "paused by tester: incident", 3)
	e.post("/v1/job/default/web/resume", map[string]string{"reason": "fixed"})
	web4 := e.waitNew("web", web3)
	if !web4.LiftedWindow {
		t.Fatalf("web deployment after the resume did not use the stored deploy now: %+v", web4)
	}
	e.waitDeployment(web4.ID, structs.StateCompleted)
	if v := e.nomadJob("web"); v.TaskGroups[0].Tasks[0].Env["RELEASE"] != "4" {
		t.Fatalf("web in Nomad: %v", v.TaskGroups[0].Tasks[0].Env)
	}
}

// TestHolds_RunningDeploymentFinishes: a hold stops only the start of a
// deployment: one already in its pre-hooks when every job is paused and a
// deny window closes runs to its end.
func TestHolds_RunningDeploymentFinishes(t *testing.T) {
	t.Parallel()
	_, clock := windowClock()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl":    testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"))...),
		"backup.nomad.hcl": testutil.HookJobHCL("backup", testutil.WithRunFor(3*time.Second)),
	}, nopstest.WithClock(clock))
	d := catch(t, "pre-hook running", func() []*structs.Deployment { return e.s.Deployments("default", "web") }, preHookRunning)
	e.post("/v1/pause", map[string]string{"reason": "freeze"})
	e.putWindow("now", map[string]any{"kind": "deny", "schedule": "0 10 * * *", "duration": "1h"})
	e.s.Trigger()
	e.waitDeployment(d.ID, structs.StateCompleted)
	if st := e.status("web"); !strings.Contains(st.Hold, "paused (every job)") || st.Sync != structs.SyncInSync {
		t.Fatalf("web status: %+v", st)
	}
	if v := e.registrations("web"); len(v) != 1 {
		t.Fatalf("web registered %d times", len(v))
	}
}
