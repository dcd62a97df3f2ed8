package gitwatch

import (
	"reflect"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
)

// Update, as a configuration reload calls it, adds, changes and removes
// repositories of a running watcher; an unchanged repository keeps its
// snapshot, and an invalid set changes nothing.
func TestWatcher_UpdateWhileRunning(t *testing.T) {
	a := testutil.NewGitRepoWith(t, "a", map[string]string{"a.nomad": `job "a" {}`})
	b := testutil.NewGitRepoWith(t, "b", map[string]string{"b.nomad": `job "b" {}`})
	b.Git("checkout", "-q", "-b", "next")
	b.WriteFile("next.nomad", `job "next" {}`)
	nextHead := b.Commit("next")

	w := newWatcher(t, RepoConfig{Name: "a", URL: a.URL(), PollInterval: time.Hour})
	runWatcher(t, w)
	waitFor(t, "first snapshot of a", func() bool { return w.Snapshot("a") != nil })
	snapA := w.Snapshot("a")

	added, changed, removed, err := w.Update([]RepoConfig{
		{Name: "a", URL: a.URL(), PollInterval: time.Hour},
		{Name: "b", URL: b.URL(), Branch: "main", PollInterval: time.Hour},
	})
	if err != nil || !reflect.DeepEqual(added, []string{"b"}) || changed != nil || removed != nil {
		t.Fatalf("Update = %v %v %v %v", added, changed, removed, err)
	}
	waitFor(t, "first snapshot of b", func() bool { return w.Snapshot("b") != nil })
	if w.Snapshot("a") != snapA {
		t.Errorf("the unchanged repository a was fetched again")
	}

	// A changed branch is fetched afresh; a removed repository goes.
	added, changed, removed, err = w.Update([]RepoConfig{{Name: "b", URL: b.URL(), Branch: "next", PollInterval: time.Hour}})
	if err != nil || added != nil || !reflect.DeepEqual(changed, []string{"b"}) || !reflect.DeepEqual(removed, []string{"a"}) {
		t.Fatalf("Update = %v %v %v %v", added, changed, removed, err)
	}
	waitFor(t, "b on branch next", func() bool { s := w.Snapshot("b"); return s != nil && s.Commit == nextHead })
	if w.Has("a") || len(w.Status()) != 1 {
		t.Errorf("repository a is still watched: %+v", w.Status())
	}

	// Invalid: nothing changes.
	if _, _, _, err := w.Update([]RepoConfig{{Name: "b", URL: ""}, {Name: "c", URL: a.URL()}}); err == nil {
		t.Fatal("an invalid set was accepted")
	}
	if st := w.Status(); len(st) != 1 || st[0].Name != "b" || st[0].Branch != "next" {
		t.Fatalf("an invalid update changed the watcher: %+v", st)
	}
}
