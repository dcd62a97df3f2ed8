package reconcile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// nomadPolicy returns the Nomad ACL policy shipped in docs/, the one the
// documentation tells operators to apply.
func nomadPolicy(t *testing.T) string {
	t.Helper()
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "nomad-policy.hcl"))
	if err != nil {
		t.Fatalf("read the shipped Nomad policy: %v", err)
	}
	return string(b)
}

// without returns the policy with one capability taken out.
func without(t *testing.T, policy, capability string) string {
	t.Helper()
	out := strings.Replace(policy, `"`+capability+`", `, "", 1)
	out = strings.Replace(out, `, "`+capability+`"`, "", 1)
	if out == policy {
		t.Fatalf("the policy has no capability %q:\n%s", capability, policy)
	}
	return out
}

// aclEnv starts a Nomad agent with ACLs and a Nops server whose Nomad token
// carries exactly policy, watching a repository that holds files.
func aclEnv(t *testing.T, nomad *testutil.NomadAgent, name, policy string, files map[string]string) *lcEnv {
	t.Helper()
	e := &lcEnv{world{t: t, nomad: nomad, repo: testutil.NewGitRepo(t)}}
	commitFiles(e.repo, "jobs", files)
	token := nomad.ACLToken(t, name, policy, "")
	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) { c.NomadToken = token }))
	return e
}

// TestNomadACL_ShippedPolicyIsEnough: with a token of exactly the shipped
// policy, Nops detects, registers, runs pre and post hooks, stops the hook
// revisions once unused, and sees a hand change through the event stream.
func TestNomadACL_ShippedPolicyIsEnough(t *testing.T) {
	t.Parallel()
	nomad := testutil.StartNomad(t, testutil.WithACL())
	web := func(more ...testutil.JobOption) string {
		return testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, append([]testutil.JobOption{
			testutil.WithMeta("nops_pre_hooks", "backup"), testutil.WithMeta("nops_post_hooks", "notify")}, more...)...)...)
	}
	e := aclEnv(t, nomad, "nops", nomadPolicy(t), map[string]string{
		jobFile("web"):    web(),
		jobFile("backup"): testutil.HookJobHCL("backup"),
		jobFile("notify"): testutil.HookJobHCL("notify"),
	})
	first := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	// node:read: the Nomad servers' version, whose change re-plans.
	e.waitFor(func() (bool, string) {
		return e.s.Manager().NomadVersion() != "", "the Nomad servers' version was not read"
	})
	for _, phase := range []structs.HookPhase{structs.PhasePre, structs.PhasePost} {
		if r := hookRun(t, first, phase, 0); r.State != structs.HookRunSucceeded || r.DispatchedJobID == "" {
			t.Fatalf("%s hook run: %+v", phase, r)
		}
	}
	if !first.Registered {
		t.Fatalf("deployment not registered: %+v", first)
	}
	for _, phase := range []structs.HookPhase{structs.PhasePre, structs.PhasePost} {
		rev := frozen(t, first, phase, 0).RevisionJobID
		e.waitFor(func() (bool, string) {
			return stopped(lookupNomadJob(t, nomad, rev)), "hook revision " + rev + " not stopped"
		})
	}
	st := e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	if len(st.Errors) > 0 {
		t.Fatalf("status errors with the shipped policy: %v", st.Errors)
	}

	// A hand change is seen through the event stream, which the token
	// may read, and put back.
	m := e.s.Manager()
	e.waitFor(func() (bool, string) { return m.WatchingEvents(), "the event stream is not up" })
	e.nomad.RegisterJobHCL(t, web(testutil.WithMeta("by", "hand")))
	second := e.waitNewDeployment("web", first.ID)
	e.waitDeployment(second.ID, structs.StateCompleted)
	if j := e.nomadJob("web"); j.Meta["by"] != "" {
		t.Fatalf("the hand change is still live: %v", j.Meta)
	}
	if s := m.Nomad().Stats(); s.Operations["event.stream"].Errors > 0 {
		t.Fatalf("the event stream was refused: %s", s)
	}
}

// TestNomadACL_WeakerTokenNamedInStatus: with a token that lacks one
// capability of the shipped policy, the refused call is named in the job's
// observed status (GET /v1/job/{ns}/{id}), not only in a log line.
func TestNomadACL_WeakerTokenNamedInStatus(t *testing.T) {
	t.Parallel()
	nomad := testutil.StartNomad(t, testutil.WithACL())
	policy := nomadPolicy(t)
	cases := []struct {
		name, policy string
		files        map[string]string
		want         []string
	}{
		{name: "no-dispatch", policy: without(t, policy, "dispatch-job"),
			files: map[string]string{
				jobFile("web1"):   testutil.ServiceJobHCL("web1", managed(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"))...),
				jobFile("backup"): testutil.HookJobHCL("backup"),
			},
			want: []string{"Nomad refused the dispatch of pre hook backup", "Permission denied"}},
		{name: "no-submit", policy: strings.Replace(without(t, policy, "submit-job"), `"read-job"`, `"read-job", "parse-job"`, 1),
			files: map[string]string{jobFile("web2"): testutil.ServiceJobHCL("web2", managed(structs.PolicyAuto)...)},
			want:  []string{"plan job \"web2\"", "Permission denied"}},
		{name: "no-list", policy: without(t, policy, "list-jobs"),
			files: map[string]string{jobFile("web3"): testutil.ServiceJobHCL("web3", managed(structs.PolicyAuto)...)},
			want:  []string{"list live jobs", "Permission denied"}},
	}
	for i, c := range cases {
		e := aclEnv(t, nomad, c.name, c.policy, c.files)
		job := "web" + string(rune('1'+i))
		st := e.waitStatus(job, func(s *structs.JobStatus) bool {
			for _, w := range c.want {
				if !strings.Contains(strings.Join(s.Errors, "\n"), w) {
					return false
				}
			}
			return true
		})
		t.Logf("%s: status of %s: sync %s, errors %q", c.name, job, st.Sync, st.Errors)
		if lookupNomadJob(t, nomad, job) != nil {
			t.Fatalf("%s: job %s reached Nomad", c.name, job)
		}
		e.s.Shutdown()
	}
}

// waitNewDeployment waits for a deployment of job newer than the one with
// ID old, and returns it.
func (e *lcEnv) waitNewDeployment(job, old string) *structs.Deployment {
	e.t.Helper()
	var d *structs.Deployment
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf(job)
		if len(l) == 0 || l[0].ID == old {
			return false, "no deployment of " + job + " after " + old
		}
		d = l[0]
		return true, ""
	})
	return d
}
