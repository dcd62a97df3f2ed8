package gitwatch

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		if r.src.fetches != wantFetches {
			t.Fatalf("%d fetches into the last clone, want %d", r.src.fetches, wantFetches)
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
	r.src.fetches = maxIncrementalFetches
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
	u, requests := countedRemote(t, repo.ServeHTTP(t))
	w := newWatcher(t, RepoConfig{Name: "r", URL: u, Branch: "main"})
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

// TestWatcher_FetchOfOneChangeBringsOnlyNewObjects: a commit that changes
// one of many files, fetched into the last clone, transfers the new
// objects only (the commit, its trees, the changed file), as a thin pack
// whose bases the clone holds; without thin-pack the server sends every
// object of the new tree again. The files are random, so that the pack of
// the first clone cannot be compressed to nothing either.
func TestWatcher_FetchOfOneChangeBringsOnlyNewObjects(t *testing.T) {
	const n = 300
	repo := testutil.NewGitRepo(t)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		repo.WriteFile(fmt.Sprintf("jobs/job-%03d.nomad.hcl", i), fmt.Sprintf("job \"job-%03d\" { meta { r = \"%x\" } }", i, rnd.Uint64()))
	}
	repo.Commit("jobs")
	repo.Pack()
	w := newWatcher(t, RepoConfig{Name: "r", URL: repo.ServeHTTP(t), Branch: "main", Path: "jobs"})
	ctx := ctxFor(t)
	if err := w.FetchNow(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	cloned := repo.ServedBytes()
	for i := range 3 {
		repo.WriteFile("jobs/job-007.nomad.hcl", fmt.Sprintf(`job "job-007" { meta { rev = "%d" } }`, i))
		repo.Commit("change job-007")
		before := repo.ServedBytes()
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		r, _ := w.get("r")
		if r.src.fetches != i+1 {
			t.Fatalf("fetch %d: %d fetches into the last clone, want %d", i, r.src.fetches, i+1)
		}
		s := w.Snapshot("r")
		if s.Commit != repo.Head() || len(s.Files) != n || !strings.Contains(fileMap(s)["jobs/job-007.nomad.hcl"].Content, fmt.Sprintf(`rev = "%d"`, i)) {
			t.Fatalf("fetch %d: snapshot of %s with %d files, want the head %s with %d and the change", i, s.Commit, len(s.Files), repo.Head(), n)
		}
		// The clone's answer is ~10 KB of random file content; a thin
		// pack of one change, with the reference list, a fraction.
		if got := repo.ServedBytes() - before; got*4 > cloned {
			t.Fatalf("fetch %d of one changed file transferred %d bytes, the clone of %d files %d: the whole tree came again", i, got, n, cloned)
		}
	}
}

// TestWatcher_BlocksOfOneBranchShareAFetch: repository blocks that follow
// the same branch of one URL with the same credentials (a folder per
// Nomad cluster) share one clone: fetched together, at start and after a
// push, they cost the remote what one block costs, and each reads its own
// folder. A block asked to fetch after the shared fetch began asks the
// remote itself; a block with other credentials has its own clone.
func TestWatcher_BlocksOfOneBranchShareAFetch(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	for _, c := range []string{"eu", "us"} {
		repo.WriteFile(c+"/web.nomad.hcl", `job "web" { cluster = "`+c+`" }`)
	}
	repo.Commit("a folder per cluster")
	u, requests := countedRemote(t, repo.ServeHTTP(t, testutil.WithBasicAuth("git", "secret")))
	auth := Auth{Username: "git", Password: "secret"}
	other := Auth{Token: "secret", Username: "git"}
	w := newWatcher(t,
		RepoConfig{Name: "eu", URL: u, Branch: "main", Path: "eu", Auth: auth},
		RepoConfig{Name: "us", URL: u, Branch: "main", Path: "us", Auth: auth},
		RepoConfig{Name: "ops", URL: u, Branch: "main", Path: "eu", Auth: other})
	ctx := ctxFor(t)
	if eu, us, ops := w.byName["eu"].src, w.byName["us"].src, w.byName["ops"].src; eu != us || eu == ops {
		t.Fatal("eu and us do not share a source, or ops (other credentials) shares theirs")
	}
	// As a push matching several blocks asks: at once, asked when the
	// push came.
	fetchAll := func(names ...string) {
		t.Helper()
		var wg sync.WaitGroup
		asked := time.Now()
		for _, n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := w.FetchNowAsked(ctx, n, asked); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	check := func(what string, wantRequests int64) {
		t.Helper()
		for _, c := range []string{"eu", "us"} {
			s := w.Snapshot(c)
			if s == nil || s.Commit != repo.Head() {
				t.Fatalf("%s: snapshot of %s %+v, want the head", what, c, s)
			}
			if f := fileMap(s)[c+"/web.nomad.hcl"]; len(s.Files) != 1 || !strings.Contains(f.Content, `"`+c+`"`) {
				t.Fatalf("%s: files of %s: %+v", what, c, s.Files)
			}
		}
		if got := requests.Load(); got != wantRequests {
			t.Fatalf("%s: %d requests to the remote, want %d (one block's)", what, got, wantRequests)
		}
	}

	// The first fetch: one list of the refs and one clone (its refs, then
	// the objects).
	fetchAll("eu", "us")
	check("first fetch", 3)

	// A push: one fetch into the shared clone.
	repo.WriteFile("eu/web.nomad.hcl", `job "web" { cluster = "eu" changed = true }`)
	repo.WriteFile("us/web.nomad.hcl", `job "web" { cluster = "us" changed = true }`)
	repo.Commit("change both")
	requests.Store(0)
	fetchAll("eu", "us")
	check("a push", 2)
	if n := w.byName["eu"].src.fetches; n != 1 {
		t.Fatalf("%d fetches into the shared clone, want 1", n)
	}

	// Asked after that fetch: us asks the remote itself (the head has
	// not moved: one request).
	requests.Store(0)
	fetchAll("us")
	check("a later fetch of one block", 1)

	// ops, with other credentials, clones for itself.
	requests.Store(0)
	fetchAll("ops")
	if s := w.Snapshot("ops"); s == nil || s.Commit != repo.Head() || requests.Load() < 2 {
		t.Fatalf("ops: snapshot %+v after %d requests; want its own clone of the head", s, requests.Load())
	}
}

// countedRemote puts a proxy that counts the requests in front of the git
// HTTP server at served, and returns the repository's URL through it.
func countedRemote(t *testing.T, served string) (string, *atomic.Int64) {
	t.Helper()
	backend, err := url.Parse(served)
	if err != nil {
		t.Fatal(err)
	}
	requests := &atomic.Int64{}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: backend.Scheme, Host: backend.Host})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front.URL + backend.Path, requests
}
