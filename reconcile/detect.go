package reconcile

import (
	"context"
	"encoding/json"
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
// cycle skips its plan.
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

func ns(j *api.Job) string {
	if j.Namespace == nil || *j.Namespace == "" {
		return "default"
	}
	return *j.Namespace
}

func id(j *api.Job) string {
	if j.ID == nil {
		return ""
	}
	return *j.ID
}

type cycleResult struct {
	jobs, drifted, created int
	changed                bool
}

// DetectOnce runs one detection cycle (SPEC section 4).
func (m *Manager) DetectOnce(ctx context.Context) (*cycleResult, error) {
	started := m.now()
	res := &cycleResult{}
	st := m.srv.State()

	// 1. Snapshots, with the fetch status of each repository. Only the
	// snapshots fetched during this leadership count: one kept from an
	// earlier term may be older than what that term deployed.
	var snaps []*gitwatch.Snapshot
	if m.git != nil {
		snaps = m.freshSnapshots()
	}

	// 2. Parse every file, through the cache. A parse that got no verdict
	// from Nomad fails the cycle: it says nothing about the file.
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
				return nil, fmt.Errorf("parse %s of %s: %w", f.Path, snap.Repo, err)
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
	if err := m.recordRepos(parseErrs); err != nil {
		return nil, err
	}
	// A view of git is incomplete while a file fails to parse or a
	// repository has no snapshot yet (a new leader before its first fetch):
	// a job missing from an incomplete view is not treated as removed.
	anyParseError := len(parseErrs) > 0
	if m.git != nil && len(snaps) < len(m.git.Status()) {
		anyParseError = true
		m.logger.Debug("detecting with an incomplete view of git: a repository is not fetched yet in this term")
	}

	// 3. Classify, 4. drop duplicates.
	managed, hooks, problems, conflicts := m.classify(files)

	// Live jobs, one list per namespace.
	live, err := m.liveJobsCached(ctx)
	if err != nil {
		err = fmt.Errorf("list live jobs: %w", err)
		if nomadx.IsPermissionDenied(err) {
			m.refusedList(ctx, managed, err)
		}
		return nil, err
	}

	pauses, err := st.Pauses()
	if err != nil {
		return nil, err
	}
	windows, err := st.Windows()
	if err != nil {
		return nil, err
	}
	now := m.now()

	statuses := map[string]*structs.JobStatus{}
	keys := make([]string, 0, len(managed))
	for k := range managed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		d := managed[key]
		res.jobs++
		status, created, err := m.detectJob(ctx, d, hooks, live, pauses, windows, now)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			m.logger.Error("detection failed for job", "job", key, "error", err)
			status = &structs.JobStatus{Namespace: ns(d.job), JobID: id(d.job), Repository: d.repo, File: d.file,
				Commit: d.commit, Policy: d.meta.Policy, Sync: structs.SyncError, Errors: []string{err.Error()}}
		}
		status.Errors = append(status.Errors, m.refusalsOf(key)...)
		if status.Sync == structs.SyncDrift {
			res.drifted++
		}
		if created {
			res.created++
			res.changed = true
		}
		statuses[key] = status
	}
	for key, errs := range problems {
		if _, ok := statuses[key]; ok {
			continue
		}
		statuses[key] = errs
	}
	for key, c := range conflicts {
		statuses[key] = c
	}

	if err := m.supersedeUnmanaged(managed, conflicts, problems, anyParseError); err != nil {
		return nil, err
	}
	if err := m.recordStatuses(ctx, statuses, live, anyParseError, now); err != nil {
		return nil, err
	}
	if _, err := m.srv.Apply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{
		WriteMeta: m.meta(),
		Cycle: &structs.DetectionCycle{Leader: m.srv.NodeID(), StartedAt: started, FinishedAt: m.now(),
			Jobs: res.jobs, Drifted: res.drifted, Created: res.created},
	}); err != nil {
		return nil, fmt.Errorf("record detection cycle: %w", err)
	}
	m.stopUnusedRevisions(ctx, live)
	m.mu.Lock()
	m.lastCycle = res
	m.mu.Unlock()
	return res, nil
}

type declaredFile struct {
	repo, commit, file string
	job                *api.Job
	specHash           string
}

// settle ends a waiting deployment (superseded or completed) and returns
// the job's active deployment after it: nil, or the one that moved on in
// between (an approval, or the apply loop starting it), which then runs.
func (m *Manager) settle(d *structs.Deployment, to structs.DeploymentState, reason string) (*structs.Deployment, error) {
	err := m.transition(d, to, reason, "")
	if err == nil {
		return nil, nil
	}
	if !errors.Is(err, structs.ErrConflict) {
		return nil, err
	}
	m.logger.Debug("waiting deployment moved on before detection could settle it", "deployment", d.ID, "error", err)
	active, err := m.srv.State().ActiveDeployment(d.Namespace, d.JobID)
	if err == nil && active != nil && active.State.Waiting() {
		// It still waits (detected became pending_approval): revalidate
		// it in the next cycle rather than at the next periodic one.
		m.TriggerDetection()
	}
	return active, err
}

// supersedeUnmanaged supersedes the waiting deployments of jobs that git no
// longer declares as managed: removed (only with a complete view of git),
// declared twice, or invalid. Nothing can revalidate them any more, and an
// approval must not deploy what git no longer asks for.
func (m *Manager) supersedeUnmanaged(managed map[string]*declared, conflicts, problems map[string]*structs.JobStatus, incomplete bool) error {
	active, err := m.srv.State().ActiveDeployments()
	if err != nil {
		return err
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
		if _, err := m.settle(d, structs.StateSuperseded, reason); err != nil {
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
func copyJob(j *api.Job) *api.Job {
	if j == nil {
		return nil
	}
	b, err := json.Marshal(j)
	if err != nil {
		return j
	}
	c, err := decodeJob(b)
	if err != nil {
		return j
	}
	return c
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
		if jm.Kind == meta.Ignored && len(jm.Problems) == 0 {
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
			msg := fmt.Sprintf("job %s is declared by more than one file (%s): all are ignored", key, strings.Join(where, ", "))
			m.logger.Error("duplicate job declaration", "job", key, "files", strings.Join(where, ", "))
			d := ds[0]
			conflicts[key] = &structs.JobStatus{Namespace: ns(d.job), JobID: id(d.job), Repository: d.repo, File: strings.Join(where, ", "),
				Commit: d.commit, Policy: d.meta.Policy, Sync: structs.SyncError, Errors: []string{msg}}
			continue
		}
		d := ds[0]
		if len(d.meta.Problems) > 0 {
			if d.meta.Kind == meta.Managed || d.meta.Kind == meta.Ignored {
				problems[key] = &structs.JobStatus{Namespace: ns(d.job), JobID: id(d.job), Repository: d.repo, File: d.file,
					Commit: d.commit, Policy: d.meta.Policy, Sync: structs.SyncError, Errors: d.meta.Problems}
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
			if !ok {
				problems = append(problems, fmt.Sprintf("%s hook %q is not declared by any file in namespace %s", phase, name, ns(d.job)))
				continue
			}
			if why := validateHook(h.job); why != "" {
				problems = append(problems, fmt.Sprintf("%s hook %q (%s) is not a valid hook: %s", phase, name, h.file, why))
				continue
			}
			if len(h.meta.Problems) > 0 {
				problems = append(problems, fmt.Sprintf("%s hook %q is invalid: %s", phase, name, strings.Join(h.meta.Problems, "; ")))
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

// detectJob runs steps 5 to 8 of a cycle for one managed job and returns its
// observed status.
func (m *Manager) detectJob(ctx context.Context, d *declared, hooks map[string]*declared,
	live map[string]*api.JobListStub, pauses []*structs.Pause, windows []*structs.SyncWindow, now time.Time,
) (*structs.JobStatus, bool, error) {
	st := m.srv.State()
	key := d.key()
	namespace, jobID := ns(d.job), id(d.job)
	status := &structs.JobStatus{Namespace: namespace, JobID: jobID, Repository: d.repo, File: d.file,
		Commit: d.commit, Policy: d.meta.Policy}

	frozen, hookProblems, err := m.frozenHooks(d, hooks)
	if err != nil {
		return nil, false, err
	}
	var hookHashes []string
	for _, h := range frozen {
		hookHashes = append(hookHashes, string(h.Phase)+":"+h.Name+":"+h.Hash)
	}
	for _, p := range hookProblems {
		hookHashes = append(hookHashes, "problem:"+p)
	}
	specHash := d.specHash
	if len(hookHashes) > 0 {
		specHash = nomadx.SpecHash(d.job, hookHashes)
	}
	status.SpecHash = specHash

	var liveMod uint64
	if stub := live[key]; stub != nil {
		liveMod = stub.JobModifyIndex
	}
	status.LiveModifyIndex = liveMod

	// Plan, unless the job was in sync and neither side changed since.
	m.mu.Lock()
	prev, seen := m.seen[key]
	m.mu.Unlock()
	var plan *nomadx.PlanResult
	inSync := false
	if seen && prev.inSync && prev.specHash == specHash && prev.liveMod == liveMod && !m.planDue(d, prev, now) {
		inSync = true
	} else {
		job := copyJob(d.job)
		if hasScaling(job) && live[key] != nil {
			liveJob, err := m.nomad.Job(ctx, namespace, jobID)
			if err != nil && !errors.Is(err, nomadx.ErrJobNotFound) {
				return nil, false, fmt.Errorf("read live job: %w", err)
			}
			if liveJob != nil {
				nomadx.KeepLiveCounts(job, liveJob)
			}
		}
		plan, err = m.nomad.Plan(ctx, job)
		if err != nil {
			return nil, false, fmt.Errorf("plan: %w", err)
		}
		inSync = plan.InSync()
		if live[key] == nil {
			liveMod = 0
		} else {
			liveMod = plan.JobModifyIndex
		}
		status.LiveModifyIndex = liveMod
		m.mu.Lock()
		m.seen[key] = observed{specHash: specHash, liveMod: liveMod, inSync: inSync, planned: now}
		m.mu.Unlock()
	}
	if inSync {
		status.Sync = structs.SyncInSync
	} else {
		status.Sync = structs.SyncDrift
		status.DriftSummary = summarize(plan)
	}

	// Holds.
	hold := ""
	for _, p := range pauses {
		if p.Global {
			hold = fmt.Sprintf("paused (every job) by %s: %s", p.Actor, p.Reason)
			break
		}
		if p.Namespace == namespace && p.JobID == jobID {
			hold = fmt.Sprintf("paused by %s: %s", p.Actor, p.Reason)
		}
	}
	paused := hold != ""
	windowClosed, windowReason := holds.Closed(windows, namespace, jobID, now)
	lift, err := st.Lift(namespace, jobID)
	if err != nil {
		return nil, false, err
	}
	if !paused && windowClosed {
		hold = "sync window: " + windowReason
		if lift != nil {
			hold += " (deploy now requested)"
		}
	}
	status.Hold = hold
	if len(hookProblems) > 0 {
		status.Errors = append(status.Errors, hookProblems...)
	}

	// Revalidate the waiting deployment.
	active, err := st.ActiveDeployment(namespace, jobID)
	if err != nil {
		return nil, false, err
	}
	if active != nil && active.State.Waiting() {
		reason := ""
		// A job put in sync by hand is a live change too, but it reached
		// the spec the deployment was for: that completes it, so the
		// in-sync check comes before the live-change one.
		synced := inSync && !active.SkipRegister && active.SpecHash == specHash
		liveChanged := active.JobModifyIndex != liveMod
		if liveChanged && !synced && active.SpecHash == specHash && d.meta.Policy != structs.PolicyNone {
			// A scale by an autoscaler is not a change.
			rebased, err := m.rebaseAutoscaled(ctx, active, liveMod)
			if err != nil && !errors.Is(err, structs.ErrConflict) {
				return nil, false, err
			}
			liveChanged = !rebased
		}
		switch {
		case d.meta.Policy == structs.PolicyNone:
			reason = "the job's policy became none"
		case active.SpecHash != specHash:
			reason = "a newer spec in git replaces it"
		case synced:
			// Completed below.
		case liveChanged:
			reason = "the live job changed since detection"
		case paused:
			reason = "the job is held: " + hold
		case windowClosed && !active.LiftedWindow:
			reason = "the job is held: sync window: " + windowReason
		}
		switch {
		case reason != "":
			if active, err = m.settle(active, structs.StateSuperseded, reason); err != nil {
				return nil, false, err
			}
		case synced:
			if active, err = m.settle(active, structs.StateCompleted, "the job is already in sync"); err != nil {
				return nil, false, err
			}
		}
	}

	// Blocks.
	block, err := st.Block(namespace, jobID)
	if err != nil {
		return nil, false, err
	}
	blocked := block.Blocks(specHash, liveMod)
	status.Blocked = blocked
	retried := block != nil && block.Retried

	// Create.
	wantDeploy := !inSync || retried
	held := paused || (windowClosed && lift == nil)
	created := false
	if wantDeploy && d.meta.Policy != structs.PolicyNone && !blocked && !held && active == nil {
		dep, err := m.newDeployment(ctx, d, frozen, specHash, plan, liveMod, inSync)
		if err != nil {
			return nil, false, err
		}
		req := &structs.DeploymentCreateRequest{WriteMeta: m.meta(), Deployment: dep, ConsumeLift: lift != nil,
			FailWith: strings.Join(hookProblems, "; ")}
		if _, err := m.srv.Apply(structs.DeploymentCreateRequestType, req); err != nil {
			if errors.Is(err, structs.ErrConflict) {
				m.logger.Debug("deployment not created", "job", key, "reason", err)
			} else {
				return nil, false, fmt.Errorf("create deployment: %w", err)
			}
		} else {
			created = true
			m.wakeCreated(dep)
			m.logger.Info("deployment created", "job", key, "deployment", dep.ID, "policy", dep.Policy, "commit", d.commit,
				"failed", req.FailWith)
		}
		// The block is gone with the new deployment, unless it failed at
		// once for a missing or invalid hook.
		status.Blocked = created && req.FailWith != ""
	}
	return status, created, nil
}

func (m *Manager) newDeployment(ctx context.Context, d *declared, frozen []structs.FrozenHook, specHash string,
	plan *nomadx.PlanResult, liveMod uint64, inSync bool,
) (*structs.Deployment, error) {
	job := copyJob(d.job)
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
		SkipRegister: inSync, Hooks: frozen, ApplyTimeout: d.meta.ApplyTimeout,
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
	current := map[string]*structs.RepoStatus{}
	if list, err := m.srv.State().RepoStatuses(); err == nil {
		for _, r := range list {
			current[r.Name] = r
		}
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
	_, err := m.srv.Apply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: m.meta(), Repos: changed})
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
		return err
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
		return false, err
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
	if err != nil || len(windows) == 0 {
		return time.Time{}
	}
	return holds.NextBoundary(windows, m.now())
}
