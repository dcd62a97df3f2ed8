package command

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// The CLI drives a server wired with the real reconcilers, against a real
// Nomad and a real git repository: a job that waits for approval is listed,
// approved with nops, and deployed.
func TestCLI_EndToEnd(t *testing.T) {
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "web waits for approval", map[string]string{
		"jobs/web.nomad.hcl": testutil.ServiceJobHCL("web", testutil.WithManaged("approval")),
	})

	// Before the first cycle, the cycle route answers "none yet", which the
	// client tells from a missing route.
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("main", repo.URL(), "main", "jobs"))
	c := newCLI(t, s.Server)
	api, err := client.New(client.Config{Address: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.Status().DetectionCycle(context.Background(), nil); err != nil {
		t.Fatalf("detection cycle: %v", err)
	}

	d := s.WaitForDeployment("default", "web", structs.StatePendingApproval, 60*time.Second)
	out := c.ok("deployment", "list")
	mustContain(t, "list", out, d.ID[:8], "web", "pending_approval", "approval", shortCommit(repo.Head()))
	out = c.ok("job", "status", "web")
	mustContain(t, "job status", out, "default/web", "drift", "jobs/web.nomad.hcl", "Active deployment", d.ID[:8], "pending_approval")

	mustContain(t, "approve", c.ok("deployment", "approve", d.ID[:8], "-comment", "from the CLI test"), "approved: now applying")
	done := s.WaitForDeployment("default", "web", structs.StateCompleted, 90*time.Second)
	if len(done.Decisions) != 1 || done.Decisions[0].Comment != "from the CLI test" || !strings.Contains(done.Decisions[0].Actor, "@") {
		t.Errorf("decisions %+v", done.Decisions)
	}
	s.WaitForJobStatus("default", "web", 30*time.Second, func(st *structs.JobStatus) bool { return st.Sync == structs.SyncInSync })

	out = c.ok("deployment", "status", d.ID)
	mustContain(t, "deployment status", out, "completed", "Nomad evaluation", "Decisions", "from the CLI test", "applying -> completed")
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		r := c.run("status")
		return r.code == 0 && strings.Contains(r.stdout, "1 in_sync") && strings.Contains(r.stdout, "1 completed") &&
			strings.Contains(r.stdout, "Last detection") && !strings.Contains(r.stdout, "none yet"), nil
	})
	out = c.ok("repo", "list")
	mustContain(t, "repo list", out, "main", repo.URL(), shortCommit(repo.Head()))
	mustContain(t, "repo refresh", c.ok("repo", "refresh", "main"), `Repository "main" fetched: head `+shortCommit(repo.Head()))
	mustContain(t, "missing repo", c.fails(1, "repo", "refresh", "nope"), `repository "nope"`, "404")
	mustContain(t, "orphans", c.ok("orphans"), "No orphan jobs")
	mustContain(t, "retry of a job not blocked", c.fails(1, "job", "retry", "web"), "default/web is not blocked", "409")
}
