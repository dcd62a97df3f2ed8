package gitwatch

import (
	"errors"
	"fmt"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// ErrAncestryUnknown says the clones cannot tell whether one commit is an
// ancestor of another: they lack one of them, or the history between them
// (a shallow clone).
var ErrAncestryUnknown = errors.New("ancestry not known")

// IsAncestor reports whether commit ancestor is an ancestor of commit
// descendant (or the same commit) in repository name, read from the
// commits its clones hold: the clone the fetches go into and the history
// FilesAt fetched. It fetches nothing. The clones are shallow, so an
// answer needs the history between the two commits: when a walk from
// descendant reaches a commit whose parents were not fetched, the answer
// is ErrAncestryUnknown, never a guess.
func (w *Watcher) IsAncestor(name, ancestor, descendant string) (bool, error) {
	r, ok := w.get(name)
	if !ok {
		return false, fmt.Errorf("ancestry in %q: %w", name, ErrUnknownRepo)
	}
	if !plumbing.IsHash(ancestor) || !plumbing.IsHash(descendant) {
		return false, fmt.Errorf("ancestry in %q: %q and %q must be commit hashes", name, ancestor, descendant)
	}
	if ancestor == descendant {
		return true, nil
	}
	a, d := plumbing.NewHash(ancestor), plumbing.NewHash(descendant)
	// A fetch running now holds the clone: it is then not read, as in
	// FilesAt.
	if r.src.mu.TryLock() {
		local := r.src.local
		var found bool
		err := ErrAncestryUnknown
		if local != nil {
			found, err = isAncestorIn(local, a, d)
		}
		r.src.mu.Unlock()
		if err == nil {
			return found, nil
		}
	}
	r.histMu.Lock()
	defer r.histMu.Unlock()
	if r.history != nil {
		if found, err := isAncestorIn(r.history, a, d); err == nil {
			return found, nil
		}
	}
	return false, fmt.Errorf("is %s an ancestor of %s in %q: %w", ancestor[:8], descendant[:8], name, ErrAncestryUnknown)
}

// isAncestorIn answers IsAncestor in one clone: ErrAncestryUnknown when it
// lacks a commit or the history between them.
func isAncestorIn(repo *git.Repository, ancestor, descendant plumbing.Hash) (bool, error) {
	a, err := repo.CommitObject(ancestor)
	if err != nil {
		return false, ErrAncestryUnknown
	}
	d, err := repo.CommitObject(descendant)
	if err != nil {
		return false, ErrAncestryUnknown
	}
	found, err := a.IsAncestor(d)
	if err != nil {
		// A parent the shallow clone does not hold.
		return false, ErrAncestryUnknown
	}
	return found, nil
}

// SameRemote reports whether two repositories are clones of one remote
// URL, so that their commits belong to one history.
func (w *Watcher) SameRemote(a, b string) bool {
	ra, okA := w.get(a)
	rb, okB := w.get(b)
	return okA && okB && ra.cfg.URL == rb.cfg.URL
}
