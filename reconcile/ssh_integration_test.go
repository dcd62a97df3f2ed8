package reconcile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestSSHRepository_Deploys: a repository served over SSH (a real SSH
// server running `git upload-pack`), configured with auth { ssh_key_file,
// known_hosts_file }, deploys its job to a real Nomad, and a new commit
// deploys too.
func TestSSHRepository_Deploys(t *testing.T) {
	e := lcWorld(t, map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	dir := t.TempDir()
	key, pub := testutil.SSHClientKey(t, dir, "id_ed25519")
	srv := e.repo.ServeSSH(t, pub)
	knownHosts := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(knownHosts, []byte(srv.KnownHostsLine()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.serve(srv.URL, nopstest.WithConfig(func(c *config.Config) {
		c.Repositories[0].Auth = &config.RepoAuth{SSHKeyFile: key, KnownHostsFile: knownHosts}
	}))
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	c := e.commit("two replicas", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
	})
	e.waitHead(c)
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf("web")
		return len(l) == 2 && l[0].Commit == c && l[0].State == structs.StateCompleted,
			"the new commit's deployment has not completed"
	})
	if j := e.nomadJob("web"); groupCount(j) != 2 {
		t.Fatalf("Nomad job count %d after the commit over SSH, want 2", groupCount(j))
	}
}
