package reconcile_test

import (
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestApply_FailedAfterRegisterStaysBlocked: a job whose new version fails
// in Nomad fails the deployment after its register; the block survives a
// change of the live job (no apply-and-revert loop); a person's retry makes
// a new deployment that follows the policy.
func TestApply_FailedAfterRegisterStaysBlocked(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyApproval, testutil.WithFailure()))
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	e.post("/v1/deployment/"+pending.ID+"/approve", nil)
	failed := e.waitDeployment(pending.ID, structs.StateFailed)
	if !failed.Registered || !strings.Contains(failed.Error, "not healthy") || failed.NomadDeploymentID == "" {
		t.Fatalf("failed deployment: registered=%v error=%q nomad deployment=%q", failed.Registered, failed.Error, failed.NomadDeploymentID)
	}
	if v, err := testutil.MetricValue(e.s.Metrics(), "nops_deployments_failed_total"); err != nil || v != 1 {
		t.Errorf("nops_deployments_failed_total = %v (%v), want 1", v, err)
	}
	e.wantEvents(failed.ID,
		ev{"pending_approval", "applying", "approved"},
		ev{"applying", "applying", "registered job version 0"},
		ev{"applying", "failed", "not healthy"},
	)
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Blocked })
	var detail struct {
		Block *structs.Block `json:"block"`
	}
	e.s.Do("GET", "/v1/job/default/web", nil, &detail)
	if detail.Block == nil || !detail.Block.AfterRegister || detail.Block.DeploymentID != failed.ID {
		t.Fatalf("block: %+v", detail.Block)
	}

	// Someone runs another spec by hand: the job stays blocked.
	reg := e.nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web", testutil.WithCount(2)))
	e.settle()
	e.wantDeployments("web", structs.StateFailed)
	st := e.jobStatus("web")
	if !st.Blocked || st.Sync != structs.SyncDrift || st.LiveModifyIndex != reg.JobModifyIndex {
		t.Fatalf("status after a live change: %+v (hand register at %d)", st, reg.JobModifyIndex)
	}

	// A retry makes a new deployment, which waits for approval.
	e.post("/v1/job/default/web/retry", nil)
	next := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if next.ID == failed.ID || next.JobModifyIndex != reg.JobModifyIndex || next.SkipRegister {
		t.Fatalf("deployment after retry: %+v", next)
	}
	e.wantEvents("default/web", ev{"blocked", "retry", "retry after deployment " + failed.ID})
	e.wantDeployments("web", structs.StatePendingApproval, structs.StateFailed)
	e.waitStatus("web", func(s *structs.JobStatus) bool { return !s.Blocked })
	if v := e.nomadVersions("web"); len(v) != 2 || groupCount(v[0]) != 2 {
		t.Fatalf("Nomad versions: %d", len(v))
	}
}

// TestApply_RetryOfSyncedJobSkipsRegister: a deployment that timed out after
// its register leaves a job that matches git; its retry registers nothing,
// waits for health and completes.
func TestApply_RetryOfSyncedJobSkipsRegister(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyAuto, testutil.WithMeta("nops_apply_timeout", "1s")))
	failed := e.s.WaitForDeployment("default", "web", structs.StateFailed, lcWait)
	if !failed.Registered || !strings.Contains(failed.Error, "apply timeout") {
		t.Fatalf("failed deployment: registered=%v error=%q", failed.Registered, failed.Error)
	}
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Blocked && s.Sync == structs.SyncInSync })
	// Nomad finishes its rollout anyway.
	e.waitFor(func() (bool, string) {
		d, _, err := e.nomad.Client.Jobs().LatestDeployment("web", nil)
		if err != nil || d == nil {
			return false, "no Nomad deployment"
		}
		return d.Status == nomadapi.DeploymentStatusSuccessful, "Nomad deployment is " + d.Status
	})
	before := e.nomadVersions("web")

	e.post("/v1/job/default/web/retry", nil)
	next := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if next.ID == failed.ID || !next.SkipRegister || next.NomadEvalID != "" || next.JobVersion != 0 {
		t.Fatalf("deployment after retry: %+v", next)
	}
	e.wantEvents(next.ID,
		ev{"", "detected", "retry of a job already in sync"},
		ev{"detected", "applying", "policy auto"},
		ev{"applying", "applying", "the live job already matches git (version 0): waiting for health"},
		ev{"applying", "completed", "healthy"},
	)
	for _, got := range e.s.Events(next.ID) {
		if strings.Contains(got.Message, "registering") || strings.Contains(got.Message, "registered job version") {
			t.Fatalf("the retry registered: %q", got.Message)
		}
	}
	after := e.nomadVersions("web")
	if len(after) != len(before) || *after[0].Version != *before[0].Version || *after[0].JobModifyIndex != *before[0].JobModifyIndex {
		t.Fatalf("Nomad job versions changed: %d (version %d) -> %d (version %d)", len(before), *before[0].Version, len(after), *after[0].Version)
	}
	e.waitStatus("web", func(s *structs.JobStatus) bool { return !s.Blocked && s.Sync == structs.SyncInSync })
	e.settle()
	e.wantDeployments("web", structs.StateCompleted, structs.StateFailed)
}

// TestApply_JobChangedBeforeRegisterFails: a job changed in Nomad between
// detection and the register fails the deployment and registers nothing.
// Detection runs only when asked (a one-hour drift interval and no event
// stream), so the change
// lands while the deployment waits and the approval's apply pass is the
// first to see it.
func TestApply_JobChangedBeforeRegisterFails(t *testing.T) {
	t.Parallel()
	e := lcWorld(t, map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithCount(2))...),
	})
	v0 := e.nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web"))
	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) { c.DriftInterval, c.NomadEventStream = time.Hour, false }))
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if pending.JobModifyIndex != v0.JobModifyIndex {
		t.Fatalf("deployment records modify index %d, live job has %d", pending.JobModifyIndex, v0.JobModifyIndex)
	}

	v1 := e.nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web", testutil.WithCount(3)))
	before := e.nomadVersions("web")
	e.post("/v1/deployment/"+pending.ID+"/approve", map[string]string{"comment": "go"})
	failed := e.waitDeployment(pending.ID, structs.StateFailed)
	if failed.Registered || !strings.Contains(failed.Error, "the job changed since detection") ||
		!strings.Contains(failed.Error, "nothing registered") {
		t.Fatalf("failed deployment: registered=%v error=%q", failed.Registered, failed.Error)
	}
	e.wantEvents(failed.ID, ev{"pending_approval", "applying", "approved: go"}, ev{"applying", "failed", "the job changed since detection"})
	after := e.nomadVersions("web")
	if len(after) != len(before) || *after[0].JobModifyIndex != v1.JobModifyIndex || groupCount(after[0]) != 3 {
		t.Fatalf("Nomad versions changed: %d -> %d, live count %d", len(before), len(after), groupCount(after[0]))
	}
	// It failed before its register: the live change unblocks the job, and
	// the next deployment is made against the new live job.
	next := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	if next.ID == failed.ID || next.JobModifyIndex != v1.JobModifyIndex {
		t.Fatalf("next deployment: %+v", next)
	}
}

// TestApply_CanariesPauseTheApplyTimeout: the apply timeout does not run
// while canaries wait for a promotion; promoting through Nops completes the
// deployment.
func TestApply_CanariesPauseTheApplyTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 10 * time.Second
	opts := func(more ...testutil.JobOption) []testutil.JobOption {
		return managed(structs.PolicyAuto, append([]testutil.JobOption{testutil.WithCanaries(1, false),
			testutil.WithMeta("nops_apply_timeout", timeout.String())}, more...)...)
	}
	e := lcStart(t, map[string]string{jobFile("web"): testutil.ServiceJobHCL("web", opts()...)})
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)

	// A new version places a canary, which waits for a promotion.
	e.commit("v2", map[string]string{jobFile("web"): testutil.ServiceJobHCL("web", opts(testutil.WithEnv("VERSION", "2"))...)})
	var d *structs.Deployment
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf("web")
		if len(l) < 2 {
			return false, "no second deployment"
		}
		d = l[0]
		for _, got := range e.s.Events(d.ID) {
			if strings.Contains(got.Message, "canaries wait for promotion") {
				return true, ""
			}
		}
		return false, "second deployment is " + string(d.State) + ", canaries not waiting yet"
	})
	d = e.deployment(d.ID)
	// No deadline: zero, or one no apply could reach.
	noDeadline := d.HealthDeadline.IsZero() || d.HealthDeadline.After(time.Now().Add(24*time.Hour))
	if d.State != structs.StateApplying || !noDeadline {
		for _, got := range e.s.Events(d.ID) {
			t.Logf("event %s -> %s: %s", got.From, got.To, got.Message)
		}
		t.Fatalf("deployment with waiting canaries: state %s deadline %s", d.State, d.HealthDeadline)
	}
	// Well past the apply timeout, it still waits.
	until := d.RegisterStartedAt.Add(timeout + 5*time.Second)
	for time.Now().Before(until) {
		e.cycle()
	}
	if d = e.deployment(d.ID); d.State != structs.StateApplying {
		t.Fatalf("deployment with waiting canaries is %s after %s: %s", d.State, time.Since(d.RegisterStartedAt), d.Error)
	}

	e.post("/v1/deployment/"+d.ID+"/promote", nil)
	d = e.waitDeployment(d.ID, structs.StateCompleted)
	e.wantEvents(d.ID,
		ev{"applying", "applying", "registered job version 1"},
		ev{"applying", "applying", "canaries wait for promotion: the apply timeout is paused"},
		ev{"applying", "applying", "canaries promoted"},
		ev{"applying", "completed", "healthy"},
	)
	for _, got := range e.s.Events(d.ID) {
		if got.Message == "canaries promoted" && got.Actor != "tester" {
			t.Fatalf("promote event actor %q", got.Actor)
		}
	}
	if j := e.nomadJob("web"); *j.Version != 1 || j.TaskGroups[0].Tasks[0].Env["VERSION"] != "2" {
		t.Fatalf("Nomad job: version %d env %v", *j.Version, j.TaskGroups[0].Tasks[0].Env)
	}
	nd, _, err := e.nomad.Client.Deployments().Info(d.NomadDeploymentID, nil)
	if err != nil || nd.Status != nomadapi.DeploymentStatusSuccessful {
		t.Fatalf("Nomad deployment %s: %v %+v", d.NomadDeploymentID, err, nd)
	}
}
