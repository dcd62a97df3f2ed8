package web_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestDashboard_BrowserShowsWhatAJobWaitsFor: api depends on db
// (nops_depends_on), and db, policy none, is never deployed, so api waits.
// From a real Chromium, the jobs list and api's page both say what api
// waits for, and neither page scrolls sideways at 1400 or 390 pixels
// (screenshots saved and checked not to be blank).
func TestDashboard_BrowserShowsWhatAJobWaitsFor(t *testing.T) {
	b := newBrowser(t)
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/db.nomad.hcl", testutil.ServiceJobHCL("db",
		testutil.WithMeta("nops_managed", "true"), testutil.WithMeta("nops_policy", "none")))
	repo.WriteFile("jobs/api.nomad.hcl", testutil.ServiceJobHCL("api",
		testutil.WithMeta("nops_managed", "true"), testutil.WithMeta("nops_policy", "auto"), testutil.WithMeta("nops_depends_on", "db")))
	repo.Commit("db and api")
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("ops", repo.URL(), "main", "jobs"))
	const want = "waiting for default/db: not in sync"
	s.WaitForJobStatus("default", "api", 90*time.Second, func(st *structs.JobStatus) bool { return st.WaitingFor == want })
	if d := s.Deployments("default", "api"); len(d) != 0 {
		t.Fatalf("api has %d deployments while it waits for db", len(d))
	}

	b.open(s.URL + "/ui/jobs")
	b.waitJS("jobs list", `!!document.querySelector("#jobs-table")`, 20*time.Second)
	if h := b.html("jobs-waiting"); !strings.Contains(h, want) {
		t.Errorf("the jobs list does not say %q", want)
	}
	b.open(s.URL + "/ui/job/default/api")
	b.waitJS("job page", `!!document.querySelector("#job-waiting")`, 20*time.Second)
	if got, _ := eval[string](b, `document.querySelector("#job-waiting").textContent.trim()`); got != want {
		t.Errorf("api's page says %q, want %q", got, want)
	}
	b.sweep(s.URL, map[string]string{"jobs-waiting": "/ui/jobs", "job-waiting": "/ui/job/default/api"})
}
