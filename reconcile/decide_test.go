package reconcile

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
	"github.com/nops-dev/nops/structs/meta"
)

// The table below has one row per rule of SPEC section 4 (steps 6 to 9,
// blocks) and section 6 (holds, windows, deploy now). Each row is a view
// of one job and what decide must answer; no Nomad, no Raft.

// decideNow is a Monday noon: window "lunch" (deny, 12:00 for 1h) is
// active, window "nights" (allow, 22:00 for 2h) is not.
var decideNow = time.Date(2024, time.June, 3, 12, 0, 0, 0, time.UTC)

var (
	lunch     = &structs.SyncWindow{Name: "lunch", Kind: structs.WindowDeny, Schedule: "0 12 * * *", Duration: "1h"}
	nights    = &structs.SyncWindow{Name: "nights", Kind: structs.WindowAllow, Schedule: "0 22 * * *", Duration: "2h"}
	office    = &structs.SyncWindow{Name: "office", Kind: structs.WindowAllow, Schedule: "0 9 * * 1-5", Duration: "8h"}
	webPause  = &structs.Pause{Key: "default/web", Namespace: "default", JobID: "web", Actor: "ann", Reason: "db maintenance"}
	allPaused = &structs.Pause{Key: structs.GlobalPauseKey, Global: true, Actor: "bob", Reason: "change freeze"}
	deployNow = &structs.WindowLift{Namespace: "default", JobID: "web", Actor: "carol"}
)

const (
	gitSpec = "spec-new" // the spec hash git declares now
	oldSpec = "spec-old" // the one an earlier deployment was for
	liveIdx = uint64(20) // the live job's modify index now
	oldIdx  = uint64(10) // the one an earlier deployment saw
)

// drifted is the base view: job default/web, policy approval, drifting
// from git, nothing waiting, nothing held.
func drifted() *jobView {
	return &jobView{
		namespace: "default", jobID: "web", repo: "main", commit: "c0ffee", file: "jobs/web.nomad.hcl",
		policy: structs.PolicyApproval, specHash: gitSpec, liveMod: liveIdx,
		plan: &nomadx.PlanResult{Type: nomadx.DiffTypeEdited, Text: "+/- Job: \"web\"\n+/- Task Group: \"web\""},
		now:  decideNow,
	}
}

// inSync is the base view of a job whose live job matches git (the last
// plan still answers, so there is no plan).
func inSync() *jobView {
	v := drifted()
	v.inSync, v.plan = true, nil
	return v
}

// waiting returns a deployment of the job waiting in state, for spec and
// live index.
func waiting(state structs.DeploymentState, spec string, index uint64) *structs.Deployment {
	return &structs.Deployment{ID: "d1", Namespace: "default", JobID: "web", State: state, SpecHash: spec, JobModifyIndex: index}
}

// pendingFor returns a deployment of the job's current spec and live
// index that has waited for approval for d, with an approval TTL of an
// hour.
func pendingFor(d time.Duration) *structs.Deployment {
	a := waiting(structs.StatePendingApproval, gitSpec, liveIdx)
	a.Policy, a.ApprovalTTL, a.StateEnteredAt = structs.PolicyApproval, time.Hour, decideNow.Add(-d)
	return a
}

const expiredReason = "no decision within its approval TTL (1h0m0s): a commit, a live change or a retry creates a new deployment"

func with(v *jobView, change func(*jobView)) *jobView {
	change(v)
	return v
}

// outcome is what a row expects: the decision's actions and the status
// fields detection records.
type outcome struct {
	rebase       bool
	settle       structs.DeploymentState
	reason       string
	create       bool
	skipRegister bool
	consumeLift  bool
	failWith     string
	release      bool

	sync    structs.SyncState
	drift   string
	hold    string
	waiting string
	blocked bool
	errors  []string
}

func outcomeOf(d decision) outcome {
	return outcome{rebase: d.rebase, settle: d.settle, reason: d.reason, create: d.create, skipRegister: d.skipRegister,
		consumeLift: d.consumeLift, failWith: d.failWith, release: d.release,
		sync: d.status.Sync, drift: d.status.DriftSummary, hold: d.status.Hold, waiting: d.status.WaitingFor, blocked: d.status.Blocked, errors: d.status.Errors}
}

const driftLine = "edited: +/- Job: \"web\""

var (
	// created is a row's outcome when the job drifts and a deployment is
	// created; the rows change what differs.
	created = outcome{create: true, sync: structs.SyncDrift, drift: driftLine}
	// quiet is the outcome of a drifting job for which nothing is done.
	quiet = outcome{sync: structs.SyncDrift, drift: driftLine}
)

func (o outcome) and(change func(*outcome)) outcome {
	change(&o)
	return o
}

// dependsOn gives the view's job (default/web) the dependency states deps.
func dependsOn(v *jobView, deps ...depState) *jobView {
	v.deps = deps
	return v
}

// dbDeploying, dbDrifted and dbInSync are states of default/db, a job
// default/web depends on.
var (
	dbDeploying = depState{key: "default/db", active: structs.StateApplying}
	dbDrifted   = depState{key: "default/db"}
	dbInSync    = depState{key: "default/db", inSync: true}
	dbBlocked   = depState{key: "default/db", blocked: `failed: Nomad deployment "0b1c" failed`}
	dbInvalid   = depState{key: "default/db", invalid: "jobs/db.nomad.hcl: meta nops_policy = \"x\": must be auto, approval or none"}
)

// webDependencyProblems returns default/web's dependency problems, judged
// by meta.DependencyProblems (as detection does) in a graph of managed
// jobs (key: what it depends on) and of other declared jobs.
func webDependencyProblems(managed map[string][]string, declared ...string) []string {
	g := meta.DependencyGraph{Managed: map[string]meta.DependencyNode{}, Declared: map[string]bool{}}
	for key, deps := range managed {
		var ids []string
		for _, d := range deps {
			ids = append(ids, d[len("default/"):])
		}
		g.Managed[key] = meta.DependencyNode{File: "jobs/" + key[len("default/"):] + ".nomad.hcl",
			Value: strings.Join(ids, ","), DependsOn: deps}
	}
	for _, k := range declared {
		g.Declared[k] = true
	}
	return meta.DependencyProblems(g)["default/web"]
}

// invalidDeps is the outcome of a drifting job whose dependencies are
// invalid: a validation error, nothing created.
func invalidDeps(problem string) outcome {
	return quiet.and(func(o *outcome) { o.sync, o.errors = structs.SyncError, []string{problem} })
}

// The promotion order (SPEC section 16): web in cluster prod, which
// requires staging with a bake of 30 minutes; decideNow is 12:00 UTC.
const promoBake = 30 * time.Minute

// inProd returns the view as a job of cluster prod whose required clusters
// hold reqs.
func inProd(v *jobView, reqs ...reqState) *jobView {
	v.cluster, v.requires, v.bake = "prod", reqs, promoBake
	return v
}

// stagingDone is web completed in staging at at, of the view's commit (or
// a later one) when later.
func stagingDone(at time.Time, later bool) reqState {
	return reqState{cluster: "staging", exists: true, completedCommit: "c0ffee", completedAt: at, completedLater: later}
}

var (
	stagingBaked  = stagingDone(decideNow.Add(-time.Hour), true)
	stagingBaking = stagingDone(decideNow.Add(-10*time.Minute), true)
	stagingFailed = reqState{cluster: "staging", exists: true, completedCommit: "0ld", completedAt: decideNow.Add(-24 * time.Hour),
		heldID: "1a2b3c4d-0000", heldState: structs.StateFailed, heldError: `Nomad deployment "0b1c" failed`}
	stagingAbsent = reqState{cluster: "staging"}
)

const bakingWait = "waiting for staging (bakes until 12:20)"

func TestDecide(t *testing.T) {
	hookProblem := `pre hook "backup" is not declared by any file in namespace default`
	cases := []struct {
		rule string
		view *jobView
		want outcome
	}{
		// Step 8: create.
		{"drift creates a deployment", drifted(), created},
		{"in sync creates nothing", inSync(), outcome{sync: structs.SyncInSync}},
		{"policy none shows the drift and creates no deployment",
			with(drifted(), func(v *jobView) { v.policy = structs.PolicyNone }), quiet},
		{"an active deployment (running) means no new one",
			with(drifted(), func(v *jobView) { v.active = waiting(structs.StateApplying, oldSpec, oldIdx) }), quiet},

		// Step 7: revalidate the waiting deployment.
		{"policy none supersedes the waiting deployment",
			with(drifted(), func(v *jobView) {
				v.policy = structs.PolicyNone
				v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx)
			}),
			quiet.and(func(o *outcome) { o.settle, o.reason = structs.StateSuperseded, "the job's policy became none" })},
		{"a new spec supersedes the waiting deployment and replaces it",
			with(drifted(), func(v *jobView) { v.active = waiting(structs.StateDetected, oldSpec, liveIdx) }),
			created.and(func(o *outcome) { o.settle, o.reason = structs.StateSuperseded, "a newer spec in git replaces it" })},
		{"an unchanged spec (a commit elsewhere) does not supersede it",
			with(drifted(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx) }), quiet},
		{"a live change supersedes it",
			with(drifted(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, gitSpec, oldIdx) }),
			created.and(func(o *outcome) { o.settle, o.reason = structs.StateSuperseded, "the live job changed since detection" })},
		{"a live change of autoscaled counts only rebases it instead",
			with(drifted(), func(v *jobView) {
				v.active = waiting(structs.StatePendingApproval, gitSpec, oldIdx)
				v.autoscaledOnly = true
			}),
			quiet.and(func(o *outcome) { o.rebase = true })},
		{"an autoscaled-only change still lets a hold supersede it",
			with(drifted(), func(v *jobView) {
				v.active = waiting(structs.StatePendingApproval, gitSpec, oldIdx)
				v.autoscaledOnly = true
				v.pauses = []*structs.Pause{webPause}
			}),
			quiet.and(func(o *outcome) {
				o.rebase, o.settle, o.reason = true, structs.StateSuperseded, "the job is held: paused by ann: db maintenance"
				o.hold = "paused by ann: db maintenance"
			})},
		{"already in sync completes it",
			with(inSync(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx) }),
			outcome{sync: structs.SyncInSync, settle: structs.StateCompleted, reason: "the job is already in sync"}},
		{"put in sync by hand completes it: the in-sync check comes before the live change",
			with(inSync(), func(v *jobView) { v.active = waiting(structs.StateDetected, gitSpec, oldIdx) }),
			outcome{sync: structs.SyncInSync, settle: structs.StateCompleted, reason: "the job is already in sync"}},
		{"a retry of a job in sync (skip register) is not completed by being in sync",
			with(inSync(), func(v *jobView) {
				v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx)
				v.active.SkipRegister = true
			}),
			outcome{sync: structs.SyncInSync}},

		// Section 6: holds.
		{"a job pause holds: no deployment, drift shown",
			with(drifted(), func(v *jobView) { v.pauses = []*structs.Pause{webPause} }),
			quiet.and(func(o *outcome) { o.hold = "paused by ann: db maintenance" })},
		{"a job pause supersedes the waiting deployment",
			with(drifted(), func(v *jobView) {
				v.pauses = []*structs.Pause{webPause}
				v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx)
			}),
			quiet.and(func(o *outcome) {
				o.hold = "paused by ann: db maintenance"
				o.settle, o.reason = structs.StateSuperseded, "the job is held: paused by ann: db maintenance"
			})},
		{"a global pause holds and supersedes the waiting deployment",
			with(drifted(), func(v *jobView) {
				v.pauses = []*structs.Pause{allPaused}
				v.active = waiting(structs.StateDetected, gitSpec, liveIdx)
			}),
			quiet.and(func(o *outcome) {
				o.hold = "paused (every job) by bob: change freeze"
				o.settle, o.reason = structs.StateSuperseded, "the job is held: paused (every job) by bob: change freeze"
			})},
		{"another job's pause does not hold",
			with(drifted(), func(v *jobView) {
				v.pauses = []*structs.Pause{{Key: "default/api", Namespace: "default", JobID: "api", Actor: "ann"}}
			}), created},
		{"a closed deny window holds and supersedes the waiting deployment",
			with(drifted(), func(v *jobView) {
				v.windows = []*structs.SyncWindow{lunch}
				v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx)
			}),
			quiet.and(func(o *outcome) {
				o.hold = "sync window: deny window lunch is active"
				o.settle, o.reason = structs.StateSuperseded, "the job is held: sync window: deny window lunch is active"
			})},
		{"an allow window not active holds",
			with(drifted(), func(v *jobView) { v.windows = []*structs.SyncWindow{nights} }),
			quiet.and(func(o *outcome) { o.hold = "sync window: outside allow window nights" })},
		{"an active allow window does not hold",
			with(drifted(), func(v *jobView) { v.windows = []*structs.SyncWindow{office} }), created},
		{"a running deployment is not touched by a hold",
			with(drifted(), func(v *jobView) {
				v.pauses = []*structs.Pause{webPause}
				v.windows = []*structs.SyncWindow{lunch}
				v.active = waiting(structs.StateApplying, gitSpec, liveIdx)
			}),
			quiet.and(func(o *outcome) { o.hold = "paused by ann: db maintenance" })},
		{"a lifted window (deploy now) creates and consumes the lift",
			with(drifted(), func(v *jobView) {
				v.windows = []*structs.SyncWindow{lunch}
				v.lift = deployNow
			}),
			created.and(func(o *outcome) {
				o.consumeLift = true
				o.hold = "sync window: deny window lunch is active (deploy now requested)"
			})},
		{"a deployment that lifted the window is not superseded by it",
			with(drifted(), func(v *jobView) {
				v.windows = []*structs.SyncWindow{lunch}
				v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx)
				v.active.LiftedWindow = true
			}),
			quiet.and(func(o *outcome) { o.hold = "sync window: deny window lunch is active" })},
		{"deploy now does not lift a pause: no deployment",
			with(drifted(), func(v *jobView) {
				v.pauses = []*structs.Pause{webPause}
				v.windows = []*structs.SyncWindow{lunch}
				v.lift = deployNow
			}),
			quiet.and(func(o *outcome) { o.hold = "paused by ann: db maintenance" })},
		{"deploy now does not lift a pause: the lifted deployment is superseded",
			with(drifted(), func(v *jobView) {
				v.pauses = []*structs.Pause{webPause}
				v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx)
				v.active.LiftedWindow = true
			}),
			quiet.and(func(o *outcome) {
				o.hold = "paused by ann: db maintenance"
				o.settle, o.reason = structs.StateSuperseded, "the job is held: paused by ann: db maintenance"
			})},
		{"a held job stays blocked",
			with(drifted(), func(v *jobView) {
				v.pauses = []*structs.Pause{webPause}
				v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx}
			}),
			quiet.and(func(o *outcome) { o.hold, o.blocked = "paused by ann: db maintenance", true })},

		// Blocks.
		{"blocked on the same spec: no deployment",
			with(drifted(), func(v *jobView) { v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx} }),
			quiet.and(func(o *outcome) { o.blocked = true })},
		{"a change of spec unblocks",
			with(drifted(), func(v *jobView) { v.block = &structs.Block{SpecHash: oldSpec, JobModifyIndex: liveIdx} }), created},
		{"failed before its register: a live change unblocks",
			with(drifted(), func(v *jobView) { v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: oldIdx} }), created},
		{"failed after its register: a live change leaves it blocked",
			with(drifted(), func(v *jobView) {
				v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: oldIdx, AfterRegister: true}
			}),
			quiet.and(func(o *outcome) { o.blocked = true })},
		{"a retry creates even when in sync, skipping the register",
			with(inSync(), func(v *jobView) {
				v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx, AfterRegister: true, Retried: true}
			}),
			outcome{sync: structs.SyncInSync, create: true, skipRegister: true}},
		{"a retry of a drifting job registers",
			with(drifted(), func(v *jobView) { v.block = &structs.Block{SpecHash: gitSpec, Retried: true} }), created},

		// SPEC section 20: the approval TTL.
		{"pending approval past its TTL: expired, and nothing created for the same spec",
			with(drifted(), func(v *jobView) { v.active = pendingFor(2 * time.Hour) }),
			quiet.and(func(o *outcome) { o.settle, o.reason = structs.StateExpired, expiredReason })},
		{"pending approval within its TTL waits",
			with(drifted(), func(v *jobView) { v.active = pendingFor(30 * time.Minute) }), quiet},
		{"pending approval without a TTL never expires",
			with(drifted(), func(v *jobView) {
				v.active = pendingFor(1000 * time.Hour)
				v.active.ApprovalTTL = 0
			}), quiet},
		{"past its TTL, a new spec supersedes it rather than expire it, and replaces it",
			with(drifted(), func(v *jobView) {
				v.active = pendingFor(2 * time.Hour)
				v.active.SpecHash = oldSpec
			}),
			created.and(func(o *outcome) { o.settle, o.reason = structs.StateSuperseded, "a newer spec in git replaces it" })},
		{"a detected deployment does not expire: its TTL counts from pending_approval",
			with(drifted(), func(v *jobView) {
				v.active = pendingFor(2 * time.Hour)
				v.active.State = structs.StateDetected
			}), quiet},
		{"an expired approval is no failure: the job is not blocked, and the same spec is not proposed again",
			with(drifted(), func(v *jobView) { v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx, Expired: true} }),
			quiet},
		{"after an expired approval, the next commit creates a deployment",
			with(drifted(), func(v *jobView) { v.block = &structs.Block{SpecHash: oldSpec, JobModifyIndex: liveIdx, Expired: true} }),
			created},
		{"after an expired approval, a live change creates a deployment",
			with(drifted(), func(v *jobView) { v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: oldIdx, Expired: true} }),
			created},
		{"after an expired approval, a retry creates a deployment",
			with(drifted(), func(v *jobView) {
				v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx, Expired: true, Retried: true}
			}), created},

		// Step 6: hooks.
		{"a missing or invalid hook creates the deployment failed with the reason, and blocks",
			with(drifted(), func(v *jobView) { v.hookProblems = []string{hookProblem} }),
			created.and(func(o *outcome) {
				o.failWith, o.blocked, o.errors = hookProblem, true, []string{hookProblem}
			})},
		{"a missing hook on a held job shows the problem and creates nothing",
			with(drifted(), func(v *jobView) {
				v.hookProblems = []string{hookProblem}
				v.windows = []*structs.SyncWindow{nights}
			}),
			quiet.and(func(o *outcome) { o.hold, o.errors = "sync window: outside allow window nights", []string{hookProblem} })},

		// Section 17: dependencies (nops_depends_on = "db").
		{"a dependency in sync: the deployment is created",
			dependsOn(drifted(), dbInSync), created},
		{"a dependency deploying: the job waits, nothing created",
			dependsOn(drifted(), dbDeploying),
			quiet.and(func(o *outcome) { o.waiting = "waiting for default/db: deploying" })},
		{"a dependency waiting for approval counts as deploying",
			dependsOn(drifted(), depState{key: "default/db", active: structs.StatePendingApproval}),
			quiet.and(func(o *outcome) { o.waiting = "waiting for default/db: deploying" })},
		{"a dependency drifted (not in sync): the job waits",
			dependsOn(drifted(), dbDrifted),
			quiet.and(func(o *outcome) { o.waiting = "waiting for default/db: not in sync" })},
		{"a dependency blocked holds the job with its reason",
			dependsOn(drifted(), dbBlocked),
			quiet.and(func(o *outcome) {
				o.waiting = `waiting for default/db: blocked (failed: Nomad deployment "0b1c" failed)`
			})},
		{"an invalid dependency holds the job",
			dependsOn(drifted(), dbInvalid),
			quiet.and(func(o *outcome) { o.waiting = "waiting for default/db: invalid: " + dbInvalid.invalid })},
		{"the first dependency not ready is named",
			dependsOn(drifted(), dbInSync, depState{key: "infra/cache", active: structs.StateDetected}),
			quiet.and(func(o *outcome) { o.waiting = "waiting for infra/cache: deploying" })},
		{"a dependency not ready supersedes the waiting deployment",
			dependsOn(with(drifted(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx) }), dbDeploying),
			quiet.and(func(o *outcome) {
				o.waiting = "waiting for default/db: deploying"
				o.settle, o.reason = structs.StateSuperseded, "the job is waiting for default/db: deploying"
			})},
		{"a running deployment is not touched by a dependency, and the job does not wait",
			dependsOn(with(drifted(), func(v *jobView) { v.active = waiting(structs.StateApplying, gitSpec, liveIdx) }), dbDeploying),
			quiet},
		{"a job in sync waits for nothing, whatever its dependencies",
			dependsOn(inSync(), dbDrifted),
			outcome{sync: structs.SyncInSync}},
		{"a retry of a job in sync waits for its dependency",
			dependsOn(with(inSync(), func(v *jobView) {
				v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx, AfterRegister: true, Retried: true}
			}), dbDeploying),
			outcome{sync: structs.SyncInSync, waiting: "waiting for default/db: deploying"}},
		{"a retry of a blocked job still waits for its dependency",
			dependsOn(with(drifted(), func(v *jobView) {
				v.block = &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx, Retried: true}
			}), dbDeploying),
			quiet.and(func(o *outcome) { o.waiting = "waiting for default/db: deploying" })},
		{"deploy now does not skip a dependency: nothing created, the lift stays stored",
			dependsOn(with(drifted(), func(v *jobView) {
				v.windows = []*structs.SyncWindow{lunch}
				v.lift = deployNow
			}), dbDeploying),
			quiet.and(func(o *outcome) {
				o.hold = "sync window: deny window lunch is active (deploy now requested)"
				o.waiting = "waiting for default/db: deploying"
			})},
		{"a pause still holds a job whose dependencies are in sync",
			dependsOn(with(drifted(), func(v *jobView) { v.pauses = []*structs.Pause{webPause} }), dbInSync),
			quiet.and(func(o *outcome) { o.hold = "paused by ann: db maintenance" })},
		{"a pause and a dependency both show",
			dependsOn(with(drifted(), func(v *jobView) { v.pauses = []*structs.Pause{webPause} }), dbDrifted),
			quiet.and(func(o *outcome) {
				o.hold, o.waiting = "paused by ann: db maintenance", "waiting for default/db: not in sync"
			})},
		{"a missing dependency is a validation error",
			with(drifted(), func(v *jobView) {
				v.depProblems = webDependencyProblems(map[string][]string{"default/web": {"default/db"}})
			}),
			invalidDeps(`jobs/web.nomad.hcl: meta nops_depends_on = "db": default/db is missing: no file declares it`)},
		{"an unmanaged dependency is a validation error",
			with(drifted(), func(v *jobView) {
				v.depProblems = webDependencyProblems(map[string][]string{"default/web": {"default/db"}}, "default/db")
			}),
			invalidDeps(`jobs/web.nomad.hcl: meta nops_depends_on = "db": default/db is not a managed job (it has no nops_managed = "true", or its namespace is not managed)`)},
		{"a cycle of two is a validation error naming the cycle",
			with(drifted(), func(v *jobView) {
				v.depProblems = webDependencyProblems(map[string][]string{"default/web": {"default/db"}, "default/db": {"default/web"}})
			}),
			invalidDeps(`jobs/web.nomad.hcl: meta nops_depends_on = "db": dependency cycle default/web -> default/db -> default/web`)},
		{"a cycle of three is a validation error naming the whole cycle, and supersedes the waiting deployment",
			with(drifted(), func(v *jobView) {
				v.depProblems = webDependencyProblems(map[string][]string{"default/web": {"default/db"},
					"default/db": {"default/cache"}, "default/cache": {"default/web"}})
				v.active = waiting(structs.StateDetected, gitSpec, liveIdx)
			}),
			invalidDeps(`jobs/web.nomad.hcl: meta nops_depends_on = "db": dependency cycle default/web -> default/db -> default/cache -> default/web`).
				and(func(o *outcome) {
					o.settle = structs.StateSuperseded
					o.reason = `the job's dependencies are invalid: jobs/web.nomad.hcl: meta nops_depends_on = "db": dependency cycle default/web -> default/db -> default/cache -> default/web`
				})},

		// Section 16: the promotion order (prod requires staging, bake 30m).
		// A deployment that waits for it is created and waits in detected;
		// the apply loop's gate (awaitsPromotion) keeps it there.
		{"required cluster completed and baked: created, nothing to wait for",
			inProd(drifted(), stagingBaked), created},
		{"required cluster completed but baking: created, waiting with the time",
			inProd(drifted(), stagingBaking),
			created.and(func(o *outcome) { o.waiting = bakingWait })},
		{"only an older commit completed in the required cluster: waiting",
			inProd(drifted(), stagingDone(decideNow.Add(-time.Hour), false)),
			created.and(func(o *outcome) {
				o.waiting = "waiting for staging: no completed deployment of commit c0ffee or later"
			})},
		{"a failed deployment in the required cluster holds with its reason",
			inProd(drifted(), stagingFailed),
			created.and(func(o *outcome) {
				o.waiting = `held by staging: deployment 1a2b3c4d failed: Nomad deployment "0b1c" failed`
			})},
		{"a job absent from the required cluster is not held by it",
			inProd(drifted(), stagingAbsent), created},
		{"a deployment waiting in detected for the order is kept, not superseded",
			inProd(with(drifted(), func(v *jobView) { v.active = waiting(structs.StateDetected, gitSpec, liveIdx) }), stagingBaking),
			quiet.and(func(o *outcome) { o.waiting = bakingWait })},
		{"once baked, the deployment waiting in detected is released",
			inProd(with(drifted(), func(v *jobView) { v.active = waiting(structs.StateDetected, gitSpec, liveIdx) }), stagingBaked),
			quiet.and(func(o *outcome) { o.release = true })},
		{"deploy now does not skip the order: the lift is consumed, the deployment waits",
			inProd(with(drifted(), func(v *jobView) {
				v.windows = []*structs.SyncWindow{lunch}
				v.lift = deployNow
			}), stagingBaking),
			created.and(func(o *outcome) {
				o.consumeLift = true
				o.hold = "sync window: deny window lunch is active (deploy now requested)"
				o.waiting = bakingWait
			})},
		{"a deployment that lifted a window still waits for the order",
			inProd(with(drifted(), func(v *jobView) {
				v.active = waiting(structs.StateDetected, gitSpec, liveIdx)
				v.active.LiftedWindow = true
			}), stagingFailed),
			quiet.and(func(o *outcome) {
				o.waiting = `held by staging: deployment 1a2b3c4d failed: Nomad deployment "0b1c" failed`
			})},
		{"skip-requirements recorded on the deployment: not held",
			inProd(with(drifted(), func(v *jobView) {
				v.active = waiting(structs.StateDetected, gitSpec, liveIdx)
				v.active.SkipRequirements, v.active.SkipRequirementsBy = true, "carol"
			}), stagingFailed),
			quiet},
		{"a deployment past detected (waiting for approval) is not held by the order",
			inProd(with(drifted(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx) }), stagingFailed),
			quiet},
		{"two required clusters, one missing the commit: waiting for that one",
			inProd(drifted(), stagingBaked, reqState{cluster: "qa", exists: true}),
			created.and(func(o *outcome) { o.waiting = "waiting for qa: no completed deployment of commit c0ffee or later" })},
		{"a dependency not ready comes first, and nothing is created",
			inProd(dependsOn(drifted(), dbDeploying), stagingBaking),
			quiet.and(func(o *outcome) { o.waiting = "waiting for default/db: deploying" })},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			got := outcomeOf(decide(tc.view))
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decide:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDecide_PromotionLookAgain checks that a job waiting for a required
// cluster's bake is looked at again when it has baked, and only then.
func TestDecide_PromotionLookAgain(t *testing.T) {
	cases := []struct {
		rule string
		view *jobView
		want time.Time
	}{
		{"baking: when it has baked", inProd(drifted(), stagingBaking), decideNow.Add(20 * time.Minute)},
		{"a deployment waiting in detected: when it has baked",
			inProd(with(drifted(), func(v *jobView) { v.active = waiting(structs.StateDetected, gitSpec, liveIdx) }), stagingBaking),
			decideNow.Add(20 * time.Minute)},
		{"two baking: the earlier", inProd(drifted(), stagingBaking,
			reqState{cluster: "qa", exists: true, completedCommit: "c0ffee", completedAt: decideNow.Add(-20 * time.Minute), completedLater: true}),
			decideNow.Add(10 * time.Minute)},
		{"baked: only the usual triggers", inProd(drifted(), stagingBaked), time.Time{}},
		{"held by a failure: only the usual triggers", inProd(drifted(), stagingFailed), time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			if got := decide(tc.view).lookAgainAt; !got.Equal(tc.want) {
				t.Fatalf("lookAgainAt = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDecide_StatusRecordsTheView checks the status decide returns for
// step 9: where the job comes from, its spec hash and its live index.
func TestDecide_StatusRecordsTheView(t *testing.T) {
	s := decide(drifted()).status
	want := &structs.JobStatus{Cluster: structs.DefaultCluster, Namespace: "default", JobID: "web", Repository: "main", File: "jobs/web.nomad.hcl",
		Commit: "c0ffee", Policy: structs.PolicyApproval, Sync: structs.SyncDrift, DriftSummary: driftLine,
		SpecHash: gitSpec, LiveModifyIndex: liveIdx}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("status:\n got %+v\nwant %+v", s, want)
	}
}

// TestDecide_SettleConflict checks creation after the waiting deployment
// moved on before it could be settled: the one that moved on counts as
// active, and a block written by its end holds.
func TestDecide_SettleConflict(t *testing.T) {
	base := func() *jobView {
		return with(drifted(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, oldSpec, liveIdx) })
	}
	cases := []struct {
		rule  string
		after *structs.Deployment
		block *structs.Block
		want  outcome
	}{
		{"a deployment that moved on (approved) counts as active: no create",
			waiting(structs.StatePreHook, oldSpec, liveIdx), nil, quiet},
		{"a deployment that moved on and still waits counts as active: no create",
			waiting(structs.StatePendingApproval, oldSpec, liveIdx), nil, quiet},
		{"a deployment that ended with nothing active after it: create",
			nil, nil, created},
		{"a deployment rejected in between: its block, read after it, holds",
			nil, &structs.Block{SpecHash: gitSpec, JobModifyIndex: liveIdx}, quiet.and(func(o *outcome) { o.blocked = true })},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			v := base()
			dec := decide(v)
			if dec.settle != structs.StateSuperseded || !dec.create {
				t.Fatalf("setup: decide = %+v, want a supersede and a create", outcomeOf(dec))
			}
			v.block = tc.block
			dec.settleConflict(v, tc.after)
			if got := outcomeOf(dec); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("after the conflict:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDecide_AutoscaleCheckOnlyWhenItMatters checks when observe asks Nomad
// whether a live change was only an autoscaler's: only for a waiting
// deployment of the same spec whose live job moved and is not in sync.
func TestDecide_AutoscaleCheckOnlyWhenItMatters(t *testing.T) {
	cases := []struct {
		rule string
		view *jobView
		want bool
	}{
		{"a live change of a waiting deployment of the same spec",
			with(drifted(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, gitSpec, oldIdx) }), true},
		{"no active deployment", drifted(), false},
		{"a running deployment", with(drifted(), func(v *jobView) { v.active = waiting(structs.StateApplying, gitSpec, oldIdx) }), false},
		{"no live change", with(drifted(), func(v *jobView) { v.active = waiting(structs.StateDetected, gitSpec, liveIdx) }), false},
		{"a new spec supersedes anyway", with(drifted(), func(v *jobView) { v.active = waiting(structs.StateDetected, oldSpec, oldIdx) }), false},
		{"in sync completes anyway", with(inSync(), func(v *jobView) { v.active = waiting(structs.StateDetected, gitSpec, oldIdx) }), false},
		{"policy none supersedes anyway", with(drifted(), func(v *jobView) {
			v.policy = structs.PolicyNone
			v.active = waiting(structs.StateDetected, gitSpec, oldIdx)
		}), false},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			if got := tc.view.needsAutoscaleCheck(); got != tc.want {
				t.Fatalf("needsAutoscaleCheck = %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkDecide measures decide for a job in sync with a waiting
// deployment, a pause and a window to evaluate: the work detection adds per
// job once its view is observed.
func BenchmarkDecide(b *testing.B) {
	v := with(inSync(), func(v *jobView) {
		v.pauses = []*structs.Pause{{Key: "default/api", Namespace: "default", JobID: "api"}}
		v.windows = []*structs.SyncWindow{office}
		v.active = waiting(structs.StatePendingApproval, gitSpec, liveIdx)
	})
	for b.Loop() {
		if d := decide(v); d.settle != structs.StateCompleted {
			b.Fatalf("decide = %+v, want the waiting deployment completed", outcomeOf(d))
		}
	}
}

// TestDecide_LookAgain checks when a decision asks detection to look at
// the job again though nothing else triggers it (the requeue-after): at
// the next boundary of a window that matches the job, and at once when the
// waiting deployment moved on but still waits.
func TestDecide_LookAgain(t *testing.T) {
	elsewhere := &structs.SyncWindow{Name: "elsewhere", Kind: structs.WindowDeny, Schedule: "30 12 * * *", Duration: "1m",
		Jobs: []string{"api"}}
	lunchEnds := time.Date(2024, time.June, 3, 13, 0, 0, 0, time.UTC)
	nightsOpen := time.Date(2024, time.June, 3, 22, 0, 0, 0, time.UTC)
	cases := []struct {
		rule    string
		windows []*structs.SyncWindow
		want    time.Time
	}{
		{"no window: only the usual triggers", nil, time.Time{}},
		{"a closed deny window: when it closes", []*structs.SyncWindow{lunch}, lunchEnds},
		{"an allow window not active: when it opens", []*structs.SyncWindow{nights}, nightsOpen},
		{"two windows: the earliest boundary", []*structs.SyncWindow{nights, lunch}, lunchEnds},
		{"a window of another job: not this one's boundary", []*structs.SyncWindow{elsewhere}, time.Time{}},
		{"a window that does not validate: skipped", []*structs.SyncWindow{{Name: "bad", Kind: structs.WindowDeny, Schedule: "nope", Duration: "1h"}}, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			v := with(inSync(), func(v *jobView) {
				v.windows = tc.windows
				v.schedule = holds.At(tc.windows, v.now)
			})
			if got := decide(v).lookAgainAt; !got.Equal(tc.want) {
				t.Fatalf("lookAgainAt = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a waiting deployment that moved on and still waits: at once", func(t *testing.T) {
		v := with(drifted(), func(v *jobView) { v.active = waiting(structs.StateDetected, oldSpec, liveIdx) })
		dec := decide(v)
		dec.settleConflict(v, waiting(structs.StatePendingApproval, oldSpec, liveIdx))
		if !dec.lookAgainAt.Equal(v.now) {
			t.Fatalf("lookAgainAt = %v, want now (%v)", dec.lookAgainAt, v.now)
		}
	})
	t.Run("a waiting deployment that moved on and runs: no look again", func(t *testing.T) {
		v := with(drifted(), func(v *jobView) { v.active = waiting(structs.StatePendingApproval, oldSpec, liveIdx) })
		dec := decide(v)
		dec.settleConflict(v, waiting(structs.StatePreHook, oldSpec, liveIdx))
		if !dec.lookAgainAt.IsZero() {
			t.Fatalf("lookAgainAt = %v, want zero", dec.lookAgainAt)
		}
	})
}

// TestDecide_LookAgainAtApprovalExpiry checks that detection looks at a
// deployment waiting for approval again when its TTL runs out, so that it
// expires then and not at the next periodic cycle.
func TestDecide_LookAgainAtApprovalExpiry(t *testing.T) {
	soon := &structs.SyncWindow{Name: "soon", Kind: structs.WindowDeny, Schedule: "30 12 * * *", Duration: "1m"}
	cases := []struct {
		rule    string
		active  *structs.Deployment
		windows []*structs.SyncWindow
		want    time.Time
	}{
		{"pending approval: when its TTL runs out", pendingFor(15 * time.Minute), nil, decideNow.Add(45 * time.Minute)},
		{"a window boundary before it comes first", pendingFor(0), []*structs.SyncWindow{soon},
			time.Date(2024, time.June, 3, 12, 30, 0, 0, time.UTC)},
		{"detected under the approval policy: a TTL from now at the latest", func() *structs.Deployment {
			a := pendingFor(0)
			a.State = structs.StateDetected
			return a
		}(), nil, decideNow.Add(time.Hour)},
		{"no TTL: only the usual triggers", func() *structs.Deployment {
			a := pendingFor(0)
			a.ApprovalTTL = 0
			return a
		}(), nil, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			v := with(drifted(), func(v *jobView) {
				v.active = tc.active
				v.windows = tc.windows
				v.schedule = holds.At(tc.windows, v.now)
			})
			dec := decide(v)
			if dec.settle != "" {
				t.Fatalf("setup: decide settles %s (%s)", dec.settle, dec.reason)
			}
			if !dec.lookAgainAt.Equal(tc.want) {
				t.Fatalf("lookAgainAt = %v, want %v", dec.lookAgainAt, tc.want)
			}
		})
	}
}
