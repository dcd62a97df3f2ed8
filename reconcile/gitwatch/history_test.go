package gitwatch

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/nops-dev/nops/testutil"
)

// TestSnapshot_CommitInfo: a snapshot says the commit's message, author,
// committer (here the repository's user, who is not the author), time and
// link.
func TestSnapshot_CommitInfo(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("web.nomad.hcl", `job "web" {}`)
	head := repo.CommitAs("Ada Lovelace <ada@example.com>", "Bump web to v2\n\nThe new image.")
	w := newWatcher(t, RepoConfig{Name: "r", URL: repo.URL(), Branch: "main", WebURL: "https://git.example.com/ops/jobs/"})
	if err := w.FetchNow(ctxFor(t), "r"); err != nil {
		t.Fatal(err)
	}
	info := w.Snapshot("r").Info
	if info.Message != "Bump web to v2\n\nThe new image.\n" || info.Author != "Ada Lovelace <ada@example.com>" || info.Committer != "Nops Test <test@nops.invalid>" ||
		info.URL != "https://git.example.com/ops/jobs/commit/"+head || time.Since(info.Time) > time.Hour || info.Time.Location() != time.UTC {
		t.Fatalf("commit info: %+v", info)
	}
}

// TestWatcher_FilesAt reads files at an older commit: from the clone the
// fetches went into, else by fetching the commit, from a remote that gives
// commits by hash and from one that does not (then the branch's last
// commits).
func TestWatcher_FilesAt(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", "v1")
	repo.WriteFile("jobs/web.vars.hcl", "image = 1")
	first := repo.Commit("first")
	repo.WriteFile("jobs/web.nomad.hcl", "v2")
	repo.Remove("jobs/web.vars.hcl")
	second := repo.Commit("second")
	paths := []string{"jobs/web.nomad.hcl", "jobs/web.vars.hcl"}
	ctx := ctxFor(t)
	check := func(t *testing.T, w *Watcher, commit string, want map[string]string) {
		t.Helper()
		got, err := w.FilesAt(ctx, "r", commit, paths...)
		if err != nil {
			t.Fatalf("files at %s: %v", commit[:8], err)
		}
		if len(got) != len(want) {
			t.Fatalf("files at %s: %v, want %v", commit[:8], got, want)
		}
		for p, c := range want {
			if got[p] != c {
				t.Fatalf("files at %s: %v, want %v", commit[:8], got, want)
			}
		}
	}
	v1 := map[string]string{"jobs/web.nomad.hcl": "v1", "jobs/web.vars.hcl": "image = 1"}
	v2 := map[string]string{"jobs/web.nomad.hcl": "v2"}

	t.Run("from the last clone and the snapshot", func(t *testing.T) {
		r2 := testutil.NewGitRepo(t) // a remote that moves from first to second
		r2.Git("fetch", "--quiet", repo.Dir, "main")
		r2.Git("reset", "--quiet", "--hard", first)
		w := newWatcher(t, RepoConfig{Name: "r", URL: r2.URL(), Branch: "main", Path: "jobs"})
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		r2.Git("reset", "--quiet", "--hard", second)
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		check(t, w, second, v2)
		check(t, w, first, v1)
		if r, _ := w.get("r"); r.history != nil {
			t.Fatal("the history was fetched for a commit the last clone holds")
		}
	})
	t.Run("fetched by hash", func(t *testing.T) {
		repo.Git("config", "uploadpack.allowReachableSHA1InWant", "true")
		t.Cleanup(func() { repo.Git("config", "--unset", "uploadpack.allowReachableSHA1InWant") })
		w := newWatcher(t, RepoConfig{Name: "r", URL: repo.ServeHTTP(t), Branch: "main"})
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		check(t, w, first, v1)
		check(t, w, first, v1)
		r, _ := w.get("r")
		if r.histFetches != 1 {
			t.Fatalf("%d history fetches, want 1: the second read is from memory", r.histFetches)
		}
		if _, err := r.history.Reference(plumbing.ReferenceName("refs/nops/history/"+first), false); err != nil {
			t.Fatalf("the commit was not fetched by its hash: %v", err)
		}
	})
	t.Run("from the branch's last commits", func(t *testing.T) {
		w := newWatcher(t, RepoConfig{Name: "r", URL: repo.ServeHTTP(t), Branch: "main"})
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		check(t, w, first, v1)
		r, _ := w.get("r")
		if _, err := r.history.Reference("refs/remotes/origin/main", false); err != nil {
			t.Fatalf("the branch's history was not fetched: %v", err)
		}
		// A commit no branch holds is not found, and says why.
		repo.Git("checkout", "--quiet", "-b", "side")
		repo.WriteFile("jobs/web.nomad.hcl", "side")
		side := repo.Commit("side")
		repo.Git("checkout", "--quiet", "main")
		_, err := w.FilesAt(ctx, "r", side, paths...)
		if !errors.Is(err, errNoCommit) || !strings.Contains(err.Error(), "last 50 commits") {
			t.Fatalf("a commit off the branch: %v", err)
		}
	})
	t.Run("from a file URL", func(t *testing.T) {
		w := newWatcher(t, RepoConfig{Name: "r", URL: repo.URL(), Branch: "main"})
		if err := w.FetchNow(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		check(t, w, first, v1)
	})
	t.Run("refused", func(t *testing.T) {
		w := newWatcher(t, RepoConfig{Name: "r", URL: repo.URL(), Branch: "main"})
		if _, err := w.FilesAt(ctx, "nope", first); !errors.Is(err, ErrUnknownRepo) {
			t.Fatalf("unknown repository: %v", err)
		}
		if _, err := w.FilesAt(ctx, "r", "main"); err == nil || !strings.Contains(err.Error(), "not a commit hash") {
			t.Fatalf("a branch name for a commit: %v", err)
		}
	})
}
