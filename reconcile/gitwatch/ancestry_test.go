package gitwatch

import (
	"errors"
	"testing"

	"github.com/nops-dev/nops/testutil"
)

// TestWatcher_IsAncestor answers from the commits the clones hold: yes
// for an older commit of the branch fetched before, no the other way
// round, and "not known" (never a guess) for a commit a shallow clone
// does not reach.
func TestWatcher_IsAncestor(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", "v1")
	first := repo.Commit("first")
	ctx := ctxFor(t)
	w := newWatcher(t, RepoConfig{Name: "r", URL: repo.URL(), Branch: "main"})
	if err := w.FetchNow(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	repo.WriteFile("jobs/web.nomad.hcl", "v2")
	second := repo.Commit("second")
	if err := w.FetchNow(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		anc, desc string
		want      bool
	}{{first, second, true}, {second, first, false}, {second, second, true}} {
		got, err := w.IsAncestor("r", c.anc, c.desc)
		if err != nil || got != c.want {
			t.Errorf("IsAncestor(%s, %s) = %v, %v; want %v", c.anc[:8], c.desc[:8], got, err, c.want)
		}
	}

	// A new watcher clones the head alone (depth 1): the history back to
	// first is not there.
	repo.WriteFile("jobs/web.nomad.hcl", "v3")
	third := repo.Commit("third")
	fresh := newWatcher(t, RepoConfig{Name: "r", URL: repo.URL(), Branch: "main"})
	if err := fresh.FetchNow(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if got, err := fresh.IsAncestor("r", first, third); !errors.Is(err, ErrAncestryUnknown) {
		t.Fatalf("IsAncestor(first, third) in a shallow clone = %v, %v; want ErrAncestryUnknown", got, err)
	}
	if _, err := fresh.IsAncestor("nope", first, third); !errors.Is(err, ErrUnknownRepo) {
		t.Fatalf("unknown repository: %v", err)
	}
	if _, err := fresh.IsAncestor("r", "main", third); err == nil {
		t.Fatal("a branch name was taken for a commit hash")
	}
}
