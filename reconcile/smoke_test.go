package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// TestSmoke_AutoAndApproval drives one auto job to completed and one
// approval job through approve, with a pre-hook, against a real Nomad.
func TestSmoke_AutoAndApproval(t *testing.T) {
	s := lcStart(t, map[string]string{
		jobFile("web"):    testutil.ServiceJobHCL("web", testutil.WithMeta("nops_managed", "true")),
		jobFile("api"):    testutil.ServiceJobHCL("api", managed(structs.PolicyApproval, testutil.WithMeta("nops_pre_hooks", "backup"))...),
		jobFile("backup"): testutil.HookJobHCL("backup"),
	}).s

	web := s.WaitForDeployment("default", "web", structs.StateCompleted, 60*time.Second)
	if !web.Registered || web.JobVersion != 0 {
		t.Fatalf("web: %+v", web)
	}
	api := s.WaitForDeployment("default", "api", structs.StatePendingApproval, 30*time.Second)
	if code, body := s.Do("POST", "/v1/deployment/"+api.ID+"/approve", map[string]string{"comment": "ship it"}, nil); code != 200 {
		t.Fatalf("approve: %d %s", code, body)
	}
	done := s.WaitForDeployment("default", "api", structs.StateCompleted, 90*time.Second)
	if len(done.HookRuns) != 1 || done.HookRuns[0].State != structs.HookRunSucceeded {
		t.Fatalf("hook runs: %+v", done.HookRuns)
	}
	s.WaitForJobStatus("default", "web", 30*time.Second, func(st *structs.JobStatus) bool { return st.Sync == structs.SyncInSync })

	// The job list carries each job's deployments and freshness.
	var jobs []struct {
		JobID            string `json:"job_id"`
		ActiveDeployment *struct {
			ID string `json:"id"`
		} `json:"active_deployment"`
		LastDeployment *struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"last_deployment"`
		LastReconciled *time.Time `json:"last_reconciled"`
	}
	s.Do("GET", "/v1/jobs", nil, &jobs)
	if len(jobs) != 2 {
		t.Fatalf("/v1/jobs lists %d jobs, want 2 (the hook is not a managed job)", len(jobs))
	}
	for _, j := range jobs {
		if j.JobID == "web" && (j.LastDeployment == nil || j.LastDeployment.ID != web.ID ||
			j.LastDeployment.State != "completed" || j.ActiveDeployment != nil || j.LastReconciled == nil) {
			t.Fatalf("web in /v1/jobs: %+v", j)
		}
	}

	// The reconcilers' work shows in the metrics.
	code, metrics := s.Do("GET", "/metrics", nil, nil)
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	for _, want := range []string{
		// The metrics of a cluster's loops and Nomad client carry its
		// cluster label (SPEC section 16).
		`nops_detection_cycles_total{cluster="default",result="ok"}`, `nops_detection_duration_seconds_count{cluster="default"}`,
		`nops_apply_duration_seconds_count{cluster="default"}`, `nops_deployments_created_total{cluster="default"} 2`,
		`nops_git_fetch_error{repo="main"} 0`, `nops_deployments{state="completed"} 2`,
		`nops_nomad_requests_total{cluster="default",operation="job.register"}`, `nops_jobs{sync="in_sync"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
