package gitwatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
)

// TestWatcher_SSH: a repository over SSH (a real SSH server in the test
// running the real `git upload-pack`) is fetched with the configured key
// when known_hosts holds the server's key, new commits included; a server
// whose host key is not in known_hosts, or is there with another key, is
// refused before anything is fetched, and so is a client key the server
// does not know.
func TestWatcher_SSH(t *testing.T) {
	dir := t.TempDir()
	keyFile, pub := testutil.SSHClientKey(t, dir, "id_ed25519")
	otherKey, _ := testutil.SSHClientKey(t, dir, "id_other")
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" {}`)
	head := repo.Commit("v1")
	srv := repo.ServeSSH(t, pub)

	write := func(name, content string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	known := write("known_hosts", srv.KnownHostsLine()+"\n")
	empty := write("known_hosts_empty", "")
	// Another server's key under this server's address: what a
	// man-in-the-middle presents, seen from the client.
	impostor := repo.ServeSSH(t, pub)
	wrong := write("known_hosts_wrong", (&testutil.SSHServer{Addr: srv.Addr, HostKey: impostor.HostKey}).KnownHostsLine()+"\n")

	w := newWatcher(t,
		RepoConfig{Name: "ssh", URL: srv.URL, Path: "jobs", Auth: Auth{SSHKeyFile: keyFile, SSHKnownHostsFile: known}},
		RepoConfig{Name: "unknown-host", URL: srv.URL, Auth: Auth{SSHKeyFile: keyFile, SSHKnownHostsFile: empty}},
		RepoConfig{Name: "changed-host-key", URL: srv.URL, Auth: Auth{SSHKeyFile: keyFile, SSHKnownHostsFile: wrong}},
		RepoConfig{Name: "unknown-client", URL: srv.URL, Auth: Auth{SSHKeyFile: otherKey, SSHKnownHostsFile: known}},
	)
	ctx := ctxFor(t)
	if err := w.FetchNow(ctx, "ssh"); err != nil {
		t.Fatalf("fetch over SSH: %v", err)
	}
	if s := w.Snapshot("ssh"); s == nil || s.Commit != head || len(s.Files) != 1 || s.Files[0].Path != "jobs/web.nomad.hcl" {
		t.Fatalf("snapshot over SSH = %+v", s)
	}
	next := commitFile(repo, "jobs/web.nomad.hcl", `job "web" { v = 2 }`)
	start := time.Now()
	if err := w.FetchNow(ctx, "ssh"); err != nil {
		t.Fatalf("fetch of a new commit over SSH: %v", err)
	}
	t.Logf("fetch of a new commit over SSH took %s", time.Since(start))
	if s := w.Snapshot("ssh"); s.Commit != next {
		t.Fatalf("snapshot over SSH at %s, want the new commit %s", s.Commit, next)
	}
	for _, tc := range []struct{ name, says string }{
		{"unknown-host", "key is unknown"},
		{"changed-host-key", "key mismatch"},
		{"unknown-client", "unable to authenticate"},
	} {
		err := w.FetchNow(ctx, tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: fetch error %v, want one saying %q", tc.name, err, tc.says)
		}
		if s := w.Snapshot(tc.name); s != nil {
			t.Errorf("%s: a refused fetch gave a snapshot at %s", tc.name, s.Commit)
		}
	}
}
