package reconcile_test

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestSmoke_AutoAndApproval drives one auto job to completed and one
// approval job through approve, with a pre-hook, against a real Nomad.
func TestSmoke_AutoAndApproval(t *testing.T) {
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", testutil.WithMeta("nops_managed", "true")))
	repo.WriteFile("jobs/api.nomad.hcl", testutil.ServiceJobHCL("api", testutil.WithMeta("nops_managed", "true"),
		testutil.WithMeta("nops_policy", "approval"), testutil.WithMeta("nops_pre_hooks", "backup")))
	repo.WriteFile("jobs/backup.nomad.hcl", testutil.HookJobHCL("backup"))
	repo.Commit("jobs")
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("main", repo.URL(), "main", "jobs"))

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
}
