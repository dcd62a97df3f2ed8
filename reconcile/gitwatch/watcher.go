// Package gitwatch turns git repositories into snapshots of job files.
//
// A Watcher polls each configured repository in its own goroutine, and can be
// told to fetch at once (Refresh for a webhook, FetchNow to wait for it). A
// poll asks the remote for the head of the branch (one ls-remote round trip)
// and, only when the head moved, makes a shallow, single-branch clone of that
// commit into memory, reads every job file under the configured path with its
// variables file, and publishes the result as a new Snapshot, with what the
// commit says of itself (CommitInfo: message, author, time, link). Nothing
// touches the local disk, and the clone is dropped once read, so memory
// holds one snapshot per repository however long the Watcher runs (a
// long-lived repository that fetched every new commit into it would only
// grow). FilesAt reads files at an older commit, for a deployment's file
// diff, fetching that commit when memory lacks it.
//
// Guarantees:
//
//   - Snapshots always returns, for every repository that was fetched once,
//     a complete snapshot of one commit: a failed fetch keeps the last good
//     snapshot and records the error on the repository's status.
//   - Notify fires (coalesced) after a snapshot with a new head is published,
//     including the first snapshot of each repository, and after a head is
//     refused for its signature (once per refusal, not at every poll).
//   - With Verify, a published snapshot is always of a head whose signature
//     verified by a trusted key (verify.go); a refused head leaves the last
//     verified snapshot in place and names itself and the reason in the
//     status.
//   - Fetches of one repository never overlap; Refresh requests coalesce.
//   - Passwords and tokens never appear in status or logs.
package gitwatch

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/hashicorp/go-hclog"
)

// FetchTimeout bounds one fetch of one repository: a first clone of a
// large repository over a slow link, while a stuck server cannot hold the
// repository's loop for longer.
const FetchTimeout = 2 * time.Minute

// ErrUnknownRepo is returned for a repository name that is not configured.
var ErrUnknownRepo = errors.New("unknown repository")

// RepoStatus is what an operator sees of a repository.
type RepoStatus struct {
	Name string
	// URL with any password or token removed.
	URL    string
	Branch string
	Path   string
	// Head is the commit of the current snapshot, empty before the first
	// successful fetch.
	Head string
	// LastFetch is when the last fetch ended, successful or not.
	LastFetch time.Time
	// LastSuccess is when a fetch last succeeded.
	LastSuccess time.Time
	// LastError is the error of the last fetch, empty when it succeeded.
	LastError string
	// Failures counts the fetches that failed since the watcher started
	// watching the repository.
	Failures uint64
	// Files is the number of job files in the current snapshot.
	Files int
	// Refused is the head commit last refused for its signature (a
	// repository with Verify), empty once a verified head is taken;
	// LastError says why.
	Refused string
}

// Watcher watches a fixed set of repositories. It is safe for concurrent
// use.
type Watcher struct {
	logger hclog.Logger
	notify chan struct{}
	// changed wakes Run after Update changed the repositories.
	changed chan struct{}

	// mu guards the set of repositories, which Update replaces.
	mu     sync.RWMutex
	repos  []*repo
	byName map[string]*repo
}

type repo struct {
	cfg    RepoConfig
	dir    string // cleaned Path
	logger hclog.Logger

	refresh chan struct{}
	fetchMu sync.Mutex // one fetch at a time

	mu       sync.RWMutex
	snapshot *Snapshot
	status   RepoStatus
	// read is what the last snapshot read, which the next one takes
	// rather than reading again. Guarded by mu.
	read *readCache

	// src holds the in-memory clone the fetches go into, shared with
	// the other repository blocks of the same remote branch (source).
	src *source
	// verifier checks the head's signature during one fetch, nil without
	// Verify; refused is the head last refused, re-verified rather than
	// fetched again while the remote still points to it. Guarded by
	// fetchMu.
	verifier *Verifier
	refused  *object.Commit
	// verified is the last verified head the replicated repository
	// status records (SetVerified): a server that becomes leader while
	// the branch's head is refused serves it, verified again, instead of
	// no snapshot. Guarded by fetchMu.
	verified string

	// history holds the older commits FilesAt fetched, histFetches
	// counts them; guarded by histMu.
	histMu      sync.Mutex
	history     *git.Repository
	histFetches int
}

// maxIncrementalFetches bounds the fetches into one clone: each adds the
// new commit's objects to memory, so after this many the next fetch is a
// new clone.
const maxIncrementalFetches = 100

// source is the in-memory clone of one remote branch, with what was last
// fetched into it. Repository blocks that follow the same branch of the
// same URL with the same credentials and signature rules (a repository
// with a folder per Nomad cluster, say) share one: a push they all match
// costs the remote one fetch and the server one clone, and each block
// reads its own directory of it. A block without a configured branch has
// its own.
type source struct {
	// mu is held through a fetch and any read of local.
	mu sync.Mutex
	// local is the clone of the last fetch, of branch localBranch, that
	// the next fetches add to (fetchInto); fetches counts them.
	local       *git.Repository
	localBranch string
	fetches     int
	// fetchedAt is when the last fetch that reached the remote and took
	// its head into local began, head that head: a block asked to fetch
	// before then reads head from local rather than asking the remote
	// again (fetchedSince).
	fetchedAt time.Time
	head      plumbing.Hash
}

// sourceKey is what repository blocks must share to share a source: the
// URL, the configured branch, the credentials and the signature rules.
// Empty for a block without a configured branch, which shares nothing.
func sourceKey(cfg RepoConfig) string {
	if cfg.Branch == "" {
		return ""
	}
	verify := Verify{}
	if cfg.Verify != nil {
		verify = *cfg.Verify
	}
	return fmt.Sprintf("%q %q %#v %t %#v", cfg.URL, cfg.Branch, cfg.Auth, cfg.Verify != nil, verify)
}

// New validates the configuration of every repository and returns a Watcher
// for them. It does not contact any remote; Run and FetchNow do.
func New(repos []RepoConfig, logger hclog.Logger) (*Watcher, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	w := &Watcher{
		logger:  logger,
		byName:  map[string]*repo{},
		notify:  make(chan struct{}, 1),
		changed: make(chan struct{}, 1),
	}
	list, byName, err := w.build(repos, nil)
	if err != nil {
		return nil, err
	}
	w.repos, w.byName = list, byName
	return w, nil
}

// build validates repos and returns them as the watcher's set. A
// repository whose configuration is unchanged in keep is kept as it is,
// with its snapshot and status.
func (w *Watcher) build(repos []RepoConfig, keep map[string]*repo) ([]*repo, map[string]*repo, error) {
	var list []*repo
	byName := make(map[string]*repo, len(repos))
	var errs []error
	// The sources of the blocks kept are shared with new blocks of the
	// same key.
	sources := map[string]*source{}
	for _, cfg := range repos {
		if old, ok := keep[cfg.Name]; ok {
			if k := sourceKey(old.cfg); k != "" && sources[k] == nil {
				sources[k] = old.src
			}
		}
	}
	for _, cfg := range repos {
		if err := cfg.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, dup := byName[cfg.Name]; dup {
			errs = append(errs, fmt.Errorf("repository %q is configured twice", cfg.Name))
			continue
		}
		dir, _ := cleanPath(cfg.Path)
		if cfg.Verify != nil {
			if _, err := LoadVerifier(*cfg.Verify); err != nil {
				errs = append(errs, fmt.Errorf("repository %q: %w", cfg.Name, err))
				continue
			}
		}
		if cfg.PollInterval == 0 {
			cfg.PollInterval = DefaultPollInterval
		}
		if old, ok := keep[cfg.Name]; ok && reflect.DeepEqual(old.cfg, cfg) {
			list = append(list, old)
			byName[cfg.Name] = old
			continue
		}
		src := &source{}
		if k := sourceKey(cfg); k != "" {
			if shared := sources[k]; shared != nil {
				src = shared
			}
			sources[k] = src
		}
		r := &repo{
			cfg:     cfg,
			dir:     dir,
			src:     src,
			logger:  w.logger.With("repo", cfg.Name),
			refresh: make(chan struct{}, 1),
			status: RepoStatus{
				Name:   cfg.Name,
				URL:    SafeURL(cfg.URL),
				Branch: cfg.Branch,
				Path:   dir,
			},
		}
		list = append(list, r)
		byName[cfg.Name] = r
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return list, byName, nil
}

// Update replaces the repositories watched, as a configuration reload
// does: a repository whose configuration is unchanged keeps its snapshot;
// a new or changed one is fetched afresh; a removed one stops being
// polled. Invalid configurations change nothing. It returns the names of
// the repositories added, changed and removed.
func (w *Watcher) Update(repos []RepoConfig) (added, changed, removed []string, err error) {
	w.mu.Lock()
	list, byName, err := w.build(repos, w.byName)
	if err != nil {
		w.mu.Unlock()
		return nil, nil, nil, err
	}
	for name, r := range byName {
		old, ok := w.byName[name]
		switch {
		case !ok:
			added = append(added, name)
		case old != r:
			changed = append(changed, name)
		}
	}
	for name := range w.byName {
		if _, ok := byName[name]; !ok {
			removed = append(removed, name)
		}
	}
	w.repos, w.byName = list, byName
	w.mu.Unlock()
	sort.Strings(added)
	sort.Strings(changed)
	sort.Strings(removed)
	select {
	case w.changed <- struct{}{}:
	default:
	}
	if len(added)+len(changed)+len(removed) > 0 {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	return added, changed, removed, nil
}

// list returns the repositories watched now.
func (w *Watcher) list() []*repo {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.repos
}

// get returns one repository.
func (w *Watcher) get(name string) (*repo, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	r, ok := w.byName[name]
	return r, ok
}

// Run polls every repository until ctx ends: at once, then every
// PollInterval and on every Refresh. It returns when all pollers stopped.
func (w *Watcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	running := map[*repo]context.CancelFunc{}
	resync := func() {
		current := map[*repo]bool{}
		for _, r := range w.list() {
			current[r] = true
			if _, ok := running[r]; ok {
				continue
			}
			rctx, cancel := context.WithCancel(ctx)
			running[r] = cancel
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.poll(rctx, r)
			}()
		}
		for r, cancel := range running {
			if !current[r] {
				cancel()
				delete(running, r)
			}
		}
	}
	resync()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-w.changed:
			resync()
		}
	}
}

func (w *Watcher) poll(ctx context.Context, r *repo) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-r.refresh:
		}
		_ = w.fetch(ctx, r, time.Now())
		timer.Reset(r.cfg.PollInterval)
	}
}

// Refresh asks the poller of a repository to fetch now. It does not wait;
// requests made while a fetch is pending coalesce into one.
func (w *Watcher) Refresh(name string) error {
	r, ok := w.get(name)
	if !ok {
		return fmt.Errorf("refresh %q: %w", name, ErrUnknownRepo)
	}
	select {
	case r.refresh <- struct{}{}:
	default:
	}
	return nil
}

// FetchNow fetches a repository and returns when its snapshot and status are
// up to date, with the fetch error if any.
func (w *Watcher) FetchNow(ctx context.Context, name string) error {
	return w.FetchNowAsked(ctx, name, time.Now())
}

// FetchNowAsked is FetchNow for a fetch asked for at asked, such as the
// receipt of a push that several repositories match: a fetch of another
// repository block of the same source (the same branch of the same URL)
// that began after asked answers for this block too, without asking the
// remote again.
func (w *Watcher) FetchNowAsked(ctx context.Context, name string, asked time.Time) error {
	r, ok := w.get(name)
	if !ok {
		return fmt.Errorf("fetch %q: %w", name, ErrUnknownRepo)
	}
	return w.fetch(ctx, r, asked)
}

// Notify returns a channel that receives a value after the head of any
// repository moved, or a new head was refused for its signature. Several
// moves before a receive give one value.
func (w *Watcher) Notify() <-chan struct{} { return w.notify }

// Snapshots returns the current snapshot of every repository that has one,
// in configuration order.
func (w *Watcher) Snapshots() []*Snapshot {
	repos := w.list()
	out := make([]*Snapshot, 0, len(repos))
	for _, r := range repos {
		r.mu.RLock()
		s := r.snapshot
		r.mu.RUnlock()
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Snapshot returns the current snapshot of one repository, nil before its
// first successful fetch.
func (w *Watcher) Snapshot(name string) *Snapshot {
	r, ok := w.get(name)
	if !ok {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.snapshot
}

// SetVerified tells the watcher the last head of a repository verified
// before (by this server or another leader: the replicated repository
// status), for a repository whose commits must be signed (Verify). While
// this watcher has no snapshot of the repository and the branch's head is
// refused for its signature, it fetches that commit, verifies it with the
// keys of now, and serves it: the last verified commit stays the source
// of truth across a change of leader. Without Verify it does nothing.
func (w *Watcher) SetVerified(name, commit string) {
	r, ok := w.get(name)
	if !ok || r.cfg.Verify == nil || !plumbing.IsHash(commit) {
		return
	}
	r.fetchMu.Lock()
	r.verified = commit
	r.fetchMu.Unlock()
}

// Status returns the status of every repository, in configuration order.
func (w *Watcher) Status() []RepoStatus {
	repos := w.list()
	out := make([]RepoStatus, 0, len(repos))
	for _, r := range repos {
		r.mu.RLock()
		out = append(out, r.status)
		r.mu.RUnlock()
	}
	return out
}

// fetch brings one repository up to date and records the outcome.
func (w *Watcher) fetch(ctx context.Context, r *repo, asked time.Time) error {
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	start := time.Now()

	snap, err := r.fetchSnapshot(ctx, asked)
	if refusedErr := (*RefusedError)(nil); errors.As(err, &refusedErr) && parent.Err() == nil {
		if last := r.lastVerified(ctx, refusedErr.Commit); last != nil {
			r.mu.Lock()
			r.snapshot = last
			// The status says what is served: the replicated head stays
			// the last verified one, for the next leader too.
			// It was fetched and verified now: detection takes it as a
			// snapshot of this term.
			r.status.Head, r.status.Files, r.status.LastSuccess = last.Commit, len(last.Files), time.Now()
			if r.status.Branch == "" {
				r.status.Branch = last.Branch
			}
			r.mu.Unlock()
			r.logger.Info("serving the last verified commit while the head is refused", "commit", last.Commit, "refused", refusedErr.Commit)
			select {
			case w.notify <- struct{}{}:
			default:
			}
		}
	}
	now := time.Now()
	if err != nil && parent.Err() != nil {
		// Shutting down: not a failure of the repository.
		return fmt.Errorf("fetch %q: %w", r.cfg.Name, parent.Err())
	}

	r.mu.Lock()
	r.status.LastFetch = now
	if err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			r.status.Refused = refused.Commit
		}
		err = r.scrub(err)
		prev := r.status.LastError
		r.status.LastError = err.Error()
		r.status.Failures++
		r.mu.Unlock()
		switch {
		case prev == err.Error():
			r.logger.Debug("fetch failed again", "error", err)
		case refused != nil:
			r.logger.Warn("head commit refused for its signature; keeping the last verified snapshot",
				"commit", refused.Commit, "reason", refused.Reason, "detail", refused.Detail)
			// The detector records the refusal in the repository's
			// status, and its notification, at once.
			select {
			case w.notify <- struct{}{}:
			default:
			}
		default:
			r.logger.Warn("fetch failed; keeping the last good snapshot", "url", r.status.URL, "error", err)
		}
		return err
	}
	r.status.LastError = ""
	r.status.Refused = ""
	r.status.LastSuccess = now
	moved := snap != nil
	if moved {
		r.snapshot = snap
		r.status.Head = snap.Commit
		r.status.Branch = snap.Branch
		r.status.Files = len(snap.Files)
	}
	r.mu.Unlock()

	if moved {
		r.logger.Info("new commit", "commit", snap.Commit, "branch", snap.Branch, "files", len(snap.Files), "duration", now.Sub(start))
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	return nil
}

// fetchSnapshot returns the snapshot of the remote head, or nil when the
// head is the one of the current snapshot. A configured branch with a
// clone of the last fetch is fetched into at once (fetchInto): the fetch's
// own list of the remote's refs tells whether the head moved, so a new
// commit costs the remote one list and one fetch, not a list first. Any
// other case, or a fetch into the clone that fails, lists the remote's
// refs and clones the head if it moved.
func (r *repo) fetchSnapshot(ctx context.Context, asked time.Time) (*Snapshot, error) {
	auth, err := r.cfg.authMethod()
	if err != nil {
		return nil, err
	}
	// The key files are read at every fetch, as the SSH key is: a key
	// added or removed is in effect without a restart.
	r.verifier = nil
	if r.cfg.Verify != nil {
		if r.verifier, err = LoadVerifier(*r.cfg.Verify); err != nil {
			return nil, err
		}
	}
	r.src.mu.Lock()
	defer r.src.mu.Unlock()
	if snap, ok, err := r.fetchedSince(asked); ok {
		return snap, err
	}
	if snap, ok, err := r.fetchInto(ctx, auth); ok {
		return snap, err
	}
	head, branch, err := r.remoteHead(ctx, auth)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	cur := r.snapshot
	r.mu.RUnlock()
	if cur != nil && cur.Commit == head.String() {
		r.refused = nil
		return nil, nil
	}
	if r.refused != nil && r.refused.Hash == head && r.verifier != nil {
		// Still the refused head: check it again, with the keys of now,
		// before cloning it again.
		if _, err := r.verifier.VerifyCommit(r.refused); err != nil {
			return nil, err
		}
	}
	return r.clone(ctx, auth, branch)
}

// fetchInto fetches the configured branch into the clone of the last
// fetch, which then receives only the objects it lacks (a commit that
// changes one of 10,000 files brings one file, not 10,000), and reads the
// new head's job files. ok is false when there is no clone to fetch into,
// or the fetch failed; snap is nil when the head did not move.
//
// A head refused for its signature keeps the clone (the next fetch checks
// it again without transferring it) and returns the refusal with ok true.
func (r *repo) fetchInto(ctx context.Context, auth transport.AuthMethod) (snap *Snapshot, ok bool, err error) {
	branch, src := r.cfg.Branch, r.src
	r.mu.RLock()
	cur := r.snapshot
	r.mu.RUnlock()
	if src.local == nil || cur == nil || branch == "" || branch != src.localBranch || src.fetches >= maxIncrementalFetches {
		return nil, false, nil
	}
	local := src.local
	// Whatever happens, the next fetch clones again unless this one works.
	src.local = nil
	began := time.Now()
	tracking := plumbing.NewRemoteReferenceName("origin", branch)
	err = local.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{config.RefSpec("+" + plumbing.NewBranchReferenceName(branch).String() + ":" + tracking.String())},
		Depth:      1,
		Tags:       git.NoTags,
		Auth:       auth,
		Force:      true,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		r.logger.Debug("fetch into the last clone failed; listing the remote and cloning again", "error", r.scrub(err))
		return nil, false, nil
	}
	ref, err := local.Reference(tracking, true)
	if err != nil {
		r.logger.Debug("fetched head not found; listing the remote and cloning again", "error", r.scrub(err))
		return nil, false, nil
	}
	src.fetchedAt, src.head = began, ref.Hash()
	if ref.Hash().String() == cur.Commit {
		src.local, r.refused = local, nil
		return nil, true, nil
	}
	if snap, err = r.snapshotOf(local, ref.Hash(), branch); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			src.local = local
			return nil, true, err
		}
		r.logger.Debug("fetched head not read; listing the remote and cloning again", "error", r.scrub(err))
		return nil, false, nil
	}
	src.local, src.fetches = local, src.fetches+1
	return snap, true, nil
}

// fetchedSince reads the head a fetch of another repository block of the
// same source took into the shared clone, when that fetch began after
// this block was asked to fetch (asked): what the remote answered then is
// as new as what it would answer now. ok is false when no such fetch
// happened, or its head cannot be read here; snap is nil when the head is
// this block's snapshot already. A refused head is refused here too (the
// blocks of a source share their signature rules).
func (r *repo) fetchedSince(asked time.Time) (snap *Snapshot, ok bool, err error) {
	src, branch := r.src, r.cfg.Branch
	if src.local == nil || branch == "" || branch != src.localBranch || !src.fetchedAt.After(asked) {
		return nil, false, nil
	}
	r.mu.RLock()
	cur := r.snapshot
	r.mu.RUnlock()
	if cur != nil && cur.Commit == src.head.String() {
		r.refused = nil
		return nil, true, nil
	}
	if snap, err = r.snapshotOf(src.local, src.head, branch); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			return nil, true, err
		}
		r.logger.Debug("head fetched for another repository block not read; fetching", "error", r.scrub(err))
		return nil, false, nil
	}
	return snap, true, nil
}

// remoteHead asks the remote for the commit the followed branch points to.
// With no configured branch it follows HEAD and returns the branch HEAD
// names, when the remote says.
func (r *repo) remoteHead(ctx context.Context, auth transport.AuthMethod) (plumbing.Hash, string, error) {
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{r.cfg.URL}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil {
		if errors.Is(err, transport.ErrEmptyRemoteRepository) {
			return plumbing.ZeroHash, "", errors.New("the repository is empty")
		}
		return plumbing.ZeroHash, "", fmt.Errorf("list remote refs: %w", err)
	}
	byName := make(map[plumbing.ReferenceName]*plumbing.Reference, len(refs))
	for _, ref := range refs {
		byName[ref.Name()] = ref
	}
	if r.cfg.Branch != "" {
		ref, ok := byName[plumbing.NewBranchReferenceName(r.cfg.Branch)]
		if !ok {
			return plumbing.ZeroHash, "", fmt.Errorf("branch %q not found", r.cfg.Branch)
		}
		return ref.Hash(), r.cfg.Branch, nil
	}
	head, ok := byName[plumbing.HEAD]
	if !ok {
		return plumbing.ZeroHash, "", errors.New("the remote has no HEAD; configure a branch")
	}
	if head.Type() == plumbing.SymbolicReference {
		target, ok := byName[head.Target()]
		if !ok {
			return plumbing.ZeroHash, "", fmt.Errorf("the remote HEAD points to missing %s", head.Target())
		}
		return target.Hash(), head.Target().Short(), nil
	}
	// HEAD without symref: find a branch at the same commit.
	for name, ref := range byName {
		if name.IsBranch() && ref.Hash() == head.Hash() {
			return head.Hash(), name.Short(), nil
		}
	}
	return head.Hash(), "", nil
}

// clone makes a shallow, single-branch, in-memory clone of the branch (HEAD
// when empty) and reads its job files.
func (r *repo) clone(ctx context.Context, auth transport.AuthMethod, branch string) (*Snapshot, error) {
	began := time.Now()
	opts := &git.CloneOptions{
		URL:          r.cfg.URL,
		Auth:         auth,
		SingleBranch: true,
		Depth:        1,
		Tags:         git.NoTags,
		NoCheckout:   true,
	}
	if branch != "" {
		opts.ReferenceName = plumbing.NewBranchReferenceName(branch)
	}
	repo, err := git.CloneContext(ctx, memory.NewStorage(), nil, opts)
	if err != nil {
		return nil, fmt.Errorf("clone: %w", err)
	}
	head, err := repo.Head()
	if err != nil {
		return nil, fmt.Errorf("read cloned head: %w", err)
	}
	cloned := branch
	if branch == "" && head.Name().IsBranch() {
		branch = head.Name().Short()
	}
	snap, err := r.snapshotOf(repo, head.Hash(), branch)
	var refused *RefusedError
	if err != nil && !errors.As(err, &refused) {
		return nil, err
	}
	if cloned != "" {
		// Only a configured branch is fetched into: HEAD may move to
		// another branch.
		r.src.local, r.src.localBranch, r.src.fetches = repo, cloned, 0
		r.src.fetchedAt, r.src.head = began, head.Hash()
	}
	return snap, err
}

// snapshotOf reads the job files of a commit of a clone.
func (r *repo) snapshotOf(repo *git.Repository, hash plumbing.Hash, branch string) (*Snapshot, error) {
	commit, err := repo.CommitObject(hash)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", hash, err)
	}
	signer := ""
	if r.verifier != nil {
		// Nothing of a refused commit is read, let alone published.
		if signer, err = r.verifier.VerifyCommit(commit); err != nil {
			r.refused = commit
			return nil, err
		}
	}
	r.refused = nil
	tree, err := commit.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of commit %s: %w", hash, err)
	}
	r.mu.RLock()
	known := r.read
	r.mu.RUnlock()
	files, read, err := readJobFiles(tree, r.dir, known)
	if err != nil {
		return nil, fmt.Errorf("read job files of commit %s: %w", hash, err)
	}
	r.mu.Lock()
	r.read = read
	r.mu.Unlock()
	info := commitInfo(commit)
	info.URL = CommitURL(r.cfg.URL, r.cfg.WebURL, hash.String())
	info.Signer = signer
	return &Snapshot{
		Repo:   r.cfg.Name,
		Commit: hash.String(),
		Branch: branch,
		Files:  files,
		Info:   info,
	}, nil
}

// scrub removes configured secrets, the user info of URLs, and the trailing newline some servers
// end their answer with, from an error message.
func (r *repo) scrub(err error) error {
	msg := err.Error()
	clean := strings.TrimSpace(msg)
	// The configured URL first, whole, so that it reads as its safe form.
	clean = strings.ReplaceAll(clean, r.cfg.URL, SafeURL(r.cfg.URL))
	clean = ScrubURLs(clean)
	secrets := append([]string{r.cfg.Auth.Password, r.cfg.Auth.Token, r.cfg.Auth.SSHKeyPassphrase}, URLSecrets(r.cfg.URL)...)
	for _, secret := range secrets {
		if secret != "" {
			clean = strings.ReplaceAll(clean, secret, "(redacted)")
		}
	}
	if clean == msg {
		return err
	}
	return errors.New(clean)
}

// Has reports whether a repository of that name is configured.
func (w *Watcher) Has(name string) bool {
	_, ok := w.get(name)
	return ok
}

// Match returns the names of the repositories that a push of branch to any
// of urls concerns: the repository URL is the same (ignoring scheme, user,
// port, case and a ".git" suffix, so https and SSH forms of one repository
// match), and the repository follows that branch. A repository that follows
// the remote's default branch matches the branch it last resolved to, or any
// branch before its first fetch. A generic sender may name a repository
// by its name in the configuration instead of a URL.
func (w *Watcher) Match(urls []string, branch string) []string {
	want := make(map[string]bool, len(urls))
	named := make(map[string]bool, len(urls))
	for _, u := range urls {
		if k := repoKey(u); k != "" {
			want[k] = true
		}
		named[u] = true
	}
	var out []string
	for _, r := range w.list() {
		if !want[repoKey(r.cfg.URL)] && !named[r.cfg.Name] {
			continue
		}
		followed := r.cfg.Branch
		if followed == "" {
			r.mu.RLock()
			followed = r.status.Branch
			r.mu.RUnlock()
		}
		if followed == "" || followed == branch {
			out = append(out, r.cfg.Name)
		}
	}
	return out
}

// repoKey reduces a repository URL to host and path for comparison.
func repoKey(raw string) string {
	ep, err := transport.NewEndpoint(strings.TrimSpace(raw))
	if err != nil {
		return ""
	}
	p := strings.Trim(ep.Path, "/")
	p = strings.TrimSuffix(p, ".git")
	p = strings.Trim(p, "/")
	if p == "" {
		return ""
	}
	return strings.ToLower(ep.Host) + "/" + strings.ToLower(p)
}

// lastVerified returns a snapshot of the last verified head SetVerified
// recorded, verified again, when the watcher has no snapshot of the
// repository and the head refused is another commit; else nil. Called
// with fetchMu held.
func (r *repo) lastVerified(ctx context.Context, refused string) *Snapshot {
	r.mu.RLock()
	have := r.snapshot != nil
	branch := r.status.Branch
	r.mu.RUnlock()
	if have || r.verified == "" || r.verified == refused || r.verifier == nil {
		return nil
	}
	if r.cfg.Branch != "" {
		branch = r.cfg.Branch
	}
	hash := plumbing.NewHash(r.verified)
	keep := r.refused
	defer func() { r.refused = keep }() // the head stays the refused one
	r.histMu.Lock()
	defer r.histMu.Unlock()
	if err := r.fetchIntoHistory(ctx, hash); err != nil {
		r.logger.Warn("last verified commit not fetched", "commit", r.verified, "error", r.scrub(err))
		return nil
	}
	snap, err := r.snapshotOf(r.history, hash, branch)
	if err != nil {
		r.logger.Warn("last verified commit not taken", "commit", r.verified, "error", r.scrub(err))
		return nil
	}
	return snap
}
