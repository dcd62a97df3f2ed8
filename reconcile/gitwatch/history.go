package gitwatch

import (
	"context"
	"errors"
	"fmt"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// historyDepth is how many commits of the followed branch FilesAt fetches
// when the remote does not give a commit by its hash: an older commit is
// not read.
const historyDepth = 50

// errNoCommit says a clone does not hold a commit.
var errNoCommit = errors.New("commit not fetched")

// FilesAt returns the contents of files (paths from the repository root)
// at one commit of a repository, by path; a file absent at that commit is
// absent from the map. It reads the current snapshot when the commit is
// its own, else the commits fetched before (the clone the fetches go into,
// the history of earlier calls), else fetches that commit alone (depth 1),
// or, from a remote that does not give a commit by its hash, the last
// historyDepth commits of the followed branch. Memory holds the commits it
// fetched until maxIncrementalFetches of them, then starts again.
func (w *Watcher) FilesAt(ctx context.Context, name, commit string, paths ...string) (map[string]string, error) {
	r, ok := w.get(name)
	if !ok {
		return nil, fmt.Errorf("read files of %q: %w", name, ErrUnknownRepo)
	}
	if !plumbing.IsHash(commit) {
		return nil, fmt.Errorf("read files of %q: %q is not a commit hash", name, commit)
	}
	r.mu.RLock()
	snap := r.snapshot
	r.mu.RUnlock()
	if snap != nil && snap.Commit == commit {
		return snap.filesAt(paths), nil
	}
	hash := plumbing.NewHash(commit)
	// The clone the fetches go into holds the commits fetched since it was
	// made; a fetch running now holds it, and then it is not read.
	if r.src.mu.TryLock() {
		local := r.src.local
		var out map[string]string
		var err error = errNoCommit
		if local != nil {
			out, err = readFilesAt(local, hash, paths)
		}
		r.src.mu.Unlock()
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, errNoCommit) {
			return nil, fmt.Errorf("read files at %s: %w", commit[:8], r.scrub(err))
		}
	}
	out, err := r.historyFilesAt(ctx, hash, paths)
	if err != nil {
		return nil, fmt.Errorf("read files at %s: %w", commit[:8], r.scrub(err))
	}
	return out, nil
}

// filesAt returns the contents of the paths a snapshot holds: job files
// and their variables files.
func (s *Snapshot) filesAt(paths []string) map[string]string {
	out := map[string]string{}
	for _, p := range paths {
		for _, f := range s.Files {
			switch p {
			case f.Path:
				out[p] = f.Content
			case f.VarsPath:
				out[p] = f.Vars
			}
		}
	}
	return out
}

// historyFilesAt reads the files from the history of earlier calls, after
// fetching the commit into it when it lacks it.
func (r *repo) historyFilesAt(ctx context.Context, hash plumbing.Hash, paths []string) (map[string]string, error) {
	r.histMu.Lock()
	defer r.histMu.Unlock()
	if r.history != nil {
		if out, err := readFilesAt(r.history, hash, paths); !errors.Is(err, errNoCommit) {
			return out, err
		}
	}
	if err := r.fetchIntoHistory(ctx, hash); err != nil {
		return nil, err
	}
	out, err := readFilesAt(r.history, hash, paths)
	if errors.Is(err, errNoCommit) {
		return nil, fmt.Errorf("the remote gives no commit by its hash, and it is not among the last %d commits of the branch: %w", historyDepth, err)
	}
	return out, err
}

// fetchIntoHistory fetches a commit into the history clone (by its hash,
// or with the last historyDepth commits of the branch from a remote that
// gives no commit by its hash), making the clone first. Called with histMu
// held.
func (r *repo) fetchIntoHistory(ctx context.Context, hash plumbing.Hash) error {
	if r.history != nil {
		if _, err := r.history.CommitObject(hash); err == nil {
			return nil
		}
	}
	if r.history == nil || r.histFetches >= maxIncrementalFetches {
		h, err := git.Init(memory.NewStorage(), nil)
		if err != nil {
			return fmt.Errorf("make a history clone: %w", err)
		}
		if _, err := h.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.cfg.URL}}); err != nil {
			return fmt.Errorf("make a history clone: %w", err)
		}
		r.history, r.histFetches = h, 0
	}
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	auth, err := r.cfg.authMethod()
	if err != nil {
		return err
	}
	r.histFetches++
	err = r.history.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{config.RefSpec(hash.String() + ":refs/nops/history/" + hash.String())},
		Depth:      1,
		Tags:       git.NoTags,
		Auth:       auth,
	})
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		err = r.fetchBranchHistory(ctx, auth)
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fmt.Errorf("fetch: %w", err)
	}
	if _, err := r.history.CommitObject(hash); err != nil {
		return fmt.Errorf("the remote gives no commit by its hash, and it is not among the last %d commits of the branch: %w", historyDepth, errNoCommit)
	}
	return nil
}

// fetchBranchHistory fetches the last historyDepth commits of the followed
// branch into the history clone.
func (r *repo) fetchBranchHistory(ctx context.Context, auth transport.AuthMethod) error {
	r.mu.RLock()
	branch := r.status.Branch
	r.mu.RUnlock()
	if r.cfg.Branch != "" {
		branch = r.cfg.Branch
	}
	if branch == "" {
		return errors.New("the remote gives no commit by its hash, and no branch is known to fetch")
	}
	ref := plumbing.NewBranchReferenceName(branch)
	return r.history.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{config.RefSpec("+" + ref.String() + ":" + plumbing.NewRemoteReferenceName("origin", branch).String())},
		Depth:      historyDepth,
		Tags:       git.NoTags,
		Auth:       auth,
		Force:      true,
	})
}

// readFilesAt reads files at a commit of a clone; errNoCommit when the
// clone does not hold the commit.
func readFilesAt(repo *git.Repository, hash plumbing.Hash, paths []string) (map[string]string, error) {
	commit, err := repo.CommitObject(hash)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, errNoCommit
	}
	if err != nil {
		return nil, fmt.Errorf("read commit: %w", err)
	}
	tree, err := commit.Tree()
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, errNoCommit
	}
	if err != nil {
		return nil, fmt.Errorf("read tree: %w", err)
	}
	out := map[string]string{}
	for _, p := range paths {
		f, err := tree.File(p)
		if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
			continue
		}
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, errNoCommit
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		c, err := f.Contents()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		out[p] = c
	}
	return out, nil
}
