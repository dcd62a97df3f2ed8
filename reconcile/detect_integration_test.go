package reconcile_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestDetect_AutoPolicyCompletes: a job with policy auto is deployed as soon
// as it is seen, and Nomad runs version 0 with the count in git.
func TestDetect_AutoPolicyCompletes(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyAuto, testutil.WithCount(2)))
	head := e.repo.Head()

	d := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if !d.Registered || d.JobVersion != 0 || d.Policy != structs.PolicyAuto || d.Commit != head ||
		d.File != jobFile("web") || d.Repository != "main" || d.JobModifyIndex != 0 || d.Error != "" {
		t.Fatalf("deployment: %+v", d)
	}
	if !strings.Contains(d.Diff, `+ Job: "web"`) {
		t.Fatalf("diff does not show the new job: %q", d.Diff)
	}
	e.wantEvents(d.ID,
		ev{"", "detected", "drift detected at commit " + head[:8]},
		ev{"detected", "applying", "policy auto: starting; registering with check-and-set on modify index 0"},
		ev{"applying", "applying", "registered job version 0"},
		ev{"applying", "completed", "healthy"},
	)

	j := e.nomadJob("web")
	if *j.Version != 0 || groupCount(j) != 2 {
		t.Fatalf("Nomad job: version %d count %d, want version 0 count 2", *j.Version, groupCount(j))
	}
	if v := e.nomadVersions("web"); len(v) != 1 {
		t.Fatalf("Nomad keeps %d versions, want 1", len(v))
	}
	// Quiet cycles create nothing more.
	e.wantSettledOnce("web")
}

// TestDetect_ApprovalApproveCompletes: a job with policy approval waits for
// a person; approving it through the API deploys it.
func TestDetect_ApprovalApproveCompletes(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyApproval))
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	e.settle()
	if d := e.deployment(pending.ID); d.State != structs.StatePendingApproval {
		t.Fatalf("a waiting deployment moved on its own: %s", d.State)
	}
	e.nomadHasNoJob("web")
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncDrift })

	e.post("/v1/deployment/"+pending.ID+"/approve", map[string]string{"comment": "ship it"})
	d := e.waitDeployment(pending.ID, structs.StateCompleted)
	if len(d.Decisions) != 1 || d.Decisions[0].Kind != structs.DecisionApprove || d.Decisions[0].Actor != "tester" ||
		d.Decisions[0].Comment != "ship it" {
		t.Fatalf("decisions: %+v", d.Decisions)
	}
	events := e.wantEvents(d.ID,
		ev{"", "detected", "drift detected"},
		ev{"detected", "pending_approval", "waiting for approval"},
		ev{"pending_approval", "applying", "approved: ship it"},
		ev{"applying", "applying", "registered job version 0"},
		ev{"applying", "completed", "healthy"},
	)
	for _, ev := range events {
		if ev.To == "applying" && ev.From == "pending_approval" && ev.Actor != "tester" {
			t.Fatalf("approve event actor %q, want tester", ev.Actor)
		}
	}
	if j := e.nomadJob("web"); *j.Version != 0 || groupCount(j) != 1 {
		t.Fatalf("Nomad job: version %d count %d", *j.Version, groupCount(j))
	}
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
}

// TestDetect_RejectBlocksUntilSpecChanges: a rejected deployment blocks the
// job: more cycles create nothing; a commit that changes the spec unblocks
// it.
func TestDetect_RejectBlocksUntilSpecChanges(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyApproval))
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	e.post("/v1/deployment/"+pending.ID+"/reject", map[string]string{"reason": "not today"})
	d := e.waitDeployment(pending.ID, structs.StateRejected)
	if len(d.Decisions) != 1 || d.Decisions[0].Kind != structs.DecisionReject || d.Decisions[0].Comment != "not today" {
		t.Fatalf("decisions: %+v", d.Decisions)
	}
	e.wantEvents(d.ID, ev{"detected", "pending_approval", ""}, ev{"pending_approval", "rejected", "rejected: not today"})

	st := e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Blocked })
	if st.Sync != structs.SyncDrift {
		t.Fatalf("status: %+v", st)
	}
	var detail struct {
		Block *structs.Block `json:"block"`
	}
	e.s.Do("GET", "/v1/job/default/web", nil, &detail)
	if detail.Block == nil || detail.Block.DeploymentID != d.ID || detail.Block.AfterRegister {
		t.Fatalf("job detail block: %+v", detail.Block)
	}

	// Cycles that started after the rejection create nothing.
	e.settle()
	e.wantDeployments("web", structs.StateRejected)
	e.nomadHasNoJob("web")

	// A commit that does not touch the job keeps the block.
	c := e.commit("docs", map[string]string{lcRepoPath + "/README.md": "jobs\n"})
	e.waitHead(c)
	e.settle()
	e.wantDeployments("web", structs.StateRejected)

	// A new spec unblocks.
	c = e.commit("two replicas", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithCount(2))...),
	})
	next := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if next.ID == d.ID || next.Commit != c || next.SpecHash == d.SpecHash {
		t.Fatalf("new deployment %+v after block of %s", next, d.ID)
	}
	e.waitStatus("web", func(s *structs.JobStatus) bool { return !s.Blocked })
	e.wantDeployments("web", structs.StatePendingApproval, structs.StateRejected)
}

// TestDetect_PolicyNoneReportsDrift: policy none shows the drift and creates
// no deployment.
func TestDetect_PolicyNoneReportsDrift(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyNone))
	st := e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncDrift })
	if st.Policy != structs.PolicyNone || st.DriftSummary == "" || st.Blocked || st.File != jobFile("web") {
		t.Fatalf("status: %+v", st)
	}
	if !strings.HasPrefix(st.DriftSummary, "added") {
		t.Fatalf("drift summary %q, want an added job", st.DriftSummary)
	}
	var jobs []*structs.JobStatus
	e.s.Do("GET", "/v1/jobs?sync=drift", nil, &jobs)
	if len(jobs) != 1 || jobs[0].JobID != "web" {
		t.Fatalf("GET /v1/jobs?sync=drift: %+v", jobs)
	}
	e.settle()
	e.wantDeployments("web")
	e.nomadHasNoJob("web")
}

// TestDetect_NewCommitSupersedesOnlyOnSpecChange: a commit that changes the
// job's spec supersedes its waiting deployment; one that does not touch the
// job leaves it waiting.
func TestDetect_NewCommitSupersedesOnlyOnSpecChange(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyApproval))
	first := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)

	// Another file changes: web's spec hash does not.
	c := e.commit("another job", map[string]string{
		jobFile("other"):          testutil.ServiceJobHCL("other"), // not managed
		lcRepoPath + "/README.md": "hello\n",
	})
	e.waitHead(c)
	e.settle()
	e.wantDeployments("web", structs.StatePendingApproval)
	if d := e.deployment(first.ID); d.State != structs.StatePendingApproval {
		t.Fatalf("first deployment is %s after an unrelated commit", d.State)
	}

	// web changes: the waiting deployment is superseded by a new one.
	c = e.commit("three replicas", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithCount(3))...),
	})
	old := e.waitDeployment(first.ID, structs.StateSuperseded)
	e.wantEvents(old.ID, ev{"pending_approval", "superseded", "a newer spec in git replaces it"})
	next := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if next.ID == first.ID || next.Commit != c || next.SpecHash == first.SpecHash {
		t.Fatalf("new deployment: %+v", next)
	}
	e.wantDeployments("web", structs.StatePendingApproval, structs.StateSuperseded)
	e.nomadHasNoJob("web")
}

// TestDetect_LiveChangeSupersedesWaiting: a change of the live job in Nomad
// supersedes a waiting deployment, and a new one is made against the new
// live job.
func TestDetect_LiveChangeSupersedesWaiting(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyApproval))
	first := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if first.JobModifyIndex != 0 {
		t.Fatalf("a new job's deployment records modify index %d", first.JobModifyIndex)
	}

	// Someone runs another version of the job by hand.
	reg := e.nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web", testutil.WithCount(3)))
	e.s.Trigger()
	old := e.waitDeployment(first.ID, structs.StateSuperseded)
	e.wantEvents(old.ID, ev{"pending_approval", "superseded", "the live job changed since detection"})
	next := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if next.ID == first.ID || next.JobModifyIndex != reg.JobModifyIndex || next.SpecHash != first.SpecHash {
		t.Fatalf("new deployment: %+v (hand register at modify index %d)", next, reg.JobModifyIndex)
	}
	// Nops changed nothing in Nomad.
	if v := e.nomadVersions("web"); len(v) != 1 || groupCount(v[0]) != 3 {
		t.Fatalf("Nomad versions: %d, count %d", len(v), groupCount(v[0]))
	}
}

// TestDetect_WaitingCompletesWhenSyncedByHand: a deployment waiting for
// approval completes when someone runs the git spec by hand.
func TestDetect_WaitingCompletesWhenSyncedByHand(t *testing.T) {
	t.Parallel()
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyApproval)...)
	e := lcStart(t, map[string]string{jobFile("web"): hcl})
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)

	e.nomad.RegisterJobHCL(t, hcl)
	e.s.Trigger()
	d := e.waitDeployment(pending.ID, structs.StateCompleted)
	if d.Registered {
		t.Fatalf("Nops registered a job someone else synced: %+v", d)
	}
	e.wantEvents(d.ID, ev{"pending_approval", "completed", "the job is already in sync"})
	// The version registered by hand is the only one.
	e.wantSettledOnce("web")
}

// TestDetect_DuplicateDeclarationsIgnored: two files declaring one job are
// both ignored, and the job's status names both.
func TestDetect_DuplicateDeclarationsIgnored(t *testing.T) {
	t.Parallel()
	e := lcStart(t, map[string]string{
		lcRepoPath + "/a.nomad.hcl":     testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		lcRepoPath + "/b/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
		jobFile("api"):                  testutil.ServiceJobHCL("api", managed(structs.PolicyAuto)...),
	})
	// The other job is deployed: the conflict stops only its own job.
	e.s.WaitForDeployment("default", "api", structs.StateCompleted, lcWait)
	st := e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncError })
	msg := strings.Join(st.Errors, "\n")
	for _, want := range []string{"jobs/a.nomad.hcl", "jobs/b/web.nomad.hcl", "more than one file"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("status errors %q do not name %q", msg, want)
		}
	}
	e.settle()
	e.wantDeployments("web")
	e.nomadHasNoJob("web")

	// Removing one declaration ends the conflict.
	e.commit("one web", nil, lcRepoPath+"/b")
	d := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if d.File != "jobs/a.nomad.hcl" {
		t.Fatalf("deployment file %q", d.File)
	}
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync && len(s.Errors) == 0 })
}

// TestDetect_ParseErrorMakesNoOrphans: while a file fails to parse, no job
// is treated as removed; once everything parses, a job removed from git is
// an orphan that keeps running.
func TestDetect_ParseErrorMakesNoOrphans(t *testing.T) {
	t.Parallel()
	webHCL := testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...)
	e := lcStart(t, map[string]string{
		jobFile("web"): webHCL,
		jobFile("api"): testutil.ServiceJobHCL("api", managed(structs.PolicyAuto)...),
	})
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	e.s.WaitForDeployment("default", "api", structs.StateCompleted, lcWait)

	// api's file breaks and web's file goes in the same commit.
	c := e.commit("break api, drop web", map[string]string{jobFile("api"): "job \"api\" {\n  this is not HCL\n"}, jobFile("web"))
	e.waitHead(c)
	e.settle()
	r := e.repoStatus()
	if len(r.ParseErrors) != 1 || !strings.Contains(r.ParseErrors[0], jobFile("api")) {
		t.Fatalf("repository parse errors: %q", r.ParseErrors)
	}
	var orphans []*structs.JobStatus
	e.s.Do("GET", "/v1/orphans", nil, &orphans)
	if len(orphans) != 0 {
		t.Fatalf("orphans while a file fails to parse: %+v", orphans)
	}
	for _, id := range []string{"web", "api"} {
		if st := e.jobStatus(id); st == nil || st.Orphan {
			t.Fatalf("status of %s while a file fails to parse: %+v", id, st)
		}
	}

	// api parses again; web is still gone: web is an orphan.
	c = e.commit("fix api", map[string]string{jobFile("api"): testutil.ServiceJobHCL("api", managed(structs.PolicyAuto)...)})
	e.waitHead(c)
	e.waitFor(func() (bool, string) {
		orphans = nil
		e.s.Do("GET", "/v1/orphans", nil, &orphans)
		return len(orphans) == 1 && orphans[0].JobID == "web", "orphans: " + orphanNames(orphans)
	})
	if r := e.repoStatus(); len(r.ParseErrors) != 0 {
		t.Fatalf("parse errors after the fix: %q", r.ParseErrors)
	}
	var jobs []*structs.JobStatus
	e.s.Do("GET", "/v1/jobs", nil, &jobs)
	for _, j := range jobs {
		if j.JobID == "web" {
			t.Fatalf("/v1/jobs lists the orphan web: %+v", j)
		}
	}
	e.settle()
	// Nops never stops an orphan.
	j := e.nomadJob("web")
	if *j.Stop || *j.Status == "dead" {
		t.Fatalf("orphan web in Nomad: stop=%v status=%s", *j.Stop, *j.Status)
	}
	e.wantDeployments("web", structs.StateCompleted)
	e.wantDeployments("api", structs.StateCompleted)
}

// TestDetect_VarsFileHonoured: the variables file beside a job file is
// passed to Nomad's parser.
func TestDetect_VarsFileHonoured(t *testing.T) {
	t.Parallel()
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("color", "VAR_COLOR"))...)
	hcl = strings.Replace(hcl, "count = 1", "count = var.replicas", 1)
	hcl = strings.Replace(hcl, `"VAR_COLOR"`, "var.color", 1)
	hcl = "variable \"replicas\" {\n  type    = number\n  default = 1\n}\n\nvariable \"color\" {\n  type    = string\n  default = \"grey\"\n}\n\n" + hcl
	e := lcStart(t, map[string]string{
		jobFile("web"):               hcl,
		lcRepoPath + "/web.vars.hcl": "replicas = 2\ncolor    = \"blue\"\n",
	})
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	j := e.nomadJob("web")
	if groupCount(j) != 2 || j.Meta["color"] != "blue" {
		t.Fatalf("Nomad job: count %d color %q, want 2 and blue from web.vars.hcl", groupCount(j), j.Meta["color"])
	}

	// A change of the variables file alone is a change of the job.
	e.commit("green", map[string]string{lcRepoPath + "/web.vars.hcl": "replicas = 2\ncolor    = \"green\"\n"})
	e.waitFor(func() (bool, string) {
		j = e.nomadJob("web")
		return j.Meta["color"] == "green", "color is " + j.Meta["color"]
	})
	d := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if d.JobVersion != 1 {
		t.Fatalf("deployment of the vars change: %+v", d)
	}
	e.wantDeployments("web", structs.StateCompleted, structs.StateCompleted)
}

// TestDetect_ScalingGroupKeepsLiveCount: a group with a scaling block keeps
// the count an autoscaler (here a person) set in Nomad.
func TestDetect_ScalingGroupKeepsLiveCount(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyAuto, testutil.WithScaling(1, 5)))
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })

	count, reason := 3, "load"
	if _, _, err := e.nomad.Client.Jobs().Scale("web", "app", &count, reason, false, nil, nil); err != nil {
		t.Fatalf("scale: %v", err)
	}
	e.waitFor(func() (bool, string) {
		j := e.nomadJob("web")
		return groupCount(j) == 3, "count is not 3 yet"
	})
	e.settle()
	if st := e.jobStatus("web"); st.Sync != structs.SyncInSync {
		t.Fatalf("status after scaling by hand: %+v", st)
	}
	e.wantDeployments("web", structs.StateCompleted)

	// A change in git deploys, and leaves the count alone.
	e.commit("meta", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithScaling(1, 5), testutil.WithMeta("team", "blue"))...),
	})
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf("web")
		return len(l) == 2 && l[0].State == structs.StateCompleted, "second deployment not completed"
	})
	j := e.nomadJob("web")
	if groupCount(j) != 3 || j.Meta["team"] != "blue" {
		t.Fatalf("Nomad job after deploy: count %d team %q, want 3 and blue", groupCount(j), j.Meta["team"])
	}
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
}

func orphanNames(l []*structs.JobStatus) string {
	var n []string
	for _, s := range l {
		n = append(n, s.JobID)
	}
	return strings.Join(n, ",")
}

// TestDetect_ParseOutageIsNotRemembered: a parse that fails because Nomad
// did not answer (here a proxy in front of the real Nomad refuses parses
// for a while) says nothing about the file: once Nomad answers again, the
// same file parses and deploys, with no new commit.
func TestDetect_ParseOutageIsNotRemembered(t *testing.T) {
	t.Parallel()
	e := lcWorld(t, map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	target, err := url.Parse(e.nomad.Addr)
	if err != nil {
		t.Fatal(err)
	}
	var refusing atomic.Bool
	var refused atomic.Int64
	refusing.Store(true)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refusing.Load() && r.URL.Path == "/v1/jobs/parse" {
			refused.Add(1)
			http.Error(w, "no cluster leader", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e.serve(e.repo.URL(), nopstest.WithNomad(front.URL))

	e.waitFor(func() (bool, string) { return refused.Load() >= 3, "Nops has not tried to parse three times yet" })
	e.wantDeployments("web")

	refusing.Store(false)
	d := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if d.Commit != e.repo.Head() {
		t.Fatalf("deployment: %+v", d)
	}
	if r := e.repoStatus(); len(r.ParseErrors) != 0 {
		t.Fatalf("parse errors after Nomad came back: %q", r.ParseErrors)
	}
}
