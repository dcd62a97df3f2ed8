package gitwatch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// ErrUnknownRef is returned for a ref the remote has no branch, tag or
// commit of.
var ErrUnknownRef = errors.New("unknown ref")

// previewRef is the local ref a SnapshotAt clone fetches the asked commit
// into.
const previewRef = "refs/nops/at"

// SnapshotAt reads the job files of a repository at ref, a branch or tag
// name on the remote (or a full ref name, refs/...) or a full commit hash,
// as a snapshot of that commit would hold them (same path, same job-file
// rule). It fetches that one commit into a clone of its own, in memory,
// dropped once read: the watcher's snapshot, status, clone and history are
// left as they are, and nothing touches the local disk. Branch on the
// answer is the branch asked for, empty for a tag or a commit. An unknown
// repository is ErrUnknownRepo, a ref the remote does not have
// ErrUnknownRef.
func (w *Watcher) SnapshotAt(ctx context.Context, name, ref string) (*Snapshot, error) {
	r, ok := w.get(name)
	if !ok {
		return nil, fmt.Errorf("read %q at %q: %w", name, ref, ErrUnknownRepo)
	}
	snap, err := r.snapshotAt(ctx, strings.TrimSpace(ref))
	if err != nil {
		if errors.Is(err, ErrUnknownRef) {
			// Its message names the repository and the ref, and no secret.
			return nil, err
		}
		return nil, fmt.Errorf("read %q at %q: %w", name, ref, r.scrub(err))
	}
	return snap, nil
}

func (r *repo) snapshotAt(ctx context.Context, ref string) (*Snapshot, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: no ref given for repository %q: name a branch, a tag or a commit hash", ErrUnknownRef, r.cfg.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	auth, err := r.cfg.authMethod()
	if err != nil {
		return nil, err
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{r.cfg.URL}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil {
		return nil, fmt.Errorf("list remote refs: %w", err)
	}
	byName := make(map[plumbing.ReferenceName]*plumbing.Reference, len(refs))
	for _, rf := range refs {
		byName[rf.Name()] = rf
	}
	// A name: a branch first, as git resolves it, then a tag.
	var found plumbing.ReferenceName
	branch := ""
	for _, cand := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName(ref), plumbing.NewTagReferenceName(ref), plumbing.ReferenceName(ref)} {
		if rf, ok := byName[cand]; ok && rf.Type() == plumbing.HashReference && (cand.IsBranch() || cand.IsTag()) {
			found = cand
			if cand.IsBranch() {
				branch = cand.Short()
			}
			break
		}
	}
	var want plumbing.Hash
	if found == "" {
		if !plumbing.IsHash(ref) {
			return nil, fmt.Errorf("%w: repository %q has no branch or tag %q, and it is not a full commit hash", ErrUnknownRef, r.cfg.Name, ref)
		}
		want = plumbing.NewHash(ref)
		// A commit some ref points to is fetched by that ref: every
		// server gives it.
		for name, rf := range byName {
			if rf.Hash() == want && (name.IsBranch() || name.IsTag()) {
				found = name
				break
			}
		}
	}
	clone, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		return nil, fmt.Errorf("make a clone: %w", err)
	}
	if _, err := clone.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.cfg.URL}}); err != nil {
		return nil, fmt.Errorf("make a clone: %w", err)
	}
	fetch := func(spec string, depth int) error {
		err := clone.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{config.RefSpec(spec)},
			Depth: depth, Tags: git.NoTags, Auth: auth, Force: true})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return err
		}
		return nil
	}
	if found != "" {
		err = fetch("+"+found.String()+":"+previewRef, 1)
	} else {
		err = fetch("+"+want.String()+":"+previewRef, 1)
		if errors.Is(err, git.ErrExactSHA1NotSupported) {
			// The remote gives no commit by its hash: look for it in
			// the recent history of its branches.
			err = fetch("+refs/heads/*:refs/remotes/origin/*", historyDepth)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", ref, err)
	}
	if found != "" {
		rf, err := clone.Reference(previewRef, true)
		if err != nil {
			return nil, fmt.Errorf("read fetched %s: %w", found, err)
		}
		want = rf.Hash()
		// An annotated tag points to a tag object, which points to the
		// commit.
		if tag, err := clone.TagObject(want); err == nil {
			c, err := tag.Commit()
			if err != nil {
				return nil, fmt.Errorf("read the commit of tag %s: %w", ref, err)
			}
			want = c.Hash
		}
	}
	if _, err := clone.CommitObject(want); errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: repository %q gives no commit %s (not by its hash, nor among the last %d commits of its branches)",
			ErrUnknownRef, r.cfg.Name, ref, historyDepth)
	}
	return r.snapshotOf(clone, want, branch)
}
