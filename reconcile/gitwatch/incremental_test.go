package gitwatch

import (
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
