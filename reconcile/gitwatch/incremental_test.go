package gitwatch

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/nops-dev/nops/testutil"
)

// TestWatcher_FetchesIntoTheLastClone: after the first clone, a new
// commit is fetched into it (changed, added and removed files all seen),
// a rewritten history too, and once the clone is at its limit of fetches
// the next fetch clones again.
func TestWatcher_FetchesIntoTheLastClone(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	for _, id := range []string{"a", "b", "c"} {
		repo.WriteFile(id+".nomad.hcl", `job "`+id+`" {}`)
	}
	first := repo.Commit("three jobs")
	url := repo.ServeHTTP(t)
	w := newWatcher(t, RepoConfig{Name: "r", URL: url, Branch: "main"})
	ctx := ctxFor(t)
	r, _ := w.get("r")
	fetch := func(wantFetches int) map[string]JobFile {
		t.Helper()
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if r.fetches != wantFetches {
			t.Fatalf("%d fetches into the last clone, want %d", r.fetches, wantFetches)
		}
		s := w.Snapshot("r")
		if s.Commit != repo.Head() {
			t.Fatalf("snapshot of %s, want the head %s", s.Commit, repo.Head())
		}
		return fileMap(s)
	}
	if files := fetch(0); len(files) != 3 {
		t.Fatalf("first snapshot: %v", files)
	}

	repo.WriteFile("a.nomad.hcl", `job "a" { changed = true }`)
	repo.Remove("b.nomad.hcl")
	repo.WriteFile("d.nomad.hcl", `job "d" {}`)
	repo.Commit("change a, remove b, add d")
	files := fetch(1)
	if len(files) != 3 || files["a.nomad.hcl"].Content != `job "a" { changed = true }` || files["d.nomad.hcl"].Content == "" {
		t.Fatalf("snapshot after the change: %v", files)
	}
	if h := files["a.nomad.hcl"]; h.ContentHash() != h.contentHash() {
		t.Fatal("a fetched file's hash is not its content's")
	}

	// A force push back to the first commit and past it.
	repo.Git("reset", "--quiet", "--hard", first)
	repo.WriteFile("c.nomad.hcl", `job "c" { rewritten = true }`)
	repo.Commit("rewrite")
	files = fetch(2)
	if len(files) != 3 || files["c.nomad.hcl"].Content != `job "c" { rewritten = true }` || files["a.nomad.hcl"].Content != `job "a" {}` {
		t.Fatalf("snapshot after a force push: %v", files)
	}

	// The clone at its limit: the next fetch clones again.
	r.fetches = maxIncrementalFetches
	repo.WriteFile("a.nomad.hcl", `job "a" { again = true }`)
	repo.Commit("again")
	if files = fetch(0); files["a.nomad.hcl"].Content != `job "a" { again = true }` {
		t.Fatalf("snapshot after a new clone: %v", files)
	}
}

// TestWatcher_NewCommitCostsOneListAndOneFetch: once a configured branch
// has a clone, a new commit costs the remote two requests (the fetch's
// list of refs and the fetch of the objects), with no separate list
// first, and a fetch that finds the head unmoved costs one.
func TestWatcher_NewCommitCostsOneListAndOneFetch(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("a.nomad.hcl", `job "a" {}`)
	repo.Commit("one job")
	backend, err := url.Parse(repo.ServeHTTP(t))
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: backend.Scheme, Host: backend.Host})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	w := newWatcher(t, RepoConfig{Name: "r", URL: front.URL + backend.Path, Branch: "main"})
	ctx := ctxFor(t)
	fetch := func(what string, want int64) {
		t.Helper()
		requests.Store(0)
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if s := w.Snapshot("r"); s == nil || s.Commit != repo.Head() {
			t.Fatalf("%s: snapshot %+v, want the head %s", what, s, repo.Head())
		}
		if got := requests.Load(); got != want {
			t.Fatalf("%s: %d requests to the remote, want %d", what, got, want)
		}
	}
	requests.Store(0)
	if err := w.FetchNow(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	repo.WriteFile("a.nomad.hcl", `job "a" { changed = true }`)
	repo.Commit("change a")
	fetch("a new commit", 2)
	if f := fileMap(w.Snapshot("r"))["a.nomad.hcl"]; f.Content != `job "a" { changed = true }` {
		t.Fatalf("fetched file: %q", f.Content)
	}
	fetch("no new commit", 1)
}
