package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nops-dev/nops/reconcile/filediff"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// Previews (SPEC section 19): what detection would do with a repository at
// another ref than the followed branch, computed the way a detection cycle
// computes it (the same parse, classification, dependency rules, plan and
// redaction) but acting on nothing: a preview proposes nothing to Raft,
// registers nothing in Nomad (it asks only Nomad's parse and plan
// endpoints) and leaves the watcher's snapshots and the detector's caches
// as they are.

const (
	// DefaultPreviewMaxJobs bounds the job files a preview plans: a ref
	// with more is refused before anything is parsed or planned.
	DefaultPreviewMaxJobs = 1000
	// DefaultPreviewTimeout bounds one preview, git and Nomad included.
	DefaultPreviewTimeout = 60 * time.Second
)

// previewLimits bound the previews of one server: one at a time (busy),
// maxJobs job files each, within timeout.
type previewLimits struct {
	busy    atomic.Bool
	maxJobs atomic.Int64
	timeout atomic.Int64
}

// SetPreviewLimits sets the most job files a preview plans and how long one
// may take; zero or less keeps the default of each.
func (m *Manager) SetPreviewLimits(maxJobs int, timeout time.Duration) {
	if maxJobs <= 0 {
		maxJobs = DefaultPreviewMaxJobs
	}
	if timeout <= 0 {
		timeout = DefaultPreviewTimeout
	}
	m.preview.maxJobs.Store(int64(maxJobs))
	m.preview.timeout.Store(int64(timeout))
}

// previewLimitsNow returns the limits in force.
func (m *Manager) previewLimitsNow() (int, time.Duration) {
	maxJobs, timeout := int(m.preview.maxJobs.Load()), time.Duration(m.preview.timeout.Load())
	if maxJobs <= 0 {
		maxJobs = DefaultPreviewMaxJobs
	}
	if timeout <= 0 {
		timeout = DefaultPreviewTimeout
	}
	return maxJobs, timeout
}

// Preview answers what Nops would do with a watched repository at a ref
// (a branch or tag name, or a full commit hash), without writing anything.
// It runs on the leader, which holds the git clones and the parse cache.
// One preview runs at a time on a server: a second one meanwhile is
// ErrConflict. A ref with more job files than the limit is ErrInvalid and
// plans nothing; an unknown repository or ref is ErrNotFound; a preview
// that outlasts its timeout is stopped and is ErrUpstream.
func (m *Manager) Preview(ctx context.Context, req *structs.PreviewRequest) (*structs.Preview, error) {
	return m.previewIn(ctx, req, []*Manager{m})
}

// previewIn is Preview in the clusters of managers, under m's limits and
// its one-at-a-time: the ref is read from git once, and each cluster
// previews its own jobs of it (with its parse cache, its classification
// and its Nomad's plans), all at once, into one answer.
func (m *Manager) previewIn(ctx context.Context, req *structs.PreviewRequest, managers []*Manager) (*structs.Preview, error) {
	if req == nil || strings.TrimSpace(req.Repository) == "" || strings.TrimSpace(req.Ref) == "" {
		return nil, fmt.Errorf("%w: a preview names a repository and a ref (a branch, a tag or a commit hash)", structs.ErrInvalid)
	}
	if m.git == nil || !m.git.Has(req.Repository) {
		return nil, fmt.Errorf("%w: repository %q is not watched", structs.ErrNotFound, req.Repository)
	}
	if !m.preview.busy.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: another preview is running on this server, and one runs at a time: try again when it ends", structs.ErrConflict)
	}
	defer m.preview.busy.Store(false)
	maxJobs, timeout := m.previewLimitsNow()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := previewAll(ctx, req.Repository, strings.TrimSpace(req.Ref), maxJobs, m.detector, managers)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w: the preview of %s at %s took longer than %s and was stopped", structs.ErrUpstream, req.Repository, req.Ref, timeout)
	}
	if err != nil && !errors.Is(err, structs.ErrNotFound) && !errors.Is(err, structs.ErrInvalid) {
		// Those two name the repository and the ref already.
		err = fmt.Errorf("preview %s at %s: %w", req.Repository, req.Ref, err)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// previewAll reads repository name at ref once, through git's d, and
// merges the previews of it of every manager's cluster: the jobs and
// removed jobs of all, the files that are not valid jobs as the
// repository's own cluster saw them.
func previewAll(ctx context.Context, name, ref string, maxJobs int, d *Detector, managers []*Manager) (*structs.Preview, error) {
	snap, err := d.snapshotAt(ctx, name, ref, maxJobs)
	if err != nil {
		return nil, err
	}
	previews := make([]*structs.Preview, len(managers))
	errs := make([]error, len(managers))
	var wg sync.WaitGroup
	for i, m := range managers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			previews[i], errs[i] = m.detector.previewAt(ctx, snap, ref)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := previews[0]
	for _, p := range previews[1:] {
		if len(out.Errors) == 0 {
			out.Errors = p.Errors
		}
		out.Jobs = append(out.Jobs, p.Jobs...)
		out.Removed = append(out.Removed, p.Removed...)
	}
	if len(previews) > 1 {
		sortPreview(out.Jobs)
		sortPreview(out.Removed)
	}
	out.Changes = len(out.Jobs) > 0 || len(out.Removed) > 0 || len(out.Errors) > 0
	return out, nil
}

// sortPreview sorts previewed jobs by job key.
func sortPreview(jobs []*structs.PreviewJob) {
	sort.SliceStable(jobs, func(i, j int) bool {
		return structs.JobKey(jobs[i].Cluster, jobs[i].Namespace, jobs[i].JobID) <
			structs.JobKey(jobs[j].Cluster, jobs[j].Namespace, jobs[j].JobID)
	})
}

// previewed is one view of git a preview classifies: the repositories'
// files as detection would parse them.
type previewed struct {
	managed, hooks      map[string]*declared
	problems, conflicts map[string]*structs.JobStatus
	parseErrs           map[string][]string
	files               []declaredFile
}

// snapshotAt reads repository name at ref for a preview, refusing a ref
// with more than maxJobs job files.
func (m *Detector) snapshotAt(ctx context.Context, name, ref string, maxJobs int) (*gitwatch.Snapshot, error) {
	snap, err := m.git.SnapshotAt(ctx, name, ref)
	switch {
	case errors.Is(err, gitwatch.ErrUnknownRef), errors.Is(err, gitwatch.ErrUnknownRepo):
		return nil, fmt.Errorf("%w: %w", structs.ErrNotFound, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", structs.ErrUpstream, err)
	}
	if len(snap.Files) > maxJobs {
		return nil, fmt.Errorf("%w: repository %q at %q holds %d job files, more than a preview plans (%d): nothing was planned",
			structs.ErrInvalid, name, ref, len(snap.Files), maxJobs)
	}
	return snap, nil
}

// previewAt computes the preview, in the detector's cluster, of snap: its
// repository at ref.
func (m *Detector) previewAt(ctx context.Context, snap *gitwatch.Snapshot, ref string) (*structs.Preview, error) {
	name := snap.Repo
	out := &structs.Preview{Repository: name, Ref: ref, Commit: snap.Commit, Jobs: []*structs.PreviewJob{}, Removed: []*structs.PreviewJob{}}
	// Two views of git: every repository as watched, and the same with
	// this repository at the ref, so that hooks, duplicates and
	// dependencies across repositories count as detection counts them.
	current := m.git.Snapshots()
	at := make([]*gitwatch.Snapshot, 0, len(current)+1)
	var base *gitwatch.Snapshot
	for _, s := range current {
		if s.Repo == name {
			base = s
			continue
		}
		at = append(at, s)
	}
	at = append(at, snap)
	if base != nil {
		out.Branch, out.BranchCommit = base.Branch, base.Commit
	}
	now, err := m.classifyPreview(ctx, at)
	if err != nil {
		return nil, err
	}
	before := &previewed{managed: map[string]*declared{}}
	if base != nil {
		if before, err = m.classifyPreview(ctx, current); err != nil {
			return nil, err
		}
	}
	out.Errors = now.parseErrs[name]
	// The dependency rules of a cycle, on the view at the ref.
	c := &cycle{files: now.files, managed: now.managed, problems: now.problems, conflicts: now.conflicts}
	c.dependencies()

	st := m.srv.State()
	windows, err := st.Windows()
	if err != nil {
		return nil, fmt.Errorf("read sync windows: %w", err)
	}
	schedule := holds.At(windows, m.now())
	redact := m.nomad.Redactor().Source
	var jobs []*structs.PreviewJob
	changing := map[string]bool{}
	for _, key := range sortedKeys(now.managed) {
		d := now.managed[key]
		if d.repo != name {
			continue
		}
		pj, err := m.previewJob(ctx, d, now.hooks, before.managed[key], redact)
		if err != nil {
			return nil, err
		}
		pj.Errors = append(pj.Errors, c.depProblems[key]...)
		if pj.PlanType == "" && len(pj.Errors) == 0 {
			continue
		}
		if pj.PlanType != "" {
			changing[key] = true
		}
		jobs = append(jobs, pj)
	}
	for _, bad := range []map[string]*structs.JobStatus{now.problems, now.conflicts} {
		for _, key := range sortedKeys(bad) {
			s := bad[key]
			if s.Repository != name && !strings.Contains(s.File, name+":") {
				continue
			}
			pj := &structs.PreviewJob{Cluster: m.cluster, Namespace: s.Namespace, JobID: s.JobID, File: s.File, Change: structs.PreviewChanged,
				Policy: s.Policy, Errors: s.Errors}
			if before.managed[key] == nil {
				pj.Change = structs.PreviewAdded
			}
			jobs = append(jobs, pj)
		}
	}
	for _, pj := range jobs {
		key := m.key(pj.Namespace, pj.JobID)
		if err := m.previewStops(pj, now.managed[key], changing, schedule); err != nil {
			return nil, err
		}
	}
	sort.Slice(jobs, func(i, j int) bool {
		return m.key(jobs[i].Namespace, jobs[i].JobID) < m.key(jobs[j].Namespace, jobs[j].JobID)
	})
	out.Jobs = append(out.Jobs, jobs...)
	for _, key := range sortedKeys(before.managed) {
		d := before.managed[key]
		if d.repo != name || now.managed[key] != nil || now.problems[key] != nil || now.conflicts[key] != nil {
			continue
		}
		out.Removed = append(out.Removed, &structs.PreviewJob{Cluster: m.cluster, Namespace: d.spec.namespace, JobID: d.spec.id, File: d.file,
			Change: structs.PreviewRemoved, Policy: d.meta.Policy,
			FileDiff: structs.CapFileDiff(previewFileDiff(d, nil, redact))})
	}
	out.Changes = len(out.Jobs) > 0 || len(out.Removed) > 0 || len(out.Errors) > 0
	return out, nil
}

// classifyPreview parses the files of snaps and classifies them as a
// detection cycle does (Detector.classify). A parse that got no verdict
// from Nomad fails the preview.
func (m *Detector) classifyPreview(ctx context.Context, snaps []*gitwatch.Snapshot) (*previewed, error) {
	v := &previewed{parseErrs: map[string][]string{}}
	for _, snap := range snaps {
		// The files of the cluster, as parseSnapshots selects them.
		own := m.repoCluster(snap.Repo) == m.cluster
		for _, f := range snap.Files {
			if !own && !mayConcern(f) {
				continue
			}
			r, err := m.previewParse(ctx, f)
			if err != nil && !nomadx.IsPermissionDenied(err) {
				return nil, fmt.Errorf("%w: parse %s of %s: %w", structs.ErrUpstream, f.Path, snap.Repo, err)
			}
			if err == nil {
				err = r.err
			}
			if err != nil {
				if own {
					v.parseErrs[snap.Repo] = append(v.parseErrs[snap.Repo], fmt.Sprintf("%s: %v", f.Path, err))
				}
				continue
			}
			cluster, ok := m.fileCluster(snap.Repo, r.spec)
			if !ok {
				continue
			}
			v.files = append(v.files, declaredFile{cluster: cluster, repo: snap.Repo, commit: snap.Commit, file: f.Path, spec: r.spec,
				src: f, info: snap.Info})
		}
	}
	v.managed, v.hooks, v.problems, v.conflicts = m.classify(v.files)
	return v, nil
}

// previewParse is parse without filling the cache: a preview reads what
// detection parsed, and parses the rest for itself.
func (m *Detector) previewParse(ctx context.Context, f gitwatch.JobFile) (parseResult, error) {
	r, _, err := m.parseCached(ctx, f)
	return r, err
}

// previewJob plans one managed job of the ref and returns what a preview
// shows of it: PlanType is empty when the live job already runs its spec.
// before is the job's declaration on the followed branch, nil when the
// branch does not declare it.
func (m *Detector) previewJob(ctx context.Context, d *declared, hooks map[string]*declared, before *declared,
	redact func(string) string,
) (*structs.PreviewJob, error) {
	pj := &structs.PreviewJob{Cluster: m.cluster, Namespace: d.spec.namespace, JobID: d.spec.id, File: d.file, Change: structs.PreviewChanged,
		Policy: d.meta.Policy}
	if before == nil {
		pj.Change = structs.PreviewAdded
	}
	_, hookProblems, err := m.frozenHooks(d, hooks)
	if err != nil {
		return nil, fmt.Errorf("hooks of %s: %w", d.key(), err)
	}
	pj.Errors = append(pj.Errors, hookProblems...)
	job, err := d.spec.job()
	if err != nil {
		return nil, err
	}
	if d.spec.scaling {
		live, err := m.nomad.Job(ctx, d.spec.namespace, d.spec.id)
		if err != nil && !errors.Is(err, nomadx.ErrJobNotFound) {
			return nil, fmt.Errorf("%w: read live job %s: %w", structs.ErrUpstream, d.key(), err)
		}
		if live != nil {
			nomadx.KeepLiveCounts(job, live)
		}
	}
	plan, err := m.nomad.Plan(ctx, job)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		pj.Errors = append(pj.Errors, fmt.Sprintf("plan: %v", err))
		pj.PlanType = "Unknown"
	} else if !plan.InSync() {
		pj.PlanType, pj.Diff = plan.Type, plan.Text
	}
	if pj.PlanType != "" || len(pj.Errors) > 0 {
		pj.FileDiff = structs.CapFileDiff(previewFileDiff(before, d, redact))
	}
	return pj, nil
}

// previewStops fills in what would stop a job's deployment: its hold, its
// block and the dependency it would wait for. changing are the jobs the
// preview would deploy: a dependency among them deploys first.
func (m *Detector) previewStops(pj *structs.PreviewJob, d *declared, changing map[string]bool, schedule *holds.Schedule) error {
	st := m.srv.State()
	pauses, lift, err := st.JobHolds(m.cluster, pj.Namespace, pj.JobID)
	if err != nil {
		return fmt.Errorf("read pauses of %s: %w", m.key(pj.Namespace, pj.JobID), err)
	}
	pj.Hold = holds.Evaluate(pauses, schedule, lift != nil, m.cluster, pj.Namespace, pj.JobID).Reason()
	b, err := st.Block(m.cluster, pj.Namespace, pj.JobID)
	if err != nil {
		return fmt.Errorf("read block of %s: %w", m.key(pj.Namespace, pj.JobID), err)
	}
	if b != nil {
		pj.Blocked = "blocked by deployment " + structs.ShortID(b.DeploymentID)
		if dep, err := st.Deployment(b.DeploymentID); err == nil && dep != nil {
			pj.Blocked += " (" + string(dep.State)
			if dep.Error != "" {
				pj.Blocked += ": " + dep.Error
			}
			pj.Blocked += "): retry the job to lift it"
		}
	}
	if d == nil {
		return nil
	}
	for _, dep := range d.meta.Dependencies(d.cluster, d.spec.namespace) {
		if changing[dep] {
			pj.WaitingFor = "waiting for " + dep + ": it changes at this ref too and deploys first"
			break
		}
		depCluster, depNS, depID, _ := structs.SplitJobKey(dep)
		s, err := st.JobStatus(depCluster, depNS, depID)
		if err != nil {
			return fmt.Errorf("read status of %s: %w", dep, err)
		}
		active, err := st.ActiveDeployment(depCluster, depNS, depID)
		if err != nil {
			return fmt.Errorf("read active deployment of %s: %w", dep, err)
		}
		ds := depStateOf(dep, s)
		if active != nil {
			ds.active = active.State
		}
		if why := ds.wait(); why != "" {
			pj.WaitingFor = "waiting for " + dep + ": " + why
			break
		}
	}
	return nil
}

// depStateOf is a dependency's state as the last detection cycle recorded
// it; a job with no status is not in sync.
func depStateOf(key string, s *structs.JobStatus) depState {
	if s == nil {
		return depState{key: key}
	}
	ds := depState{key: key, inSync: s.Sync == structs.SyncInSync}
	if s.Sync == structs.SyncError {
		ds.invalid = strings.Join(s.Errors, "; ")
	}
	if s.Blocked {
		ds.blocked = "blocked"
	}
	return ds
}

// previewFileDiff is the redacted unified diff of a job file and its
// variables file from one declaration to another (nil: none).
func previewFileDiff(from, to *declared, redact func(string) string) string {
	side := func(d *declared) [2]filediff.Version {
		if d == nil {
			return [2]filediff.Version{}
		}
		return [2]filediff.Version{{Path: d.src.Path, Text: d.src.Content}, {Path: d.src.VarsPath, Text: d.src.Vars}}
	}
	a, b := side(from), side(to)
	return filediff.Unified(a[0], b[0], redact) + filediff.Unified(a[1], b[1], redact)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
