package reconcile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestSignedCommits_OnlySignedDeploy: with verify { allowed_signers_file },
// a head signed by a listed SSH key deploys to a real Nomad and its
// deployment records the key's fingerprint (commit_signer); an unsigned
// head after it is refused (the repository's status names the commit and
// the reason, an audit event and a repo_failing notification say it,
// nothing of it reaches Nomad); the next signed commit deploys.
func TestSignedCommits_OnlySignedDeploy(t *testing.T) {
	e := lcWorld(t, map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	dir := t.TempDir()
	key, pub := testutil.SSHClientKey(t, dir, "id_signing")
	signers := filepath.Join(dir, "allowed_signers")
	line := "ops@nops.invalid " + string(ssh.MarshalAuthorizedKey(pub))
	if err := os.WriteFile(signers, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	fingerprint := ssh.FingerprintSHA256(pub)
	signed := e.repo.CommitSSHSigned(key, "signed: the job as it is")

	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) {
		c.Repositories[0].Verify = &config.RepoVerify{AllowedSignersFile: signers}
	}))
	d := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if d.Commit != signed || d.CommitSigner != fingerprint {
		t.Fatalf("deployment of commit %s signed by %q, want %s signed by %q", d.Commit, d.CommitSigner, signed, fingerprint)
	}

	unsigned := e.commit("unsigned: two replicas", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
	})
	e.waitFor(func() (bool, string) {
		r := e.repoStatus()
		return r != nil && strings.Contains(r.FetchError, "commit "+unsigned+" refused: the commit is not signed"),
			"the repository's status does not name the refused commit"
	})
	if r := e.repoStatus(); r.Head != signed {
		t.Fatalf("repository head %s after a refused commit, want the signed %s", r.Head, signed)
	}
	e.waitFor(func() (bool, string) {
		var list []*structs.Notification
		if code, body := e.s.Do("GET", "/v1/notifications", nil, &list); code != 200 {
			return false, "GET /v1/notifications: " + body
		}
		for _, n := range list {
			if n.Kind == structs.NotifyRepoFailing && strings.Contains(n.Message, unsigned) {
				return true, ""
			}
		}
		return false, "no repo_failing notification names the refused commit"
	})
	var events []*structs.Event
	if code, body := e.s.Do("GET", "/v1/events", nil, &events); code != 200 {
		t.Fatalf("GET /v1/events: %d %s", code, body)
	}
	refusals := 0
	for _, ev := range events {
		if ev.Kind == structs.EventKindRepository && ev.Object == "repository/main" && strings.Contains(ev.Message, unsigned) {
			refusals++
		}
	}
	if refusals != 1 {
		t.Fatalf("%d repository events name the refused commit, want 1: %+v", refusals, events)
	}
	// A whole detection cycle after the refusal deploys nothing of it.
	e.cycle()
	for _, dep := range e.deploymentsOf("web") {
		if dep.Commit == unsigned {
			t.Fatalf("deployment %s of the unsigned commit", dep.ID)
		}
	}
	if n := groupCount(e.nomadJob("web")); n != 1 {
		t.Fatalf("Nomad job count %d after an unsigned commit, want 1", n)
	}

	e.repo.WriteFile(jobFile("web"), testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(3))...))
	next := e.repo.CommitSSHSigned(key, "signed: three replicas")
	e.waitHead(next)
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf("web")
		return len(l) == 2 && l[0].Commit == next && l[0].State == structs.StateCompleted && l[0].CommitSigner == fingerprint,
			"the signed commit's deployment has not completed"
	})
	if n := groupCount(e.nomadJob("web")); n != 3 {
		t.Fatalf("Nomad job count %d after the signed commit, want 3", n)
	}
	if r := e.repoStatus(); r.FetchError != "" {
		t.Fatalf("fetch error %q after a signed head", r.FetchError)
	}
}
