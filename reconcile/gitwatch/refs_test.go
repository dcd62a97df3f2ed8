package gitwatch

import (
	"errors"
	"strings"
	"testing"

	"github.com/nops-dev/nops/testutil"
)

// TestWatcher_SnapshotAt reads the job files, with their variables files,
// at a branch, a tag and an older commit of the followed branch that no
// ref points to (from a remote that gives no commit by its hash: then the
// branches' recent history), and leaves the watcher's snapshot and status
// as they were. An unknown ref and an unknown repository say so.
func TestWatcher_SnapshotAt(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", "v1")
	repo.WriteFile("jobs/web.vars.hcl", "image = 1")
	first := repo.Commit("first")
	repo.WriteFile("jobs/web.nomad.hcl", "v2")
	head := repo.Commit("second")
	repo.Git("checkout", "-b", "feat")
	repo.WriteFile("jobs/api.nomad", "api")
	repo.WriteFile("README.md", "not a job")
	feat := repo.Commit("add api")
	repo.Git("tag", "-a", "v1", "-m", "release")
	repo.Git("checkout", "main")

	w := newWatcher(t, RepoConfig{Name: "r", URL: repo.ServeHTTP(t), Branch: "main", Path: "jobs"})
	ctx := ctxFor(t)
	if err := w.FetchNow(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	snap, status := w.Snapshot("r"), w.Status()[0]

	files := func(s *Snapshot) string {
		var out []string
		for _, f := range s.Files {
			out = append(out, f.Path+"="+f.Content+"|"+f.VarsPath+"="+f.Vars)
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct{ ref, commit, branch, files string }{
		{"feat", feat, "feat", "jobs/api.nomad=api|=,jobs/web.nomad.hcl=v2|jobs/web.vars.hcl=image = 1"},
		{"v1", feat, "", "jobs/api.nomad=api|=,jobs/web.nomad.hcl=v2|jobs/web.vars.hcl=image = 1"},
		{first, first, "", "jobs/web.nomad.hcl=v1|jobs/web.vars.hcl=image = 1"},
		{"main", head, "main", "jobs/web.nomad.hcl=v2|jobs/web.vars.hcl=image = 1"},
	} {
		s, err := w.SnapshotAt(ctx, "r", c.ref)
		if err != nil {
			t.Fatalf("snapshot at %s: %v", c.ref, err)
		}
		if s.Commit != c.commit || s.Branch != c.branch || s.Repo != "r" || files(s) != c.files {
			t.Fatalf("snapshot at %s: commit %s branch %q files %s; want %s %q %s", c.ref, s.Commit, s.Branch, files(s),
				c.commit, c.branch, c.files)
		}
	}
	if w.Snapshot("r") != snap || w.Status()[0] != status {
		t.Fatalf("SnapshotAt changed the watcher: snapshot %s, status %+v", w.Snapshot("r").Commit, w.Status()[0])
	}
	for _, ref := range []string{"nope", strings.Repeat("ab", 20), ""} {
		if _, err := w.SnapshotAt(ctx, "r", ref); !errors.Is(err, ErrUnknownRef) {
			t.Fatalf("snapshot at unknown ref %q: %v, want ErrUnknownRef", ref, err)
		}
	}
	if _, err := w.SnapshotAt(ctx, "nope", "main"); !errors.Is(err, ErrUnknownRepo) {
		t.Fatalf("snapshot of an unknown repository: %v", err)
	}
}
