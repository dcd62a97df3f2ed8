package structs

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// DeploymentState is a state of the deployment lifecycle (SPEC section 3).
type DeploymentState string

const (
	StateDetected        DeploymentState = "detected"
	StatePendingApproval DeploymentState = "pending_approval"
	StatePreHook         DeploymentState = "pre_hook"
	StateApplying        DeploymentState = "applying"
	StatePostHook        DeploymentState = "post_hook"
	StateCompleted       DeploymentState = "completed"
	StateFailed          DeploymentState = "failed"
	StateRejected        DeploymentState = "rejected"
	StateSuperseded      DeploymentState = "superseded"
	// StateExpired ends a deployment that waited for approval longer than
	// its approval TTL (SPEC section 20).
	StateExpired DeploymentState = "expired"
)

// AllStates lists every state, in lifecycle order.
var AllStates = []DeploymentState{
	StateDetected, StatePendingApproval, StatePreHook, StateApplying, StatePostHook,
	StateCompleted, StateFailed, StateRejected, StateSuperseded, StateExpired,
}

// Trigger says who moves a deployment: the reconcilers (system), or a
// person's approve or reject.
type Trigger string

const (
	TriggerSystem  Trigger = "system"
	TriggerApprove Trigger = "approve"
	TriggerReject  Trigger = "reject"
)

// Transition is one allowed move of the lifecycle.
type Transition struct {
	From, To DeploymentState
	By       Trigger
}

// Transitions is the lifecycle as data: every allowed move and what may make
// it. A state with no move out of it is terminal.
//
// detected may complete (the job was put in sync by hand) or fail (a hook it
// declares is missing). Only approve and reject start or end a deployment
// waiting in pending_approval; the system may only supersede it, complete
// it when the job is already in sync, or expire it once its approval TTL
// has run out.
var Transitions = []Transition{
	{StateDetected, StatePendingApproval, TriggerSystem},
	{StateDetected, StatePreHook, TriggerSystem},
	{StateDetected, StateApplying, TriggerSystem},
	{StateDetected, StateSuperseded, TriggerSystem},
	{StateDetected, StateCompleted, TriggerSystem},
	{StateDetected, StateFailed, TriggerSystem},
	{StatePendingApproval, StatePreHook, TriggerApprove},
	{StatePendingApproval, StateApplying, TriggerApprove},
	{StatePendingApproval, StateRejected, TriggerReject},
	{StatePendingApproval, StateSuperseded, TriggerSystem},
	{StatePendingApproval, StateCompleted, TriggerSystem},
	{StatePendingApproval, StateExpired, TriggerSystem},
	{StatePreHook, StateApplying, TriggerSystem},
	{StatePreHook, StateFailed, TriggerSystem},
	{StateApplying, StatePostHook, TriggerSystem},
	{StateApplying, StateCompleted, TriggerSystem},
	{StateApplying, StateFailed, TriggerSystem},
	{StatePostHook, StateCompleted, TriggerSystem},
	{StatePostHook, StateFailed, TriggerSystem},
}

// Valid reports whether s is a known state.
func (s DeploymentState) Valid() bool {
	for _, k := range AllStates {
		if s == k {
			return true
		}
	}
	return false
}

// Terminal reports whether s is a state that never changes again.
func (s DeploymentState) Terminal() bool {
	if !s.Valid() {
		return false
	}
	for _, t := range Transitions {
		if t.From == s {
			return false
		}
	}
	return true
}

// Active reports whether a deployment in s counts as the job's one active
// deployment.
func (s DeploymentState) Active() bool { return s.Valid() && !s.Terminal() }

// Waiting reports whether a deployment in s has not started yet and may be
// superseded.
func (s DeploymentState) Waiting() bool {
	return s == StateDetected || s == StatePendingApproval
}

// CanTransition reports whether by may move a deployment from one state to
// the other. It is the one answer to that question.
func CanTransition(from, to DeploymentState, by Trigger) bool {
	for _, t := range Transitions {
		if t.From == from && t.To == to && t.By == by {
			return true
		}
	}
	return false
}

// Policy decides what detection does with drift (SPEC section 2).
type Policy string

const (
	PolicyAuto     Policy = "auto"
	PolicyApproval Policy = "approval"
	PolicyNone     Policy = "none"
)

// ParsePolicy validates a policy value.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyAuto, PolicyApproval, PolicyNone:
		return p, nil
	}
	return "", fmt.Errorf("invalid policy %q: want auto, approval or none", s)
}

// HookPhase says when a hook runs.
type HookPhase string

const (
	PhasePre  HookPhase = "pre"
	PhasePost HookPhase = "post"
)

// FrozenHook is a hook as it was when a deployment was detected.
type FrozenHook struct {
	Name  string    `json:"name"`
	Phase HookPhase `json:"phase"`
	// Position is the hook's place in its phase, from 0.
	Position int `json:"position"`
	// RevisionJobID is the job Nops registers for this revision:
	// <hook-id>-<first 8 hex digits of Hash>.
	RevisionJobID string `json:"revision_job_id"`
	Hash          string `json:"hash"`
	// Spec is the hook job to register, as JSON. Never shown by the API.
	Spec []byte `json:"spec,omitempty"`
	// Timeout is the hook's nops_hook_timeout, or the server default.
	Timeout time.Duration `json:"timeout"`
	// MetaKeys are the dispatch meta keys the hook declares.
	MetaKeys []string `json:"meta_keys,omitempty"`
}

// HookRunState is the state of one run of one hook.
type HookRunState string

const (
	// HookRunDispatching: the intent to dispatch is recorded; Nomad may or
	// may not have the run.
	HookRunDispatching HookRunState = "dispatching"
	HookRunRunning     HookRunState = "running"
	HookRunSucceeded   HookRunState = "succeeded"
	HookRunFailed      HookRunState = "failed"
)

// HookRun is one run of one hook of one deployment.
type HookRun struct {
	Hook     string    `json:"hook"`
	Phase    HookPhase `json:"phase"`
	Position int       `json:"position"`
	// Token is the dispatch idempotency token, unique to (deployment,
	// phase, position).
	Token           string       `json:"token"`
	DispatchedJobID string       `json:"dispatched_job_id,omitempty"`
	State           HookRunState `json:"state"`
	Error           string       `json:"error,omitempty"`
	StartedAt       time.Time    `json:"started_at"`
	FinishedAt      time.Time    `json:"finished_at,omitzero"`
}

// HookRunToken is the idempotency token of a hook run.
func HookRunToken(deploymentID string, phase HookPhase, position int) string {
	return fmt.Sprintf("nops-%s-%s-%d", deploymentID, phase, position)
}

// Decision is a person's approve or reject.
type Decision struct {
	Kind    string    `json:"kind"` // "approve" or "reject"
	Actor   string    `json:"actor"`
	Comment string    `json:"comment,omitempty"`
	Time    time.Time `json:"time"`
}

const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// DefaultApplyTimeout bounds a deployment's register and health when
// neither its job nor the server configuration sets an apply timeout.
const DefaultApplyTimeout = 15 * time.Minute

// Deployment is one attempt to bring one job to its spec in git.
type Deployment struct {
	ID string `json:"id"`
	// Cluster is the Nomad cluster of the job (SPEC section 16).
	Cluster    string          `json:"cluster"`
	Namespace  string          `json:"namespace"`
	JobID      string          `json:"job_id"`
	Repository string          `json:"repository"`
	Commit     string          `json:"commit"`
	File       string          `json:"file"`
	Policy     Policy          `json:"policy"`
	State      DeploymentState `json:"state"`
	SpecHash   string          `json:"spec_hash"`
	// Spec is the full job to register, as JSON. Never shown by the API.
	Spec []byte `json:"spec,omitempty"`
	// Diff is the redacted plan diff seen at detection.
	Diff string `json:"diff"`
	// DiffHash is the hash of the plan diff seen at detection; the register
	// goes ahead only if a new plan shows the same diff. It is a hash of the
	// unredacted diff, so it is kept in the replicated state (the codec tag
	// names it in the log and snapshots) and never published (no JSON): an
	// unsalted hash of a diff would let any reader of the API confirm a
	// guess of a secret value in it. Keying it (HMAC with a cluster secret)
	// would only matter if it were published, and no reader needs it.
	DiffHash string `codec:"diff_hash" json:"-"`
	// JobModifyIndex is the live job's modify index read at detection (0 for
	// a new job); the register enforces it. A change of the live job that
	// only moves the counts left to an autoscaler moves it along.
	JobModifyIndex uint64 `json:"job_modify_index"`
	// SkipRegister is set on a retry created while the live job already
	// matches git: it waits for health and runs the post-hooks again.
	SkipRegister bool `json:"skip_register,omitempty"`
	// LiftedWindow is set when a deploy-now request lifted a closed sync
	// window for this deployment.
	LiftedWindow bool         `json:"lifted_window,omitempty"`
	LiftedBy     string       `json:"lifted_by,omitempty"`
	Hooks        []FrozenHook `json:"hooks"`
	HookRuns     []HookRun    `json:"hook_runs"`
	Decisions    []Decision   `json:"decisions"`
	// Approvals are the approve decisions, for the readers of the API:
	// Public fills it from Decisions, the one record. It is never stored:
	// the codec tag keeps it out of the log and of snapshots.
	Approvals []Decision `codec:"-" json:"approvals,omitempty"`
	// RegisterStartedAt is recorded before the register: the intent. A
	// deployment in applying with it set may have been registered.
	RegisterStartedAt time.Time `json:"register_started_at,omitzero"`
	// Registered is set once Nomad answered the register.
	Registered        bool   `json:"registered,omitempty"`
	JobVersion        uint64 `json:"job_version,omitempty"`
	NomadEvalID       string `json:"nomad_eval_id,omitempty"`
	NomadDeploymentID string `json:"nomad_deployment_id,omitempty"`
	// HealthDeadline is when the apply timeout runs out; zero while
	// canaries wait for promotion.
	HealthDeadline time.Time     `json:"health_deadline,omitzero"`
	ApplyTimeout   time.Duration `json:"apply_timeout"`
	Error          string        `json:"error,omitempty"`
	CreatedAt      time.Time     `json:"created_at"`
	UpdatedAt      time.Time     `json:"updated_at"`
	StateEnteredAt time.Time     `json:"state_entered_at"`
	CreateIndex    uint64        `json:"create_index"`
	ModifyIndex    uint64        `json:"modify_index"`

	// The commit context (SPEC section 15), read from git at detection:
	// what an approver reads beside the plan diff. CommitMessage is the
	// subject and body, at most MaxTextLen bytes; CommitAuthor is
	// "Name <email>"; CommitURL links the commit in the repository's web
	// UI, or is empty. FileDiff is the redacted unified diff of the job
	// file and its variables file since the job's last completed
	// deployment, at most MaxFileDiffLen bytes (CapFileDiff).
	CommitMessage string    `json:"commit_message,omitempty"`
	CommitAuthor  string    `json:"commit_author,omitempty"`
	CommitTime    time.Time `json:"commit_time,omitzero"`
	CommitURL     string    `json:"commit_url,omitempty"`
	FileDiff      string    `json:"file_diff,omitempty"`
	// CommitCommitter is who applied the commit ("Name <email>"), which
	// differs from its author after a rebase or a cherry-pick; forbid_self
	// refuses the approval of either.
	CommitCommitter string `json:"commit_committer,omitempty"`
	// CommitSigner is the fingerprint of the key whose signature of the
	// commit was verified (SPEC section 18): "SHA256:…" for an SSH key,
	// the hexadecimal fingerprint of the primary key for OpenPGP. Empty
	// when the repository verifies no signatures.
	CommitSigner string `json:"commit_signer,omitempty"`
	// ApprovalsRequired is how many approvals, each from a distinct
	// identity, the deployment needs to leave pending_approval: its job's
	// nops_approvals at detection (SPEC section 20). 0, as on a
	// deployment recorded before the rule, counts as 1.
	ApprovalsRequired int `json:"approvals_required"`
	// ApprovalTTL is how long the deployment may wait in pending_approval
	// before it expires: its job's nops_approval_ttl, else the server's
	// approval { ttl }, at detection. 0 never expires.
	ApprovalTTL time.Duration `json:"approval_ttl,omitempty"`
	// PlanDiff is the redacted plan diff seen at detection as a tree, for
	// the dashboard (Diff is its text, for the CLI); nil for a deployment
	// recorded before it was kept. It never changes once recorded.
	PlanDiff *PlanDiff `json:"plan_diff,omitempty"`
	// SkipRequirements is set when an operator let the deployment start
	// without its cluster's promotion order (SPEC section 16:
	// skip-requirements), SkipRequirementsBy to who did; the reason is
	// in the deployment's events.
	SkipRequirements   bool   `json:"skip_requirements,omitempty"`
	SkipRequirementsBy string `json:"skip_requirements_by,omitempty"`
}

// CommitSubject returns the first line of the commit message.
func (d *Deployment) CommitSubject() string { return CommitSubject(d.CommitMessage) }

// DefaultCluster is the name of the Nomad cluster of a configuration with
// no nomad blocks, and the cluster of every object recorded before Nops
// knew of clusters (SPEC section 16).
const DefaultCluster = "default"

// ClusterName returns the cluster an object names: "" (an object recorded
// before clusters, or a request that names none) is DefaultCluster.
func ClusterName(cluster string) string {
	if cluster == "" {
		return DefaultCluster
	}
	return cluster
}

// JobKey is the identity of a job: its cluster, namespace and job ID. A job
// of the default cluster keys as "namespace/job", as every job did before
// clusters, so that the keys a data dir already holds (events' objects,
// pauses, notification marks) keep naming the same jobs; a job of another
// cluster as "cluster:namespace/job". Neither a cluster name nor a Nomad
// namespace may hold ':' or '/', so the key reads back unambiguously
// (SplitJobKey).
func JobKey(cluster, namespace, jobID string) string {
	if cluster == "" || cluster == DefaultCluster {
		return namespace + "/" + jobID
	}
	return cluster + ":" + namespace + "/" + jobID
}

// SplitJobKey reads a job key back into its cluster, namespace and job ID;
// ok is false for a string that is no job key.
func SplitJobKey(key string) (cluster, namespace, jobID string, ok bool) {
	ns, id, found := strings.Cut(key, "/")
	if !found || id == "" {
		return "", "", "", false
	}
	cluster = DefaultCluster
	if c, n, has := strings.Cut(ns, ":"); has {
		cluster, ns = c, n
	}
	if cluster == "" || ns == "" {
		return "", "", "", false
	}
	return cluster, ns, id, true
}

// Key returns the deployment's job key.
func (d *Deployment) Key() string { return JobKey(d.Cluster, d.Namespace, d.JobID) }

// Copy returns a deep copy, so a reader never shares slices with the store;
// but for the plan diff tree, which is never changed once recorded (no
// patch touches it) and which no reader may change: copying it on every
// read of a deployment would cost more than the rest of the copy.
func (d *Deployment) Copy() *Deployment {
	if d == nil {
		return nil
	}
	c := *d
	c.Spec = slices.Clone(d.Spec)
	c.Hooks = slices.Clone(d.Hooks)
	for i := range c.Hooks {
		c.Hooks[i].Spec = slices.Clone(c.Hooks[i].Spec)
		c.Hooks[i].MetaKeys = slices.Clone(c.Hooks[i].MetaKeys)
	}
	c.HookRuns = slices.Clone(d.HookRuns)
	c.Decisions = slices.Clone(d.Decisions)
	c.Approvals = slices.Clone(d.Approvals)
	return &c
}

// Public returns a copy fit for the API: without the job spec and the hook
// specs, with its approvals listed.
func (d *Deployment) Public() *Deployment {
	c := d.Copy()
	c.Spec = nil
	for i := range c.Hooks {
		c.Hooks[i].Spec = nil
	}
	c.Approvals = d.ApprovalsGiven()
	return c
}

// RequiredApprovals is how many approvals from distinct identities d
// needs: ApprovalsRequired, at least one.
func (d *Deployment) RequiredApprovals() int { return max(1, d.ApprovalsRequired) }

// ApprovalsGiven returns d's approve decisions, oldest first, or nil.
func (d *Deployment) ApprovalsGiven() []Decision {
	var out []Decision
	for _, c := range d.Decisions {
		if c.Kind == DecisionApprove {
			out = append(out, c)
		}
	}
	return out
}

// ApprovedBy reports whether actor already approved d. Identities are
// compared without regard to case, so that one person is not counted
// twice for the spelling of a name.
func (d *Deployment) ApprovedBy(actor string) bool {
	for _, c := range d.Decisions {
		if c.Kind == DecisionApprove && strings.EqualFold(c.Actor, actor) {
			return true
		}
	}
	return false
}

// ApprovalExpiresAt returns when d, waiting for approval, expires: its
// approval TTL after it entered pending_approval. It is zero when d is not
// pending approval or has no TTL.
func (d *Deployment) ApprovalExpiresAt() time.Time {
	if d.State != StatePendingApproval || d.ApprovalTTL <= 0 {
		return time.Time{}
	}
	return d.StateEnteredAt.Add(d.ApprovalTTL)
}

// ApprovalRefusal returns why actor may not approve d, or nil: with
// forbidSelf (approval { forbid_self }), actor is the author of d's commit
// (ErrForbidden); actor already approved d (ErrConflict). The FSM refuses
// an approval with it, and the dashboard shows it in place of the Approve
// button, so both say the same.
func (d *Deployment) ApprovalRefusal(actor string, forbidSelf bool) error {
	if forbidSelf && d.AuthoredBy(actor) {
		who := "author " + d.CommitAuthor
		if d.CommitCommitter != "" && d.CommitCommitter != d.CommitAuthor {
			who += ", committer " + d.CommitCommitter
		}
		return fmt.Errorf("%w: approval forbid_self: %s wrote commit %s (%s) and may not approve its deployment %s; another identity must",
			ErrForbidden, actor, ShortID(d.Commit), who, d.ID)
	}
	if d.ApprovedBy(actor) {
		return fmt.Errorf("%w: nops_approvals: %s already approved deployment %s; it needs %d approvals from distinct identities, and one identity counts once",
			ErrConflict, actor, d.ID, d.RequiredApprovals())
	}
	return nil
}

// AuthoredBy reports whether identity wrote d's commit: its name is the
// name or email of the commit's author or of its committer, without
// regard to case. An empty identity, or a deployment whose author and
// committer are not known, matches nothing.
func (d *Deployment) AuthoredBy(identity string) bool {
	identity = strings.TrimSpace(identity)
	if identity == "" {
		return false
	}
	for _, who := range []string{d.CommitAuthor, d.CommitCommitter} {
		name, email := SplitAuthor(who)
		if (name != "" && strings.EqualFold(identity, name)) || (email != "" && strings.EqualFold(identity, email)) {
			return true
		}
	}
	return false
}

// SplitAuthor splits a git identity, "Name <email>", into its name and
// email; a string without an email is all name.
func SplitAuthor(author string) (name, email string) {
	author = strings.TrimSpace(author)
	open, end := strings.LastIndexByte(author, '<'), strings.LastIndexByte(author, '>')
	if open < 0 || end < open {
		return author, ""
	}
	return strings.TrimSpace(author[:open]), strings.TrimSpace(author[open+1 : end])
}

// HooksOf returns the frozen hooks of one phase, in order.
func (d *Deployment) HooksOf(phase HookPhase) []FrozenHook {
	var out []FrozenHook
	for _, h := range d.Hooks {
		if h.Phase == phase {
			out = append(out, h)
		}
	}
	return out
}

// HookRun returns the run of the hook at (phase, position), if any.
func (d *Deployment) HookRun(phase HookPhase, position int) (HookRun, bool) {
	for _, r := range d.HookRuns {
		if r.Phase == phase && r.Position == position {
			return r, true
		}
	}
	return HookRun{}, false
}

// StartState is the state a deployment enters once it may run: pre_hook
// when it has pre-hooks, else applying.
func (d *Deployment) StartState() DeploymentState {
	if len(d.HooksOf(PhasePre)) > 0 {
		return StatePreHook
	}
	return StateApplying
}
