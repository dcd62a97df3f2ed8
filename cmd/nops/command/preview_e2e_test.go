package command

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestCLI_Preview: against a real server, Nomad and git, `nops preview`
// of a branch that changes the deployed job exits 2 and prints the job,
// its plan and its file diff, and -json gives the same answer; the
// followed branch exits 0 with "No changes"; a missing flag and an
// unknown ref exit 1 (2 means changes) and say what is wrong.
func TestCLI_Preview(t *testing.T) {
	job := func(count int) string {
		return testutil.ServiceJobHCL("web", testutil.WithManaged("auto"), testutil.WithCount(count))
	}
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "Add web", map[string]string{"jobs/web.nomad.hcl": job(1)})
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("main", repo.URL(), "main", "jobs"))
	c := newCLI(t, s.Server)
	s.WaitForDeployment("default", "web", structs.StateCompleted, 90*time.Second)
	s.WaitForJobStatus("default", "web", 90*time.Second, func(js *structs.JobStatus) bool { return js.Sync == structs.SyncInSync })

	repo.Git("checkout", "-b", "two")
	repo.WriteFile("jobs/web.nomad.hcl", job(2))
	two := repo.Commit("two of web")
	repo.Git("checkout", "main")

	r := c.run("preview", "-repository", "main", "-ref", "two")
	if r.code != exitChanges {
		t.Fatalf("nops preview of a change: exit %d, want 2\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("nops preview -ref two:\n%s", r.stdout)
	mustContain(t, "nops preview", r.stdout, "Preview of main at two (commit "+two[:8], "+/- job default/web (changed, policy auto)",
		"Plan (Edited):", "Count", "File diff:", "+++ b/jobs/web.nomad.hcl", "1 job(s) would change")

	r = c.run("preview", "-repository", "main", "-ref", two, "-json")
	var p structs.Preview
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || r.code != exitChanges {
		t.Fatalf("nops preview -json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if p.Commit != two || len(p.Jobs) != 1 || p.Jobs[0].JobID != "web" || p.Jobs[0].PlanType != "Edited" || !p.Changes {
		t.Fatalf("nops preview -json: %+v", p)
	}

	out := c.ok("preview", "-repository", "main", "-ref", "main")
	mustContain(t, "nops preview of the followed branch", out, "No changes")

	mustContain(t, "nops preview without -ref", c.fails(exitError, "preview", "-repository", "main"), "-repository and -ref are required")
	stderr := c.fails(exitError, "preview", "-repository", "main", "-ref", "nope")
	mustContain(t, "nops preview of an unknown ref", stderr, `has no branch or tag "nope"`)
	if strings.Contains(stderr, "Usage:") {
		t.Fatalf("an unknown ref is no usage error:\n%s", stderr)
	}
}
