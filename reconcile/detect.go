package reconcile

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/holds"
	"github.com/nops-dev/nops/reconcile/meta"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// parseResult caches the parse of one file by the hash of its content and
// its variables file. Only Nomad's verdict on the file is cached, never a
// failure to reach Nomad.
type parseResult struct {
	job *api.Job
	err error
	// specHash is the job's spec hash without hooks, computed once.
	specHash string
}

// observed is what the leader last saw of a job: when its git spec hash and
// its live job modify index are both unchanged and it was in sync, the next
// cycle skips its plan (observePlan, lastPlanAnswers).
type observed struct {
	specHash string
	liveMod  uint64
	inSync   bool
	planned  time.Time
}

// declared is one managed job or hook as git declares it. job is shared
// with the parse cache: copy it before changing it.
type declared struct {
	repo, commit, file string
	job                *api.Job
	meta               *meta.Job
	// specHash is the job's spec hash without hooks.
	specHash string
}

func (d *declared) key() string { return structs.JobKey(ns(d.job), id(d.job)) }

// errorStatus is the observed status of a job that cannot be detected: the
// declaration's identity in file (or files), sync error, and errs.
func (d *declared) errorStatus(file string, errs ...string) *structs.JobStatus {
	return &structs.JobStatus{Namespace: ns(d.job), JobID: id(d.job), Repository: d.repo, File: file,
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
	changed                bool
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

	// What every job's observation shares (each job reads its pauses with
	// its deploy now: observeState).
	windows  []*structs.SyncWindow
	schedule *holds.Schedule
	now      time.Time

	statuses map[string]*structs.JobStatus
}

// DetectOnce runs one detection cycle (SPEC section 4): read git (steps
// 1 and 2), classify (3 and 4), list the live jobs, detect each managed
// job (5 to 8: observe, decide, act) and record what it saw (9).
func (m *Manager) DetectOnce(ctx context.Context) (*cycleResult, error) {
	c := &cycle{started: m.now(), res: &cycleResult{}}
	if err := m.readGit(ctx, c); err != nil {
		return nil, err
	}
	c.managed, c.hooks, c.problems, c.conflicts = m.classify(c.files)
	if err := m.readLive(ctx, c); err != nil {
		return nil, err
	}
	if err := m.detectJobs(ctx, c); err != nil {
		return nil, err
	}
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
func (m *Manager) readGit(ctx context.Context, c *cycle) error {
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
func (m *Manager) parseSnapshots(ctx context.Context, snaps []*gitwatch.Snapshot) ([]declaredFile, map[string][]string, error) {
	parseErrs := map[string][]string{}
	var files []declaredFile
	used := map[string]bool{}
	for _, snap := range snaps {
		for _, f := range snap.Files {
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
				parseErrs[snap.Repo] = append(parseErrs[snap.Repo], fmt.Sprintf("%s: %v", f.Path, r.err))
				continue
			}
			files = append(files, declaredFile{repo: snap.Repo, commit: snap.Commit, file: f.Path, job: r.job, specHash: r.specHash})
		}
	}
	m.pruneParsed(used)
	return files, parseErrs, nil
}

// readLive lists the live jobs, one list per namespace. A list Nomad
// refuses for the token is shown on every managed job.
func (m *Manager) readLive(ctx context.Context, c *cycle) error {
	live, err := m.liveJobsCached(ctx)
	if err != nil {
		err = fmt.Errorf("list live jobs: %w", err)
		if nomadx.IsPermissionDenied(err) {
			m.refusedList(ctx, c.managed, err)
		}
		return err
	}
	c.live = live
	return nil
}

// detectJobs detects every managed job, in key order, and collects the
// statuses to record. A job whose detection fails shows the error and
// does not stop the others.
func (m *Manager) detectJobs(ctx context.Context, c *cycle) error {
	st := m.srv.State()
	var err error
	if c.windows, err = st.Windows(); err != nil {
		return fmt.Errorf("read sync windows: %w", err)
	}
	c.now = m.now()
	c.schedule = holds.At(c.windows, c.now)
	c.statuses = map[string]*structs.JobStatus{}
	keys := make([]string, 0, len(c.managed))
	for k := range c.managed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
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
			// Its windows' boundaries still matter to it.
			c.res.lookAgain(c.schedule.NextBoundaryFor(ns(d.job), id(d.job)))
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
	}
	return nil
}

// record writes what the cycle saw (step 9): the statuses of jobs whose
// declaration is invalid or duplicated, the end of the waiting deployments
// of jobs git no longer manages, every changed status, and the cycle.
func (m *Manager) record(ctx context.Context, c *cycle) error {
	for key, errs := range c.problems {
		if _, ok := c.statuses[key]; ok {
			continue
		}
		c.statuses[key] = errs
	}
	for key, s := range c.conflicts {
		c.statuses[key] = s
	}
	if err := m.supersedeUnmanaged(c.managed, c.conflicts, c.problems, c.incomplete); err != nil {
		return err
	}
	if err := m.recordStatuses(ctx, c.statuses, c.live, c.incomplete, c.now); err != nil {
		return err
	}
	if _, err := m.srv.Apply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{
		WriteMeta: m.meta(),
		Cycle: &structs.DetectionCycle{Leader: m.srv.NodeID(), StartedAt: c.started, FinishedAt: m.now(),
			Jobs: c.res.jobs, Drifted: c.res.drifted, Created: c.res.created},
	}); err != nil {
		return fmt.Errorf("record detection cycle: %w", err)
	}
	return nil
}

type declaredFile struct {
	repo, commit, file string
	job                *api.Job
	specHash           string
}

// settle ends a waiting deployment (superseded or completed). When the
// deployment moved on before it could (an approval, a rejection, the
// apply loop starting it), it reports moved and returns the job's active
// deployment then: nil, or the one that moved on, which then runs.
func (m *Manager) settle(d *structs.Deployment, to structs.DeploymentState, reason string) (moved bool, after *structs.Deployment, err error) {
	err = m.transition(d, to, reason, "")
	if err == nil {
		return false, nil, nil
	}
	if !errors.Is(err, structs.ErrConflict) {
		return false, nil, err
	}
	m.logger.Debug("waiting deployment moved on before detection could settle it", "deployment", d.ID, "error", err)
	active, err := m.srv.State().ActiveDeployment(d.Namespace, d.JobID)
	return true, active, err
}

// supersedeUnmanaged supersedes the waiting deployments of jobs that git no
// longer declares as managed: removed (only with a complete view of git),
// declared twice, or invalid. Nothing can revalidate them any more, and an
// approval must not deploy what git no longer asks for.
func (m *Manager) supersedeUnmanaged(managed map[string]*declared, conflicts, problems map[string]*structs.JobStatus, incomplete bool) error {
	active, err := m.srv.State().ActiveDeployments()
	if err != nil {
		return fmt.Errorf("read active deployments: %w", err)
	}
	for _, d := range active {
		key := d.Key()
		if !d.State.Waiting() || managed[key] != nil {
			continue
		}
		var reason string
		switch {
		case conflicts[key] != nil:
			reason = "the job is declared by more than one file"
		case problems[key] != nil:
			reason = "the job's declaration in git is invalid: " + strings.Join(problems[key].Errors, "; ")
		case !m.managesNamespace(d.Namespace):
			reason = "the job's namespace is no longer managed"
		case incomplete:
			continue
		default:
			reason = "the job is no longer declared as managed in git"
		}
		if _, _, err := m.settle(d, structs.StateSuperseded, reason); err != nil {
			return err
		}
	}
	return nil
}

// freshSnapshots returns the snapshots of the repositories fetched since
// this leadership began.
func (m *Manager) freshSnapshots() []*gitwatch.Snapshot {
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

func (m *Manager) meta() structs.WriteMeta {
	return structs.WriteMeta{Time: m.now(), Actor: "nops"}
}

// parse returns the parse of a file: the job, or Nomad's verdict on the file
// in the result's err. The error it returns itself means Nomad gave no
// verdict; such a result is not cached. The job is shared with the cache:
// callers copy it before they change it.
func (m *Manager) parse(ctx context.Context, f gitwatch.JobFile) (parseResult, error) {
	h := f.ContentHash()
	m.mu.Lock()
	r, ok := m.parsed[h]
	m.mu.Unlock()
	if ok {
		return r, nil
	}
	job, err := m.nomad.Parse(ctx, f.Content, f.Vars)
	if ctx.Err() != nil {
		return parseResult{}, ctx.Err()
	}
	switch {
	case err == nil:
		r = parseResult{job: job, specHash: nomadx.SpecHash(job, nil)}
	case errors.Is(err, nomadx.ErrInvalidJob):
		r = parseResult{err: err}
	default:
		return parseResult{}, err
	}
	m.mu.Lock()
	m.parsed[h] = r
	m.mu.Unlock()
	return r, nil
}

// pruneParsed forgets the parses of content no repository holds any more,
// so the cache does not grow with every commit.
func (m *Manager) pruneParsed(used map[string]bool) {
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

func (m *Manager) managesNamespace(n string) bool {
	for _, want := range m.cfg.Namespaces {
		if want == "*" || want == n {
			return true
		}
	}
	return false
}

// classify sorts parsed files into managed jobs and hooks, and reports
// meta problems and duplicate declarations as job statuses.
func (m *Manager) classify(files []declaredFile) (map[string]*declared, map[string]*declared, map[string]*structs.JobStatus, map[string]*structs.JobStatus) {
	byKey := map[string][]*declared{}
	problems := map[string]*structs.JobStatus{}
	for _, f := range files {
		jm := meta.Read(f.file, f.job, m.jobDefaults())
		if !jm.Considered() {
			continue
		}
		if !m.managesNamespace(ns(f.job)) {
			continue
		}
		d := &declared{repo: f.repo, commit: f.commit, file: f.file, job: f.job, meta: jm, specHash: f.specHash}
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
func (m *Manager) liveJobs(ctx context.Context) (map[string]*api.JobListStub, error) {
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
			out[structs.JobKey(jn, s.ID)] = s
		}
	}
	return out, nil
}

// frozenHooks resolves the hooks a job declares among the parsed hooks of
// its namespace. A missing or invalid hook is returned as a problem.
func (m *Manager) frozenHooks(d *declared, hooks map[string]*declared) ([]structs.FrozenHook, []string, error) {
	var out []structs.FrozenHook
	var problems []string
	add := func(phase structs.HookPhase, names []string) error {
		for i, name := range names {
			h, ok := hooks[structs.JobKey(ns(d.job), name)]
			var found *meta.Declared
			if ok {
				found = &meta.Declared{File: h.file, Job: h.job, Meta: h.meta}
			}
			if p := meta.HookProblem(phase, name, ns(d.job), found); p != "" {
				problems = append(problems, p)
				continue
			}
			hash := nomadx.JobHash(h.job)
			rev := fmt.Sprintf("%s-%s", name, hash[:8])
			spec, err := hookRevisionSpec(h.job, rev)
			if err != nil {
				return err
			}
			fh := structs.FrozenHook{Name: name, Phase: phase, Position: i, RevisionJobID: rev, Hash: hash,
				Spec: spec, Timeout: h.meta.HookTimeout}
			if pj := h.job.ParameterizedJob; pj != nil {
				fh.MetaKeys = append(append([]string(nil), pj.MetaRequired...), pj.MetaOptional...)
			}
			out = append(out, fh)
		}
		return nil
	}
	if err := add(structs.PhasePre, d.meta.PreHooks); err != nil {
		return nil, nil, err
	}
	if err := add(structs.PhasePost, d.meta.PostHooks); err != nil {
		return nil, nil, err
	}
	return out, problems, nil
}

// detectJob runs steps 5 to 8 of a cycle for one managed job, the
// controller way: observe, decide, act. It returns the job's observed
// status and whether a deployment was created.
func (m *Manager) detectJob(ctx context.Context, d *declared, c *cycle) (*decision, bool, error) {
	v, err := m.observe(ctx, d, c)
	if err != nil {
		return nil, false, err
	}
	return m.act(ctx, v, decide(v))
}

// observe gathers the view of one job: its frozen hooks and spec hash, its
// plan (or the last one, while it still answers), and what the replicated
// state holds about it.
func (m *Manager) observe(ctx context.Context, d *declared, c *cycle) (*jobView, error) {
	v := &jobView{namespace: ns(d.job), jobID: id(d.job), repo: d.repo, commit: d.commit, file: d.file,
		policy: d.meta.Policy, windows: c.windows, schedule: c.schedule, now: c.now, decl: d}
	var err error
	if v.hooks, v.hookProblems, err = m.frozenHooks(d, c.hooks); err != nil {
		return nil, err
	}
	v.specHash = specHashWithHooks(d, v.hooks, v.hookProblems)
	if err := m.observePlan(ctx, v, c.live[d.key()]); err != nil {
		return nil, err
	}
	if err := m.observeState(ctx, v); err != nil {
		return nil, err
	}
	return v, nil
}

// specHashWithHooks is the job's spec hash with its frozen hooks and their
// problems, so that a change of either is a change of spec.
func specHashWithHooks(d *declared, frozen []structs.FrozenHook, problems []string) string {
	var hookHashes []string
	for _, h := range frozen {
		hookHashes = append(hookHashes, string(h.Phase)+":"+h.Name+":"+h.Hash)
	}
	for _, p := range problems {
		hookHashes = append(hookHashes, "problem:"+p)
	}
	if len(hookHashes) == 0 {
		return d.specHash
	}
	return nomadx.SpecHash(d.job, hookHashes)
}

// observePlan plans the job against Nomad (step 5), unless its last plan
// still answers. A group with a scaling block keeps its live count.
func (m *Manager) observePlan(ctx context.Context, v *jobView, stub *api.JobListStub) error {
	key := v.decl.key()
	if stub != nil {
		v.liveMod = stub.JobModifyIndex
	}
	m.mu.Lock()
	prev, seen := m.seen[key]
	m.mu.Unlock()
	if seen && m.lastPlanAnswers(v.decl, prev, v.specHash, v.liveMod, v.now) {
		v.inSync = true
		return nil
	}
	job, err := copyJob(v.decl.job)
	if err != nil {
		return err
	}
	if hasScaling(job) && stub != nil {
		liveJob, err := m.nomad.Job(ctx, v.namespace, v.jobID)
		if err != nil && !errors.Is(err, nomadx.ErrJobNotFound) {
			return fmt.Errorf("read live job: %w", err)
		}
		if liveJob != nil {
			nomadx.KeepLiveCounts(job, liveJob)
		}
	}
	plan, err := m.nomad.Plan(ctx, job)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	v.plan, v.inSync, v.liveMod = plan, plan.InSync(), 0
	if stub != nil {
		v.liveMod = plan.JobModifyIndex
	}
	m.mu.Lock()
	m.seen[key] = observed{specHash: v.specHash, liveMod: v.liveMod, inSync: v.inSync, planned: v.now}
	m.mu.Unlock()
	return nil
}

// lastPlanAnswers reports whether a job's last plan still answers for it,
// so that the cycle does not plan it again: it was in sync, and neither
// its spec nor its live job changed since, within the full re-plan
// interval, or while the paced full re-plan has no room for it (planDue,
// replan.go). planDue is asked last: it takes from the re-plan's budget.
func (m *Manager) lastPlanAnswers(d *declared, prev observed, specHash string, liveMod uint64, now time.Time) bool {
	return prev.inSync && prev.specHash == specHash && prev.liveMod == liveMod && !m.planDue(d, prev, now)
}

// observeState reads what the replicated state holds about the job: its
// pauses and deploy now, its active deployment and its block; and, when the
// rule needs it, whether the live job changed only by autoscaled counts.
// The pauses are read per job, after its plan, with the deploy now, at one
// index: pauses read earlier could miss a pause that came before a deploy
// now read later, and the deploy now would then lift the window of a
// paused job.
func (m *Manager) observeState(ctx context.Context, v *jobView) error {
	if err := m.observeHolds(v); err != nil {
		return err
	}
	st := m.srv.State()
	var err error
	if v.active, err = st.ActiveDeployment(v.namespace, v.jobID); err != nil {
		return fmt.Errorf("read active deployment: %w", err)
	}
	if v.block, err = st.Block(v.namespace, v.jobID); err != nil {
		return fmt.Errorf("read block: %w", err)
	}
	if v.needsAutoscaleCheck() {
		if v.autoscaledOnly, err = m.autoscaledSince(ctx, v.active, v.liveMod); err != nil {
			return err
		}
	}
	return nil
}

// observeHolds reads the job's pauses and deploy now into the view, at one
// index (StateStore.JobHolds).
func (m *Manager) observeHolds(v *jobView) error {
	var err error
	if v.pauses, v.lift, err = m.srv.State().JobHolds(v.namespace, v.jobID); err != nil {
		return fmt.Errorf("read pauses and deploy now: %w", err)
	}
	return nil
}

// act proposes the decision's entries, in order: the rebase, the end of
// the waiting deployment, the new deployment. When the waiting deployment
// moved on in between, the decision is taken again on what it became. It
// returns the decision as carried out.
func (m *Manager) act(ctx context.Context, v *jobView, dec decision) (*decision, bool, error) {
	if dec.rebase {
		if err := m.rebase(v.active, v.liveMod); err != nil {
			if !errors.Is(err, structs.ErrConflict) {
				return nil, false, err
			}
			v.autoscaledOnly = false
			dec = decide(v)
		}
	}
	if dec.settle != "" {
		moved, after, err := m.settle(v.active, dec.settle, dec.reason)
		if err != nil {
			return nil, false, err
		}
		if moved {
			if v.block, err = m.srv.State().Block(v.namespace, v.jobID); err != nil {
				return nil, false, fmt.Errorf("read block: %w", err)
			}
			dec.settleConflict(v, after)
		}
	}
	if !dec.create {
		return &dec, false, nil
	}
	// A pause may have come since observeState read the holds (a Nomad
	// call and a settle can come in between): read them again just before
	// the create, so that only the create's own round trip through Raft is
	// left for one to slip into. No deployment is active here (create
	// needs none).
	if err := m.observeHolds(v); err != nil {
		return nil, false, err
	}
	h := v.hold()
	dec.status.Hold = h.Reason()
	if dec.createRule(v, h, nil); !dec.create {
		return &dec, false, nil
	}
	created, err := m.create(ctx, v, dec)
	if err != nil {
		return nil, false, err
	}
	// The block is gone with the new deployment, unless it failed at once
	// for a missing or invalid hook.
	dec.status.Blocked = created && dec.failWith != ""
	return &dec, created, nil
}

// create proposes the new deployment. A conflict (another deployment of
// the job became active) creates nothing and is no error.
func (m *Manager) create(ctx context.Context, v *jobView, dec decision) (bool, error) {
	dep, err := m.newDeployment(ctx, v.decl, v.hooks, v.specHash, v.plan, v.liveMod, dec.skipRegister)
	if err != nil {
		return false, err
	}
	req := &structs.DeploymentCreateRequest{WriteMeta: m.meta(), Deployment: dep, ConsumeLift: dec.consumeLift,
		FailWith: dec.failWith}
	if _, err := m.srv.Apply(structs.DeploymentCreateRequestType, req); err != nil {
		if errors.Is(err, structs.ErrConflict) {
			m.logger.Debug("deployment not created", "job", v.decl.key(), "reason", err)
			return false, nil
		}
		return false, fmt.Errorf("create deployment: %w", err)
	}
	m.wakeCreated(dep)
	m.logger.Info("deployment created", "job", v.decl.key(), "deployment", dep.ID, "policy", dep.Policy, "commit", v.commit,
		"failed", req.FailWith)
	return true, nil
}

// newDeployment builds a deployment of d in state detected. skipRegister
// makes it a retry of a job already in sync.
func (m *Manager) newDeployment(ctx context.Context, d *declared, frozen []structs.FrozenHook, specHash string,
	plan *nomadx.PlanResult, liveMod uint64, skipRegister bool,
) (*structs.Deployment, error) {
	job, err := copyJob(d.job)
	if err != nil {
		return nil, err
	}
	spec, err := encodeJob(job)
	if err != nil {
		return nil, err
	}
	if plan == nil {
		// The cached in-sync answer has no plan; a retry needs none.
		plan = &nomadx.PlanResult{Type: nomadx.DiffTypeNone}
	}
	return &structs.Deployment{
		ID: uuid.NewString(), Namespace: ns(job), JobID: id(job), Repository: d.repo, Commit: d.commit, File: d.file,
		Policy: d.meta.Policy, State: structs.StateDetected, SpecHash: specHash, Spec: spec,
		Diff: plan.Text, DiffHash: nomadx.DiffHash(plan.Diff), JobModifyIndex: liveMod,
		SkipRegister: skipRegister, Hooks: frozen, ApplyTimeout: d.meta.ApplyTimeout,
	}, nil
}

func summarize(plan *nomadx.PlanResult) string {
	if plan == nil {
		return ""
	}
	first := strings.TrimSpace(plan.Text)
	if i := strings.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	return strings.TrimSpace(fmt.Sprintf("%s: %s", strings.ToLower(plan.Type), first))
}

func hasScaling(j *api.Job) bool {
	for _, tg := range j.TaskGroups {
		if tg.Scaling != nil {
			return true
		}
	}
	return false
}

// recordRepos writes each repository's status when it changed.
func (m *Manager) recordRepos(parseErrs map[string][]string) error {
	if m.git == nil {
		return nil
	}
	list, err := m.srv.State().RepoStatuses()
	if err != nil {
		return fmt.Errorf("read repository statuses: %w", err)
	}
	current := map[string]*structs.RepoStatus{}
	for _, r := range list {
		current[r.Name] = r
	}
	var changed []*structs.RepoStatus
	for _, s := range m.git.Status() {
		r := &structs.RepoStatus{Name: s.Name, URL: s.URL, Branch: s.Branch, Path: s.Path, Head: s.Head,
			LastFetch: s.LastFetch.UTC(), FetchError: s.LastError, ParseErrors: parseErrs[s.Name], Files: s.Files}
		if old := current[s.Name]; old != nil {
			o := *old
			o.ModifyIndex = 0
			o.LastFetch = r.LastFetch
			if reflect.DeepEqual(&o, r) && r.LastFetch.Sub(old.LastFetch) < time.Minute {
				continue
			}
		}
		changed = append(changed, r)
	}
	if len(changed) == 0 {
		return nil
	}
	_, err = m.srv.Apply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: m.meta(), Repos: changed})
	if err != nil {
		return fmt.Errorf("record repository status: %w", err)
	}
	return nil
}

// recordStatuses writes the observed status of the jobs that changed, marks
// orphans and forgets jobs that are gone from both git and Nomad. While any
// file fails to parse, jobs missing from git are left as they were.
func (m *Manager) recordStatuses(ctx context.Context, statuses map[string]*structs.JobStatus,
	live map[string]*api.JobListStub, anyParseError bool, now time.Time,
) error {
	st := m.srv.State()
	stored, err := st.JobStatuses()
	if err != nil {
		return fmt.Errorf("read job statuses: %w", err)
	}
	old := map[string]*structs.JobStatus{}
	for _, s := range stored {
		old[s.Key()] = s
	}
	var upserts []*structs.JobStatus
	var deletes []string
	for key, s := range statuses {
		if o := old[key]; o != nil && sameStatus(o, s) {
			continue
		}
		s.ObservedAt = now
		upserts = append(upserts, s)
	}
	if !anyParseError {
		for key, o := range old {
			if _, ok := statuses[key]; ok {
				continue
			}
			deployed, err := m.everRegistered(o.Namespace, o.JobID)
			if err != nil {
				return err
			}
			if live[key] != nil && deployed {
				if !o.Orphan {
					c := *o
					c.Orphan, c.Sync, c.Blocked, c.Hold, c.DriftSummary = true, "", false, "", ""
					c.Errors = nil
					c.ObservedAt = now
					upserts = append(upserts, &c)
				}
				continue
			}
			deletes = append(deletes, key)
		}
	}
	sort.Slice(upserts, func(i, j int) bool { return upserts[i].Key() < upserts[j].Key() })
	sort.Strings(deletes)
	if len(upserts) > 0 {
		if _, err := m.srv.Apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: m.meta(), Statuses: upserts}); err != nil {
			return fmt.Errorf("record job status: %w", err)
		}
	}
	if len(deletes) > 0 {
		if _, err := m.srv.Apply(structs.JobStatusDeleteRequestType, &structs.JobStatusDeleteRequest{WriteMeta: m.meta(), Keys: deletes}); err != nil {
			return fmt.Errorf("forget job status: %w", err)
		}
	}
	return nil
}

func (m *Manager) everRegistered(namespace, jobID string) (bool, error) {
	list, _, err := m.srv.State().Deployments(fsmFilter(namespace, jobID))
	if err != nil {
		return false, fmt.Errorf("read deployments of %s: %w", structs.JobKey(namespace, jobID), err)
	}
	for _, d := range list {
		if d.Registered || d.State == structs.StateCompleted {
			return true, nil
		}
	}
	return false, nil
}

func sameStatus(a, b *structs.JobStatus) bool {
	x, y := *a, *b
	x.ObservedAt, y.ObservedAt = time.Time{}, time.Time{}
	x.CreateIndex, y.CreateIndex = 0, 0
	x.ModifyIndex, y.ModifyIndex = 0, 0
	if len(x.Errors) == 0 {
		x.Errors = nil
	}
	if len(y.Errors) == 0 {
		y.Errors = nil
	}
	return reflect.DeepEqual(x, y)
}

// nextWindowBoundary returns when the next sync window opens or closes.
func (m *Manager) nextWindowBoundary() time.Time {
	windows, err := m.srv.State().Windows()
	if err != nil {
		// Look again after the engine interval rather than never.
		m.logger.Warn("read sync windows", "error", err)
		return m.now().Add(m.cfg.EngineInterval)
	}
	if len(windows) == 0 {
		return time.Time{}
	}
	return holds.NextBoundary(windows, m.now())
}
