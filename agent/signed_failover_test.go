package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestFailover_RefusedHeadKeepsTheLastVerifiedCommit: a repository whose
// commits must be signed has a signed commit deployed, then an unsigned
// head. The leader is killed; the new leader, which never fetched the
// signed commit itself, serves it (the replicated status names it, and
// the head stays refused), and corrects a live change of the job from it
// rather than waiting for a signed head.
func TestFailover_RefusedHeadKeepsTheLastVerifiedCommit(t *testing.T) {
	nomad := testutil.StartNomad(t)
	dir := t.TempDir()
	key, pub := testutil.SSHClientKey(t, dir, "id_signing")
	signers := filepath.Join(dir, "allowed_signers")
	if err := os.WriteFile(signers, []byte("ops@nops.invalid "+string(ssh.MarshalAuthorizedKey(pub))), 0o600); err != nil {
		t.Fatal(err)
	}
	web := func(count int) string {
		return testutil.ServiceJobHCL("web", testutil.WithManaged(string(structs.PolicyAuto)), testutil.WithCount(count))
	}
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", web(1))
	signed := repo.CommitSSHSigned(key, "signed: web")
	c := nopstest.StartCluster(t, 3, nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("ops", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(cfg *config.Config) {
			cfg.Repositories[0].Verify = &config.RepoVerify{AllowedSignersFile: signers}
		}))
	leader := c.WaitForLeader(30 * time.Second)
	d := leader.WaitForDeployment("default", "web", structs.StateCompleted, 90*time.Second)
	if d.Commit != signed {
		t.Fatalf("deployed commit %s, want the signed %s", d.Commit, signed)
	}
	repo.WriteFile("jobs/web.nomad.hcl", web(2))
	unsigned := repo.Commit("unsigned: two")
	repoStatus := func(s *nopstest.Server) (*structs.RepoStatus, error) {
		list, err := s.State().RepoStatuses()
		if err != nil || len(list) != 1 {
			return nil, fmt.Errorf("repository statuses %v: %v", list, err)
		}
		return list[0], nil
	}
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		r, err := repoStatus(leader)
		if err != nil {
			return false, err
		}
		return r.Refused == unsigned, fmt.Errorf("repository status %+v: the unsigned head is not refused yet", r)
	})

	c.Kill(c.Index(leader))
	next := c.WaitForLeader(30 * time.Second)
	if next.NodeID() == leader.NodeID() {
		t.Fatal("the killed server still leads")
	}
	// The new leader serves the signed commit: its own cycles see web, in
	// sync at the signed commit, and the head is still refused.
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		r, err := repoStatus(next)
		if err != nil {
			return false, err
		}
		st, err := next.State().JobStatus("", "default", "web")
		if err != nil || st == nil {
			return false, fmt.Errorf("web has no status: %v", err)
		}
		if r.Head != signed || r.Refused != unsigned || !strings.Contains(r.FetchError, "not signed") {
			return false, fmt.Errorf("repository status %+v, want head %s and %s refused", r, signed, unsigned)
		}
		if cy, err := next.State().DetectionCycle(); err != nil || cy == nil || cy.Leader != next.NodeID() || cy.Jobs != 1 {
			return false, fmt.Errorf("the new leader's last detection cycle %+v (%v): want one that saw web", cy, err)
		}
		return st.Sync == structs.SyncInSync && st.Commit == signed, fmt.Errorf("web is %s at %s, want in sync at %s", st.Sync, st.Commit, signed)
	})
	// A live change of web is corrected from the signed commit.
	nomad.RegisterJobHCL(t, web(3))
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		list := next.Deployments("default", "web")
		if len(list) < 2 {
			st, _ := next.State().JobStatus("", "default", "web")
			cy, _ := next.State().DetectionCycle()
			return false, fmt.Errorf("no deployment corrects the live change yet: web %+v; cycle %+v", st, cy)
		}
		newest := list[0]
		if newest.Commit != signed {
			return false, fmt.Errorf("newest deployment is of %s, want the signed %s", newest.Commit, signed)
		}
		return newest.State == structs.StateCompleted, fmt.Errorf("the correction is %s", newest.State)
	})
	job, _, err := nomad.Client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := *job.TaskGroups[0].Count; n != 1 {
		t.Fatalf("Nomad's web runs %d, want the signed commit's 1", n)
	}
}
