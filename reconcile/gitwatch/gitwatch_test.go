package gitwatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/testutil"
)

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "gitwatch", Level: hclog.Debug, Output: testWriter{t}})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func newWatcher(t *testing.T, cfgs ...RepoConfig) *Watcher {
	t.Helper()
	w, err := New(cfgs, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w
}

// runWatcher runs w until stop is called or the test ends; stop returns
// once Run has.
func runWatcher(t *testing.T, w *Watcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// waitFor waits until cond holds, and fails the test naming what after
// 30 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) { return cond(), errors.New(what) })
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func commitFile(repo *testutil.GitRepo, path, content string) string {
	repo.WriteFile(path, content)
	return repo.Commit("change " + path)
}

func fileMap(s *Snapshot) map[string]JobFile {
	out := map[string]JobFile{}
	for _, f := range s.Files {
		out[f.Path] = f
	}
	return out
}

// notified reports whether Notify has a value, without waiting.
func notified(w *Watcher) bool {
	select {
	case <-w.Notify():
		return true
	default:
		return false
	}
}

func TestSnapshot_FilesPathAndVars(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("README.md", "# jobs\n")
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" {}`)
	repo.WriteFile("jobs/web.vars.hcl", `count = 3`)
	repo.WriteFile("jobs/nested/deep/api.nomad", `job "api" {}`)
	repo.WriteFile("jobs/nested/deep/api.vars.hcl", `level = "debug"`)
	repo.WriteFile("jobs/cache.nomad.hcl", `job "cache" {}`)
	repo.WriteFile("jobs/orphan.vars.hcl", `x = 1`)
	repo.WriteFile("jobs/notes.hcl", `not a job`)
	repo.WriteFile("jobs/.nomad", `not a job either`)
	repo.WriteFile("other/outside.nomad.hcl", `job "outside" {}`)
	head := repo.Commit("initial")
	if err := os.Symlink("web.nomad.hcl", filepath.Join(repo.Dir, "jobs", "link.nomad.hcl")); err != nil {
		t.Fatal(err)
	}
	head2 := repo.Commit("a symlink is not a job file")

	w := newWatcher(t, RepoConfig{Name: "ops", URL: repo.URL(), Path: "./jobs/"})
	if len(w.Snapshots()) != 0 || notified(w) {
		t.Fatal("snapshot or notification before any fetch")
	}
	if err := w.FetchNow(ctxFor(t), "ops"); err != nil {
		t.Fatal(err)
	}
	snaps := w.Snapshots()
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots, want 1", len(snaps))
	}
	s := snaps[0]
	if s.Repo != "ops" || s.Commit != head2 || s.Commit == head || s.Branch != "main" {
		t.Errorf("snapshot %s at %s on %q, want ops at %s on main", s.Repo, s.Commit, s.Branch, head2)
	}
	var paths []string
	for _, f := range s.Files {
		paths = append(paths, f.Path)
	}
	want := "jobs/cache.nomad.hcl,jobs/nested/deep/api.nomad,jobs/web.nomad.hcl"
	if strings.Join(paths, ",") != want {
		t.Fatalf("files = %s, want %s (sorted, recursive, under the path, no symlinks)", strings.Join(paths, ","), want)
	}
	files := fileMap(s)
	if f := files["jobs/web.nomad.hcl"]; f.Content != `job "web" {}` || f.VarsPath != "jobs/web.vars.hcl" || f.Vars != "count = 3" {
		t.Errorf("web = %+v", f)
	}
	if f := files["jobs/nested/deep/api.nomad"]; f.VarsPath != "jobs/nested/deep/api.vars.hcl" || f.Vars != `level = "debug"` {
		t.Errorf("api = %+v", f)
	}
	if f := files["jobs/cache.nomad.hcl"]; f.VarsPath != "" || f.Vars != "" {
		t.Errorf("cache has vars: %+v", f)
	}
	if !notified(w) {
		t.Error("no notification for the first snapshot")
	}

	st := w.Status()[0]
	if st.Head != head2 || st.Files != 3 || st.LastError != "" || st.Path != "jobs" || st.LastFetch.IsZero() || st.LastSuccess.IsZero() || st.Branch != "main" {
		t.Errorf("status = %+v", st)
	}

	// Nothing moved: no notification, same snapshot.
	if err := w.FetchNow(ctxFor(t), "ops"); err != nil {
		t.Fatal(err)
	}
	if notified(w) {
		t.Error("notification without a new commit")
	}
	if w.Snapshot("ops") != s {
		t.Error("snapshot replaced without a new commit")
	}
}

func TestWatcher_RunPicksUpCommits(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("web.nomad.hcl", `job "web" { v = 1 }`)
	repo.Commit("v1")
	polled := testutil.NewGitRepo(t)
	polled.WriteFile("a.nomad", `job "a" {}`)
	polled.Commit("a")

	w := newWatcher(t,
		RepoConfig{Name: "refreshed", URL: repo.URL(), PollInterval: time.Hour},
		RepoConfig{Name: "polled", URL: polled.URL(), PollInterval: 100 * time.Millisecond},
	)
	stop := runWatcher(t, w)
	waitFor(t, "first snapshots", func() bool { return len(w.Snapshots()) == 2 })
	<-w.Notify()

	// A push followed by a refresh (the webhook path).
	head := commitFile(repo, "web.nomad.hcl", `job "web" { v = 2 }`)
	if err := w.Refresh("refreshed"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Notify():
	case <-time.After(30 * time.Second):
		t.Fatal("no notification after a refresh")
	}
	waitFor(t, "refreshed snapshot", func() bool { return w.Snapshot("refreshed").Commit == head })
	if got := w.Snapshot("refreshed").Files[0].Content; got != `job "web" { v = 2 }` {
		t.Errorf("content after the new commit = %q", got)
	}

	// A push picked up by polling alone.
	polled.Remove("a.nomad")
	polled.WriteFile("b.nomad", `job "b" {}`)
	head = polled.Commit("a becomes b")
	waitFor(t, "polled snapshot", func() bool { return w.Snapshot("polled").Commit == head })
	if files := w.Snapshot("polled").Files; len(files) != 1 || files[0].Path != "b.nomad" {
		t.Errorf("files after the rename = %+v", files)
	}

	if err := w.Refresh("nosuch"); !errors.Is(err, ErrUnknownRepo) {
		t.Errorf("Refresh(nosuch) = %v, want ErrUnknownRepo", err)
	}
	w.RefreshAll()

	// Stopping is not a fetch failure.
	stop()
	for _, st := range w.Status() {
		if st.LastError != "" {
			t.Errorf("%s: error after stopping: %s", st.Name, st.LastError)
		}
	}
}

func TestWatcher_FetchFailureKeepsLastGood(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("web.nomad.hcl", `job "web" {}`)
	head := repo.Commit("v1")
	w := newWatcher(t, RepoConfig{Name: "ops", URL: repo.URL()})
	ctx := ctxFor(t)
	if err := w.FetchNow(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	good := w.Snapshot("ops")

	moved := repo.Dir + ".moved"
	if err := os.Rename(repo.Dir, moved); err != nil {
		t.Fatal(err)
	}
	err := w.FetchNow(ctx, "ops")
	if err == nil {
		t.Fatal("fetch of a missing repository succeeded")
	}
	if w.Snapshot("ops") != good || len(w.Snapshots()) != 1 {
		t.Error("the last good snapshot was dropped")
	}
	st := w.Status()[0]
	if st.LastError == "" || st.Head != head || st.Files != 1 || !st.LastFetch.After(st.LastSuccess) || st.Failures != 1 {
		t.Errorf("status after a failed fetch = %+v", st)
	}

	if err := os.Rename(moved, repo.Dir); err != nil {
		t.Fatal(err)
	}
	if err := w.FetchNow(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	if st := w.Status()[0]; st.LastError != "" || st.Failures != 1 {
		t.Errorf("after a good fetch: error %q, %d failures (want none, and the one before still counted)", st.LastError, st.Failures)
	}
	if err := w.FetchNow(ctx, "nosuch"); !errors.Is(err, ErrUnknownRepo) {
		t.Errorf("FetchNow(nosuch) = %v, want ErrUnknownRepo", err)
	}
}

func TestWatcher_Branch(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("web.nomad.hcl", `job "web" { env = "main" }`)
	mainHead := repo.Commit("main")
	repo.Git("checkout", "--quiet", "-b", "release")
	repo.WriteFile("web.nomad.hcl", `job "web" { env = "release" }`)
	releaseHead := repo.Commit("release")
	repo.Git("checkout", "--quiet", "main")

	w := newWatcher(t,
		RepoConfig{Name: "release", URL: repo.URL(), Branch: "release"},
		RepoConfig{Name: "default", URL: repo.URL()},
		RepoConfig{Name: "missing", URL: repo.URL(), Branch: "nope"},
	)
	ctx := ctxFor(t)
	for _, name := range []string{"release", "default"} {
		if err := w.FetchNow(ctx, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if s := w.Snapshot("release"); s.Commit != releaseHead || s.Branch != "release" || !strings.Contains(s.Files[0].Content, `"release"`) {
		t.Errorf("release snapshot = %+v", s)
	}
	if s := w.Snapshot("default"); s.Commit != mainHead || s.Branch != "main" {
		t.Errorf("default-branch snapshot = %+v", s)
	}
	err := w.FetchNow(ctx, "missing")
	if err == nil || !strings.Contains(err.Error(), `branch "nope" not found`) {
		t.Errorf("missing branch: error = %v", err)
	}
	if w.Snapshot("missing") != nil {
		t.Error("snapshot for a missing branch")
	}
}

func TestWatcher_HTTPBasicAuthAndToken(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" {}`)
	head := repo.Commit("v1")
	basicURL := repo.ServeHTTP(t, testutil.WithBasicAuth("alice", "correct-horse"))
	tokenURL := repo.ServeHTTP(t, testutil.WithBasicAuth(tokenUsername, "tok-123"))

	w := newWatcher(t,
		RepoConfig{Name: "basic", URL: basicURL, Path: "jobs", Auth: Auth{Username: "alice", Password: "correct-horse"}},
		RepoConfig{Name: "token", URL: tokenURL, Auth: Auth{Token: "tok-123"}},
		RepoConfig{Name: "wrong", URL: basicURL, Auth: Auth{Username: "alice", Password: "wrong-password"}},
		RepoConfig{Name: "anonymous", URL: basicURL},
	)
	ctx := ctxFor(t)
	for _, name := range []string{"basic", "token"} {
		if err := w.FetchNow(ctx, name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := w.Snapshot(name); s.Commit != head || len(s.Files) != 1 {
			t.Errorf("%s snapshot = %+v", name, s)
		}
	}
	for _, name := range []string{"wrong", "anonymous"} {
		err := w.FetchNow(ctx, name)
		if err == nil {
			t.Fatalf("%s: fetch succeeded", name)
		}
		if strings.Contains(err.Error(), "wrong-password") {
			t.Errorf("%s: the password leaked into the error: %v", name, err)
		}
	}

	// Push to fetch over HTTP: the webhook path's latency.
	head = commitFile(repo, "jobs/web.nomad.hcl", `job "web" { v = 2 }`)
	start := time.Now()
	if err := w.FetchNow(ctx, "basic"); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	if w.Snapshot("basic").Commit != head {
		t.Fatal("new commit not fetched")
	}
	t.Logf("fetch of a new commit over HTTP took %s", elapsed)
	if elapsed > 2*time.Second {
		t.Errorf("fetch of a new commit took %s", elapsed)
	}
}

func TestNew_RefusesEachInvalidRepository(t *testing.T) {
	_, err := New([]RepoConfig{
		{Name: "ok", URL: "https://git.example/ops.git"},
		{Name: "ok", URL: "https://git.example/other.git"},
		{URL: "https://git.example/x.git"},
		{Name: "nourl"},
		{Name: "escape", URL: "https://git.example/x.git", Path: "../etc"},
		{Name: "both", URL: "https://git.example/x.git", Auth: Auth{Password: "p", Token: "t"}},
		{Name: "sshmix", URL: "git@git.example:x.git", Auth: Auth{SSHKeyFile: "/k", Token: "t"}},
		{Name: "passphrase", URL: "git@git.example:x.git", Auth: Auth{SSHKeyPassphrase: "p"}},
		{Name: "branch", URL: "https://git.example/x.git", Branch: "a..b"},
		{Name: "poll", URL: "https://git.example/x.git", PollInterval: -time.Second},
	}, nil)
	if err == nil {
		t.Fatal("invalid configuration accepted")
	}
	for _, want := range []string{
		`repository "ok" is configured twice`,
		`name is required`,
		`repository "nourl": url is required`,
		`repository "escape": path "../etc" leaves the repository`,
		`repository "both": auth: set password or token, not both`,
		`repository "sshmix": auth: an SSH key cannot be combined`,
		`repository "passphrase": auth: ssh_key_passphrase and ssh_known_hosts_file need ssh_key_file`,
		`repository "branch": branch "a..b" is not a valid branch name`,
		`repository "poll": poll_interval -1s is negative`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := New(nil, nil); err != nil {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestAuthMethod_TokenBasicAuthAndSSHKey(t *testing.T) {
	m, err := RepoConfig{Auth: Auth{Token: "t"}}.authMethod()
	if ba, ok := m.(*githttp.BasicAuth); err != nil || !ok || ba.Username != tokenUsername || ba.Password != "t" {
		t.Errorf("token auth = %#v, %v", m, err)
	}
	m, err = RepoConfig{Auth: Auth{Username: "ci", Token: "t"}}.authMethod()
	if ba, ok := m.(*githttp.BasicAuth); err != nil || !ok || ba.Username != "ci" {
		t.Errorf("token auth with user = %#v, %v", m, err)
	}
	if m, err := (RepoConfig{}).authMethod(); m != nil || err != nil {
		t.Errorf("no auth = %#v, %v", m, err)
	}

	dir := t.TempDir()
	keyFile, _ := testutil.SSHClientKey(t, dir, "id_ed25519")
	knownHosts := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(knownHosts, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err = RepoConfig{URL: "ssh://deploy@git.example/ops.git", Auth: Auth{SSHKeyFile: keyFile, SSHKnownHostsFile: knownHosts}}.authMethod()
	if pk, ok := m.(*gitssh.PublicKeys); err != nil || !ok || pk.User != "deploy" || pk.HostKeyCallback == nil {
		t.Errorf("ssh auth = %#v, %v", m, err)
	}
	m, err = RepoConfig{URL: "git.example:ops.git", Auth: Auth{SSHKeyFile: keyFile}}.authMethod()
	if pk, ok := m.(*gitssh.PublicKeys); err != nil || !ok || pk.User != "git" {
		t.Errorf("ssh auth default user = %#v, %v", m, err)
	}
	if _, err := (RepoConfig{Auth: Auth{SSHKeyFile: filepath.Join(dir, "missing")}}).authMethod(); err == nil || !strings.Contains(err.Error(), "load SSH key") {
		t.Errorf("missing key file: %v", err)
	}
}

func TestJobFileHelpers_RecognizeJobFilesAndTheirVars(t *testing.T) {
	for name, want := range map[string]bool{
		"web.nomad.hcl": true, "a/b/web.nomad": true, "web.hcl": false, "web.vars.hcl": false,
		".nomad": false, ".nomad.hcl": false, "web.nomad.hcl.bak": false, "nomad": false,
	} {
		if IsJobFile(name) != want {
			t.Errorf("IsJobFile(%q) = %v", name, !want)
		}
	}
	for in, want := range map[string]string{
		"web.nomad.hcl": "web.vars.hcl", "jobs/web.nomad": "jobs/web.vars.hcl", "a/b.c.nomad.hcl": "a/b.c.vars.hcl",
	} {
		if got := VarsPathFor(in); got != want {
			t.Errorf("VarsPathFor(%q) = %q, want %q", in, got, want)
		}
	}
	a := JobFile{Content: "ab"}
	b := JobFile{Content: "a", Vars: "b"}
	c := JobFile{Path: "other/path", Content: "ab"}
	if a.ContentHash() == b.ContentHash() {
		t.Error("content and vars are not separated in the hash")
	}
	if a.ContentHash() != c.ContentHash() {
		t.Error("the hash depends on the path")
	}
	if SafeURL("https://u:secret@git.example/x.git") != "https://git.example/x.git" || SafeURL("git@host:x.git") != "git@host:x.git" {
		t.Error("SafeURL")
	}
}

func TestWatcher_Match(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("web.nomad.hcl", `job "web" {}`)
	repo.Commit("v1")
	w := newWatcher(t,
		RepoConfig{Name: "https", URL: "https://GitHub.com/acme/ops.git", Branch: "main"},
		RepoConfig{Name: "ssh", URL: "git@github.com:acme/ops.git", Branch: "main"},
		RepoConfig{Name: "release", URL: "ssh://git@github.com:22/acme/ops", Branch: "release"},
		RepoConfig{Name: "other", URL: "https://github.com/acme/other.git", Branch: "main"},
		RepoConfig{Name: "local", URL: repo.URL()},
	)
	got := strings.Join(w.Match([]string{"https://github.com/acme/ops", "git@github.com:acme/ops.git"}, "main"), ",")
	if got != "https,ssh" {
		t.Errorf("Match(ops, main) = %s, want https,ssh", got)
	}
	if got := strings.Join(w.Match([]string{"https://github.com/acme/ops.git"}, "release"), ","); got != "release" {
		t.Errorf("Match(ops, release) = %s", got)
	}
	// Default branch: any branch before the first fetch, then the resolved one.
	if got := w.Match([]string{repo.URL()}, "feature"); len(got) != 1 {
		t.Errorf("Match(local, feature) before a fetch = %v, want [local]", got)
	}
	if err := w.FetchNow(ctxFor(t), "local"); err != nil {
		t.Fatal(err)
	}
	if got := w.Match([]string{repo.URL()}, "feature"); len(got) != 0 {
		t.Errorf("Match(local, feature) after a fetch = %v, want none", got)
	}
	if got := w.Match([]string{repo.URL() + "/"}, "main"); len(got) != 1 {
		t.Errorf("Match(local, main) = %v, want [local]", got)
	}
	if !w.Has("local") || w.Has("nosuch") {
		t.Error("Has")
	}
}

// RefreshAll asks every poller to fetch now, without waiting.
func (w *Watcher) RefreshAll() {
	for _, r := range w.list() {
		select {
		case r.refresh <- struct{}{}:
		default:
		}
	}
}
