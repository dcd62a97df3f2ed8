package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// frozenHooks resolves the hooks a job declares among the parsed hooks of
// its namespace. A missing or invalid hook is returned as a problem.
func (m *Detector) frozenHooks(d *declared, hooks map[string]*declared) ([]structs.FrozenHook, []string, error) {
	var out []structs.FrozenHook
	var problems []string
	add := func(phase structs.HookPhase, names []string) error {
		for i, name := range names {
			h, ok := hooks[structs.JobKey(d.cluster, d.spec.namespace, name)]
			var found *meta.Declared
			var hj *api.Job
			if ok {
				var err error
				if hj, err = h.hookJob(); err != nil {
					return err
				}
				found = &meta.Declared{File: h.file, Job: hj, Meta: h.meta}
			}
			if p := meta.HookProblem(phase, name, d.spec.namespace, found); p != "" {
				problems = append(problems, p)
				continue
			}
			hash := nomadx.JobHash(hj)
			rev := name + "-" + structs.ShortID(hash)
			spec, err := hookRevisionSpec(hj, rev)
			if err != nil {
				return err
			}
			fh := structs.FrozenHook{Name: name, Phase: phase, Position: i, RevisionJobID: rev, Hash: hash,
				Spec: spec, Timeout: h.meta.HookTimeout}
			if pj := hj.ParameterizedJob; pj != nil {
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
func (m *Detector) detectJob(ctx context.Context, d *declared, c *cycle) (*decision, bool, error) {
	v, err := m.observe(ctx, d, c)
	if err != nil {
		return nil, false, err
	}
	return m.act(ctx, v, decide(v))
}

// observe gathers the view of one job: its frozen hooks and spec hash, its
// plan (or the last one, while it still answers), and what the replicated
// state holds about it.
func (m *Detector) observe(ctx context.Context, d *declared, c *cycle) (*jobView, error) {
	v := &jobView{cluster: d.cluster, namespace: d.spec.namespace, jobID: d.spec.id, repo: d.repo, commit: d.commit, file: d.file,
		policy: d.meta.Policy, windows: c.windows, schedule: c.schedule, now: c.now, decl: d,
		deps: c.dependencyStates(d), depProblems: c.depProblems[d.key()]}
	var err error
	if v.hooks, v.hookProblems, err = m.frozenHooks(d, c.hooks); err != nil {
		return nil, err
	}
	if v.specHash, err = specHashWithHooks(d, v.hooks, v.hookProblems); err != nil {
		return nil, err
	}
	if err := m.observePlan(ctx, v, c.live[d.key()], c.listed); err != nil {
		return nil, err
	}
	if err := m.observeState(ctx, v); err != nil {
		return nil, err
	}
	return v, nil
}

// specHashWithHooks is the job's spec hash with its frozen hooks and their
// problems, so that a change of either is a change of spec.
func specHashWithHooks(d *declared, frozen []structs.FrozenHook, problems []string) (string, error) {
	var hookHashes []string
	for _, h := range frozen {
		hookHashes = append(hookHashes, string(h.Phase)+":"+h.Name+":"+h.Hash)
	}
	for _, p := range problems {
		hookHashes = append(hookHashes, "problem:"+p)
	}
	if len(hookHashes) == 0 {
		return d.spec.specHash, nil
	}
	job, err := d.spec.job()
	if err != nil {
		return "", err
	}
	return nomadx.SpecHash(job, hookHashes), nil
}

// observePlan plans the job against Nomad (step 5), unless its last plan
// still answers. A group with a scaling block keeps its live count. stub
// is the job in the list of live jobs asked for at listed.
func (m *Detector) observePlan(ctx context.Context, v *jobView, stub *api.JobListStub, listed time.Time) error {
	key := v.decl.key()
	if stub != nil {
		v.liveMod = stub.JobModifyIndex
	}
	m.mu.Lock()
	prev, seen := m.seen[key]
	m.mu.Unlock()
	if seen && listPredates(prev, v.liveMod, listed) {
		v.liveMod = prev.liveMod
	}
	if seen && m.lastPlanAnswers(v.decl, prev, v.specHash, v.liveMod, v.now) {
		v.inSync = true
		return nil
	}
	job, err := v.decl.spec.job()
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
	live := stub != nil || v.liveMod != 0
	v.plan, v.inSync, v.liveMod = plan, plan.InSync(), 0
	if live {
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
func (m *Detector) lastPlanAnswers(d *declared, prev observed, specHash string, liveMod uint64, now time.Time) bool {
	return prev.inSync && prev.specHash == specHash && prev.liveMod == liveMod && !m.planDue(d, prev, now)
}

// observeState reads what the replicated state holds about the job: its
// pauses and deploy now, its active deployment and its block; and, when the
// rule needs it, whether the live job changed only by autoscaled counts.
// The pauses are read per job, after its plan, with the deploy now, at one
// index: pauses read earlier could miss a pause that came before a deploy
// now read later, and the deploy now would then lift the window of a
// paused job.
func (m *Detector) observeState(ctx context.Context, v *jobView) error {
	if err := m.observeHolds(v); err != nil {
		return err
	}
	st := m.srv.State()
	var err error
	if v.active, err = st.ActiveDeployment(v.cluster, v.namespace, v.jobID); err != nil {
		return fmt.Errorf("read active deployment: %w", err)
	}
	if v.block, err = st.Block(v.cluster, v.namespace, v.jobID); err != nil {
		return fmt.Errorf("read block: %w", err)
	}
	if v.needsAutoscaleCheck() {
		if v.autoscaledOnly, err = m.autoscaledSince(ctx, v.active, v.liveMod); err != nil {
			return err
		}
	}
	return m.observeRequirements(v)
}

// observeRequirements reads the states of the job in the clusters its
// cluster requires (the promotion order, SPEC section 16), when the order
// can matter: the job wants a deployment, or one waits in detected.
func (m *core) observeRequirements(v *jobView) error {
	wants := !v.inSync || (v.block != nil && v.block.Retried)
	detected := v.active != nil && v.active.State == structs.StateDetected
	p := m.promotion()
	if len(p.Requires) == 0 || !wants && !detected {
		return nil
	}
	repo := v.repo
	if detected {
		repo = v.active.Repository
	}
	var err error
	v.bake = p.Bake
	v.requires, err = m.requirementStates(v.namespace, v.jobID, repo, v.promotionCommit())
	return err
}

// requirementStates reads, from the replicated state, what each cluster
// the core's cluster requires holds of a job, relative to commit of
// repository repo: promotionWait's input, for detection and for the
// apply loop's gate alike.
func (m *core) requirementStates(namespace, jobID, repo, commit string) ([]reqState, error) {
	st := m.srv.State()
	requires := m.promotion().Requires
	out := make([]reqState, 0, len(requires))
	for _, c := range requires {
		r := reqState{cluster: c}
		status, err := st.JobStatus(c, namespace, jobID)
		if err != nil {
			return nil, fmt.Errorf("read the status of %s in required cluster %s: %w", jobID, c, err)
		}
		if status != nil {
			r.exists = true
			done, err := st.LastCompletedDeployment(c, namespace, jobID)
			if err != nil {
				return nil, fmt.Errorf("read the last completed deployment of %s in required cluster %s: %w", jobID, c, err)
			}
			if done != nil {
				r.completedCommit, r.completedAt = done.Commit, done.StateEnteredAt
				r.completedLater = m.sameOrLater(repo, commit, done.Repository, done.Commit)
			}
			last, err := st.LastDeployment(c, namespace, jobID)
			if err != nil {
				return nil, fmt.Errorf("read the last deployment of %s in required cluster %s: %w", jobID, c, err)
			}
			if last != nil && (last.State == structs.StateFailed || last.State == structs.StateRejected) &&
				m.sameOrLater(repo, commit, last.Repository, last.Commit) {
				r.heldID, r.heldState, r.heldError = last.ID, last.State, last.Error
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// sameOrLater reports whether commit other (of repository otherRepo) is
// commit (of repo) or a later one: a descendant of it in git's history.
// Ancestry is asked only when the commits differ, of the clones of repo,
// and only when both repositories are clones of one remote URL (their
// commits are then of one history). When the repositories' URLs differ,
// or the clones cannot tell (a commit or the history between them not
// fetched: the clones are shallow), only an equal commit counts: the
// order then waits, which an operator can skip, rather than promote a
// commit nothing showed to be later.
func (m *core) sameOrLater(repo, commit, otherRepo, other string) bool {
	if commit == other {
		return commit != ""
	}
	if m.git == nil || commit == "" || other == "" || (otherRepo != repo && !m.git.SameRemote(repo, otherRepo)) {
		return false
	}
	ok, err := m.git.IsAncestor(repo, commit, other)
	if err != nil {
		m.logger.Debug("promotion order: ancestry not decided; only the same commit counts", "repository", repo,
			"commit", structs.ShortID(commit), "other", structs.ShortID(other), "error", err)
		return false
	}
	return ok
}

// observeHolds reads the job's pauses and deploy now into the view, at one
// index (StateStore.JobHolds).
func (m *Detector) observeHolds(v *jobView) error {
	var err error
	if v.pauses, v.lift, err = m.srv.State().JobHolds(v.cluster, v.namespace, v.jobID); err != nil {
		return fmt.Errorf("read pauses and deploy now: %w", err)
	}
	return nil
}

// act proposes the decision's entries, in order: the rebase, the end of
// the waiting deployment, the new deployment. When the waiting deployment
// moved on in between, the decision is taken again on what it became. It
// returns the decision as carried out.
func (m *Detector) act(ctx context.Context, v *jobView, dec decision) (*decision, bool, error) {
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
			if v.block, err = m.srv.State().Block(v.cluster, v.namespace, v.jobID); err != nil {
				return nil, false, fmt.Errorf("read block: %w", err)
			}
			dec.settleConflict(v, after)
		}
	}
	if dec.release && dec.settle == "" {
		m.wakeDeployments(v.active.ID)
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
func (m *Detector) create(ctx context.Context, v *jobView, dec decision) (bool, error) {
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
	if req.FailWith != "" {
		m.metrics.failed.Inc()
	}
	m.logger.Info("deployment created", "job", v.decl.key(), "deployment", dep.ID, "policy", dep.Policy, "commit", v.commit,
		"failed", req.FailWith)
	return true, nil
}

// newDeployment builds a deployment of d in state detected. skipRegister
// makes it a retry of a job already in sync.
func (m *Detector) newDeployment(ctx context.Context, d *declared, frozen []structs.FrozenHook, specHash string,
	plan *nomadx.PlanResult, liveMod uint64, skipRegister bool,
) (*structs.Deployment, error) {
	job, err := d.spec.job()
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
	dep := &structs.Deployment{
		ID: uuid.NewString(), Cluster: structs.ClusterName(d.cluster), Namespace: ns(job), JobID: id(job), Repository: d.repo, Commit: d.commit, File: d.file,
		Policy: d.meta.Policy, State: structs.StateDetected, SpecHash: specHash, Spec: spec,
		Diff: plan.Text, DiffHash: nomadx.DiffHash(plan.Diff), JobModifyIndex: liveMod,
		SkipRegister: skipRegister, Hooks: frozen, ApplyTimeout: d.meta.ApplyTimeout, PlanDiff: plan.Tree,
		ApprovalsRequired: d.meta.Approvals, ApprovalTTL: d.meta.ApprovalTTL,
	}
	commits := commitReader{srv: m.srv, git: m.git, redact: m.nomad.Redactor().Source, logger: m.logger}
	if err := commits.record(ctx, d, dep); err != nil {
		return nil, err
	}
	return dep, nil
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
