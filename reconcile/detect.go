package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
	"github.com/nops-dev/nops/structs/meta"
)

// parseResult caches the parse of one file by the hash of its content and
// its variables file. Only Nomad's verdict on the file is cached, never a
// failure to reach Nomad.
type parseResult struct {
	spec *jobSpec
	err  error
}

// observed is what the leader last saw of a job: when its git spec hash and
// its live job modify index are both unchanged and it was in sync, the next
// cycle skips its plan (observePlan, lastPlanAnswers).
type observed struct {
	specHash string
	liveMod  uint64
	inSync   bool
	planned  time.Time
	// registered is when Nomad answered Nops's own register of the job at
	// liveMod (zero when a plan recorded what was seen).
	registered time.Time
}

// declared is one managed job or hook as git declares it. spec is shared
// with the parse cache.
type declared struct {
	// cluster is the Nomad cluster the job deploys to: its nops_cluster,
	// else its repository's cluster.
	cluster            string
	repo, commit, file string
	spec               *jobSpec
	meta               *meta.Job
	// hook is the whole job of a hook, decoded once in a cycle (hookJob).
	hook *api.Job
	// src is the job file with its variables file, info what the commit
	// says of itself: a new deployment's commit context (detect_commit.go).
	src  gitwatch.JobFile
	info gitwatch.CommitInfo
}

func (d *declared) key() string { return structs.JobKey(d.cluster, d.spec.namespace, d.spec.id) }

// hookJob returns the whole job of a hook, decoded once for the cycle and
// shared by the jobs that use the hook: callers must not change it.
func (d *declared) hookJob() (*api.Job, error) {
	if d.hook == nil {
		j, err := d.spec.job()
		if err != nil {
			return nil, err
		}
		d.hook = j
	}
	return d.hook, nil
}

// errorStatus is the observed status of a job that cannot be detected: the
// declaration's identity in file (or files), sync error, and errs.
func (d *declared) errorStatus(file string, errs ...string) *structs.JobStatus {
	return &structs.JobStatus{Cluster: structs.ClusterName(d.cluster), Namespace: d.spec.namespace, JobID: d.spec.id, Repository: d.repo, File: file,
		Commit: d.commit, Policy: d.meta.Policy, Sync: structs.SyncError, Errors: errs}
}

func ns(j *api.Job) string {
	n, _ := meta.Identity(j)
	return n
}

func id(j *api.Job) string {
	_, i := meta.Identity(j)
	return i
}

type cycleResult struct {
	jobs, drifted, created int
	// failed counts the jobs whose detection failed: the next cycle comes
	// within a drift interval to try them again.
	failed  int
	changed bool
	// lookAgainAt is the earliest look-again time of the cycle's
	// decisions, zero when none asks for one.
	lookAgainAt time.Time
}

// lookAgain keeps the earliest look-again time.
func (r *cycleResult) lookAgain(at time.Time) {
	if !at.IsZero() && (r.lookAgainAt.IsZero() || at.Before(r.lookAgainAt)) {
		r.lookAgainAt = at
	}
}

// cycle is what one detection cycle gathers, step by step, and records.
type cycle struct {
	started time.Time
	res     *cycleResult

	// files are the parsed job files of every repository; incomplete says
	// the view of git is not whole (a file fails to parse, or a repository
	// has no snapshot of this term yet), so that a job missing from it is
	// not treated as removed.
	files      []declaredFile
	incomplete bool

	managed, hooks      map[string]*declared
	problems, conflicts map[string]*structs.JobStatus
	live                map[string]*api.JobListStub
	// listed is when the list of live jobs was asked for.
	listed time.Time

	// What every job's observation shares (each job reads its pauses with
	// its deploy now: observeState).
	windows  []*structs.SyncWindow
	schedule *holds.Schedule
	now      time.Time

	statuses map[string]*structs.JobStatus

	// Dependencies (nops_depends_on, SPEC section 17): each managed job's
	// validation problems of its dependencies, the order detectJobs takes
	// the jobs in (a job after the jobs it depends on), and the state of
	// each job once decided (or invalid), for the jobs that depend on it.
	depProblems map[string][]string
	order       []string
	dependedOn  map[string]bool
	depStates   map[string]depState
}

// DetectOnce runs one detection cycle (SPEC section 4): read git (steps
// 1 and 2), classify (3 and 4), list the live jobs, detect each managed
// job (5 to 8: observe, decide, act) and record what it saw (9).
func (m *Detector) DetectOnce(ctx context.Context) (*cycleResult, error) {
	c := &cycle{started: m.now(), res: &cycleResult{}}
	if err := m.readGit(ctx, c); err != nil {
		return nil, err
	}
	c.managed, c.hooks, c.problems, c.conflicts = m.classify(c.files)
	c.dependencies()
	if err := m.readLive(ctx, c); err != nil {
		return nil, err
	}
	if err := m.detectJobs(ctx, c); err != nil {
		return nil, err
	}
	m.mu.Lock()
	forgetUnmanaged(m.seen, c.managed)
	m.mu.Unlock()
	if err := m.record(ctx, c); err != nil {
		return nil, err
	}
	m.stopUnusedRevisions(ctx, c.live)
	m.mu.Lock()
	m.lastCycle = c.res
	m.mu.Unlock()
	return c.res, nil
}

// readGit takes the snapshots fetched during this leadership (one kept
// from an earlier term may be older than what that term deployed), parses
// their files and records each repository's status.
func (m *Detector) readGit(ctx context.Context, c *cycle) error {
	var snaps []*gitwatch.Snapshot
	if m.git != nil {
		snaps = m.freshSnapshots()
	}
	files, parseErrs, err := m.parseSnapshots(ctx, snaps)
	if err != nil {
		return err
	}
	if err := m.recordRepos(parseErrs); err != nil {
		return err
	}
	c.files = files
	c.incomplete = len(parseErrs) > 0
	if m.git != nil && len(snaps) < len(m.git.Status()) {
		c.incomplete = true
		m.logger.Debug("detecting with an incomplete view of git: a repository is not fetched yet in this term")
	}
	return nil
}

// parseSnapshots parses every file through the cache and returns the jobs
// and, by repository, the files that failed. A parse that got no verdict
// from Nomad fails the cycle: it says nothing about the file.
func (m *Detector) parseSnapshots(ctx context.Context, snaps []*gitwatch.Snapshot) ([]declaredFile, map[string][]string, error) {
	parseErrs := map[string][]string{}
	var files []declaredFile
	used := map[string]bool{}
	for _, snap := range snaps {
		own := m.repoCluster(snap.Repo) == m.cluster
		for _, f := range snap.Files {
			if !own && !mayConcern(f) {
				// Of another cluster's repository, and no job of it
				// can name this cluster: that cluster parses it.
				continue
			}
			r, err := m.parse(ctx, f)
			if err != nil && nomadx.IsPermissionDenied(err) {
				// The token, not the file: shown on the repository,
				// and the view of git is incomplete.
				parseErrs[snap.Repo] = append(parseErrs[snap.Repo], fmt.Sprintf("%s: %v", f.Path, err))
				continue
			}
			if err != nil {
				return nil, nil, fmt.Errorf("parse %s of %s: %w", f.Path, snap.Repo, err)
			}
			used[f.ContentHash()] = true
			if r.err != nil {
				// Of another cluster's repository too: a job of this
				// cluster may be in it, so the view of git is
				// incomplete (the repository's own cluster shows it).
				parseErrs[snap.Repo] = append(parseErrs[snap.Repo], fmt.Sprintf("%s: %v", f.Path, r.err))
				continue
			}
			cluster, ok := m.fileCluster(snap.Repo, r.spec)
			if !ok {
				continue
			}
			files = append(files, declaredFile{cluster: cluster, repo: snap.Repo, commit: snap.Commit, file: f.Path, spec: r.spec,
				src: f, info: snap.Info})
		}
	}
	m.pruneParsed(used)
	return files, parseErrs, nil
}

// readLive lists the live jobs, one list per namespace. A list Nomad
// refuses for the token is shown on every managed job.
func (m *Detector) readLive(ctx context.Context, c *cycle) error {
	live, listed, err := m.liveJobsCached(ctx)
	if err != nil {
		err = fmt.Errorf("list live jobs: %w", err)
		if nomadx.IsPermissionDenied(err) {
			m.refusedList(ctx, c.managed, err)
		}
		return err
	}
	c.live, c.listed = live, listed
	return nil
}

// dependencies judges the managed jobs' dependencies (meta.DependencyProblems,
// the rules `nops validate` uses too) and orders the jobs so that each is
// detected after the jobs it depends on. A job declared twice or with an
// invalid declaration counts as managed there (a dependency on it waits
// until it is valid); every other declared job counts as unmanaged.
func (c *cycle) dependencies() {
	g := meta.DependencyGraph{Managed: map[string]meta.DependencyNode{}, Declared: map[string]bool{}}
	for _, f := range c.files {
		g.Declared[structs.JobKey(f.cluster, f.spec.namespace, f.spec.id)] = true
	}
	c.depStates = map[string]depState{}
	for _, bad := range []map[string]*structs.JobStatus{c.problems, c.conflicts} {
		for key, s := range bad {
			g.Managed[key] = meta.DependencyNode{File: s.File}
			c.depStates[key] = depState{key: key, invalid: strings.Join(s.Errors, "; ")}
		}
	}
	c.dependedOn = map[string]bool{}
	for key, d := range c.managed {
		deps := d.meta.Dependencies(d.cluster, d.spec.namespace)
		g.Managed[key] = meta.DependencyNode{File: d.file, Value: d.spec.meta[meta.KeyDependsOn], DependsOn: deps}
		for _, dep := range deps {
			c.dependedOn[dep] = true
		}
	}
	c.depProblems = meta.DependencyProblems(g)
	for _, key := range meta.DependencyOrder(g) {
		if c.managed[key] != nil {
			c.order = append(c.order, key)
		}
	}
}

// dependencyStates returns the states of the jobs d depends on, as this
// cycle left them. A dependency that is missing or unmanaged has none: it
// is one of d's dependency problems. A managed one not decided yet (only
// in a cycle, itself a problem) is not ready.
func (c *cycle) dependencyStates(d *declared) []depState {
	var out []depState
	for _, key := range d.meta.Dependencies(d.cluster, d.spec.namespace) {
		s, ok := c.depStates[key]
		switch {
		case ok:
			out = append(out, s)
		case c.managed[key] != nil:
			out = append(out, depState{key: key, invalid: "not detected yet in this cycle"})
		}
	}
	return out
}

// decided records what a job's dependents see of it, if any job depends
// on it: its status after act, its active deployment then and, when it is
// blocked, how.
func (m *Detector) decided(c *cycle, key string, status *structs.JobStatus) error {
	if !c.dependedOn[key] {
		return nil
	}
	s := depState{key: key, inSync: status.Sync == structs.SyncInSync}
	if status.Sync == structs.SyncError {
		s.invalid = strings.Join(status.Errors, "; ")
	}
	st := m.srv.State()
	active, err := st.ActiveDeployment(status.Cluster, status.Namespace, status.JobID)
	if err != nil {
		return fmt.Errorf("read active deployment of %s: %w", key, err)
	}
	if active != nil {
		s.active = active.State
	}
	if status.Blocked {
		s.blocked = "blocked"
		b, err := st.Block(status.Cluster, status.Namespace, status.JobID)
		if err != nil {
			return fmt.Errorf("read block of %s: %w", key, err)
		}
		if b != nil {
			dep, err := st.Deployment(b.DeploymentID)
			if err != nil {
				return fmt.Errorf("read blocking deployment of %s: %w", key, err)
			}
			if dep != nil {
				s.blocked = string(dep.State)
				if dep.Error != "" {
					s.blocked += ": " + dep.Error
				}
			}
		}
	}
	c.depStates[key] = s
	return nil
}

// detectJobs detects every managed job, each after the jobs it depends on
// and otherwise in key order, and collects the statuses to record. A job
// whose detection fails shows the error and does not stop the others.
func (m *Detector) detectJobs(ctx context.Context, c *cycle) error {
	st := m.srv.State()
	var err error
	if c.windows, err = st.Windows(); err != nil {
		return fmt.Errorf("read sync windows: %w", err)
	}
	c.now = m.now()
	c.schedule = holds.At(c.windows, c.now)
	c.statuses = map[string]*structs.JobStatus{}
	for _, key := range c.order {
		d := c.managed[key]
		c.res.jobs++
		var status *structs.JobStatus
		dec, created, err := m.detectJob(ctx, d, c)
		if err == nil {
			status = dec.status
			c.res.lookAgain(dec.lookAgainAt)
		} else {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.logger.Error("detection failed for job", "job", key, "error", err)
			c.res.failed++
			// Its windows' boundaries still matter to it.
			c.res.lookAgain(c.schedule.NextBoundaryFor(d.cluster, d.spec.namespace, d.spec.id))
			status = d.errorStatus(d.file, err.Error())
		}
		status.Errors = append(status.Errors, m.refusalsOf(key)...)
		if status.Sync == structs.SyncDrift {
			c.res.drifted++
		}
		if created {
			c.res.created++
			c.res.changed = true
		}
		c.statuses[key] = status
		if err := m.decided(c, key, status); err != nil {
			return err
		}
	}
	return nil
}

type declaredFile struct {
	// cluster is the job's cluster: that of the core, or, for a job whose
	// nops_cluster names no cluster, its repository's (where its status
	// shows the problem).
	cluster            string
	repo, commit, file string
	spec               *jobSpec
	src                gitwatch.JobFile
	info               gitwatch.CommitInfo
}

// freshSnapshots returns the snapshots of the repositories fetched since
// this leadership began.
func (m *Detector) freshSnapshots() []*gitwatch.Snapshot {
	m.mu.Lock()
	since := m.termStart
	m.mu.Unlock()
	fresh := map[string]bool{}
	for _, st := range m.git.Status() {
		if !st.LastSuccess.Before(since) {
			fresh[st.Name] = true
		}
	}
	var out []*gitwatch.Snapshot
	for _, snap := range m.git.Snapshots() {
		if fresh[snap.Repo] {
			out = append(out, snap)
		}
	}
	return out
}

// repoCluster returns the cluster of a repository.
func (m *core) repoCluster(repo string) string {
	rc := m.cfg.RepoClusters
	if p := m.repoClusters.Load(); p != nil {
		rc = *p
	}
	if c := rc[repo]; c != "" {
		return c
	}
	return structs.DefaultCluster
}

// mayConcern reports whether a job file of another cluster's repository
// may hold a job of this cluster, or a hook its jobs may use: one that
// names a cluster (nops_cluster) or a role. Meta keys are written out in
// a job file (even when their value comes from a variable), so a file
// without them holds neither.
func mayConcern(f gitwatch.JobFile) bool {
	return strings.Contains(f.Content, meta.KeyCluster) || strings.Contains(f.Content, meta.KeyRole)
}

// fileCluster returns the cluster of a parsed job of a repository, and
// whether it is this core's to detect: a job is of its nops_cluster, else
// of its repository's cluster; a hook (nops_role) of every cluster that
// reads it. A nops_cluster that names no cluster leaves the job to its
// repository's cluster, where classify shows the problem.
func (m *core) fileCluster(repo string, spec *jobSpec) (string, bool) {
	own := m.repoCluster(repo)
	if spec.meta[meta.KeyRole] != "" && spec.meta[meta.KeyManaged] != "true" {
		return m.cluster, true
	}
	c, named := spec.meta[meta.KeyCluster]
	switch {
	case !named:
		return own, own == m.cluster
	case slices.Contains(m.cfg.Clusters, c) || (len(m.cfg.Clusters) == 0 && c == structs.DefaultCluster):
		return c, c == m.cluster
	}
	return own, own == m.cluster
}

// parse returns the parse of a file: the job, or Nomad's verdict on the file
// in the result's err. The error it returns itself means Nomad gave no
// verdict; such a result is not cached. The spec is shared with the cache.
func (m *Detector) parse(ctx context.Context, f gitwatch.JobFile) (parseResult, error) {
	r, cached, err := m.parseCached(ctx, f)
	if err != nil || cached {
		return r, err
	}
	m.mu.Lock()
	m.parsed[f.ContentHash()] = r
	m.mu.Unlock()
	return r, nil
}

// parseCached returns the cached parse of a file, or parses it through
// Nomad without storing it (cached false); the error means Nomad gave no
// verdict.
func (m *Detector) parseCached(ctx context.Context, f gitwatch.JobFile) (r parseResult, cached bool, err error) {
	m.mu.Lock()
	r, ok := m.parsed[f.ContentHash()]
	m.mu.Unlock()
	if ok {
		return r, true, nil
	}
	job, err := m.nomad.Parse(ctx, f.Content, f.Vars)
	if ctx.Err() != nil {
		return parseResult{}, false, ctx.Err()
	}
	switch {
	case err == nil:
		spec, err := newJobSpec(job)
		if err != nil {
			return parseResult{}, false, err
		}
		return parseResult{spec: spec}, false, nil
	case errors.Is(err, nomadx.ErrInvalidJob):
		return parseResult{err: err}, false, nil
	}
	return parseResult{}, false, err
}

// pruneParsed forgets the parses of content no repository holds any more,
// so the cache does not grow with every commit.
func (m *Detector) pruneParsed(used map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for h := range m.parsed {
		if !used[h] {
			delete(m.parsed, h)
		}
	}
}

// copyJob returns a deep copy, so that a cached parse is never changed by
// the cycle that uses it.
func copyJob(j *api.Job) (*api.Job, error) {
	if j == nil {
		return nil, nil
	}
	b, err := encodeJob(j)
	if err != nil {
		return nil, err
	}
	return decodeJob(b)
}

// classify sorts parsed files into managed jobs and hooks, and reports
// meta problems and duplicate declarations as job statuses.
func (m *Detector) classify(files []declaredFile) (map[string]*declared, map[string]*declared, map[string]*structs.JobStatus, map[string]*structs.JobStatus) {
	byKey := map[string][]*declared{}
	problems := map[string]*structs.JobStatus{}
	for _, f := range files {
		jm := meta.Read(f.file, &api.Job{Meta: f.spec.meta}, m.jobDefaults())
		if !jm.Considered() {
			continue
		}
		if c, named := f.spec.meta[meta.KeyCluster]; named && jm.Kind == meta.Managed && c != f.cluster {
			jm.Problems = append(jm.Problems, fmt.Sprintf("%s: meta %s = %q: no Nomad cluster of that name (the clusters are %s)",
				f.file, meta.KeyCluster, c, strings.Join(m.clusterNames(), ", ")))
		}
		if !m.managesNamespace(f.spec.namespace) {
			continue
		}
		d := &declared{cluster: f.cluster, repo: f.repo, commit: f.commit, file: f.file, spec: f.spec, meta: jm,
			src: f.src, info: f.info}
		byKey[d.key()] = append(byKey[d.key()], d)
	}
	managed := map[string]*declared{}
	hooks := map[string]*declared{}
	conflicts := map[string]*structs.JobStatus{}
	for key, ds := range byKey {
		if len(ds) > 1 {
			var where []string
			for _, d := range ds {
				where = append(where, d.repo+":"+d.file)
			}
			sort.Strings(where)
			msg := meta.DuplicateProblem(key, where)
			m.logger.Error("duplicate job declaration", "job", key, "files", strings.Join(where, ", "))
			d := ds[0]
			conflicts[key] = d.errorStatus(strings.Join(where, ", "), msg)
			continue
		}
		d := ds[0]
		if len(d.meta.Problems) > 0 {
			if d.meta.Kind == meta.Managed || d.meta.Kind == meta.Ignored {
				problems[key] = d.errorStatus(d.file, d.meta.Problems...)
				continue
			}
		}
		switch d.meta.Kind {
		case meta.Managed:
			managed[key] = d
		case meta.Hook:
			hooks[key] = d
		}
	}
	return managed, hooks, problems, conflicts
}

// liveJobs lists the live jobs of the managed namespaces, by job key.
func (m *Detector) liveJobs(ctx context.Context) (map[string]*api.JobListStub, error) {
	out := map[string]*api.JobListStub{}
	nss := m.cfg.Namespaces
	for _, n := range nss {
		if n == "*" {
			nss = []string{"*"}
			break
		}
	}
	since := m.sinceIndex()
	for _, n := range nss {
		stubs, err := m.nomad.ListJobsSince(ctx, n, since, liveListWait)
		if err != nil {
			return nil, err
		}
		for _, s := range stubs {
			jn := s.Namespace
			if jn == "" {
				jn = "default"
			}
			out[m.key(jn, s.ID)] = s
		}
	}
	return out, nil
}
