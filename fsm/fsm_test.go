package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
)

// TestApplyEveryMessageType applies every known message type successfully
// at least once through FSM.Apply, and fails when a type has no case.
func TestApplyEveryMessageType(t *testing.T) {
	cases := map[structs.MessageType]func(t *testing.T, h *harness){
		structs.DeploymentCreateRequestType: func(t *testing.T, h *harness) {
			h.create(testDeployment("d1", "default", "web", 0, 0))
			d := h.deployment("d1")
			if d.State != structs.StateDetected || d.CreateIndex != h.index || d.ModifyIndex != h.index {
				t.Fatalf("created deployment: state %s, indexes %d/%d; want detected at %d", d.State, d.CreateIndex, d.ModifyIndex, h.index)
			}
			if !d.CreatedAt.Equal(h.now) || !d.UpdatedAt.Equal(h.now) || !d.StateEnteredAt.Equal(h.now) {
				t.Fatalf("created deployment times %v/%v/%v, want %v", d.CreatedAt, d.UpdatedAt, d.StateEnteredAt, h.now)
			}
			active, err := h.state().ActiveDeployment("", "default", "web")
			if err != nil || active == nil || active.ID != "d1" {
				t.Fatalf("active deployment = %v, %v; want d1", active, err)
			}
			wantEvents(t, h.events(), eventWant{Kind: structs.EventKindDeployment, Object: "d1", To: "detected", Actor: "detector", Message: "drift detected at commit 01234567"})
		},
		structs.DeploymentTransitionRequestType: func(t *testing.T, h *harness) {
			h.create(testDeployment("d1", "default", "web", 0, 0))
			at := h.now.Add(time.Hour)
			h.mustTransition("d1", structs.StateApplying, &structs.DeploymentPatch{RegisterStartedAt: &at})
			d := h.deployment("d1")
			if d.State != structs.StateApplying || !d.StateEnteredAt.Equal(h.now) || !d.RegisterStartedAt.Equal(at) || d.ModifyIndex != h.index {
				t.Fatalf("after transition: %+v", d)
			}
			wantEvents(t, h.eventsSince(1), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "detected", To: "applying", Actor: "engine"})
		},
		structs.DeploymentUpdateRequestType: func(t *testing.T, h *harness) {
			h.create(testDeployment("d1", "default", "web", 1, 0))
			h.mustTransition("d1", structs.StatePreHook, nil)
			d := h.deployment("d1")
			run := hookRun(d, structs.PhasePre, 0, structs.HookRunDispatching, h.now)
			if err := h.update("d1", &structs.DeploymentPatch{HookRun: run, Message: "dispatching pre-hook 0"}); err != nil {
				t.Fatal(err)
			}
			d = h.deployment("d1")
			if got, ok := d.HookRun(structs.PhasePre, 0); !ok || got.State != structs.HookRunDispatching || got.Token != run.Token {
				t.Fatalf("hook run = %+v, %v", got, ok)
			}
			if d.State != structs.StatePreHook || !d.UpdatedAt.Equal(h.now) || d.ModifyIndex != h.index {
				t.Fatalf("after update: %+v", d)
			}
			wantEvents(t, h.eventsSince(2), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "pre_hook", To: "pre_hook", Message: "dispatching pre-hook 0"})
		},
		structs.DeploymentDecisionRequestType: func(t *testing.T, h *harness) {
			h.create(testDeployment("d1", "default", "web", 0, 0))
			h.mustTransition("d1", structs.StatePendingApproval, nil)
			if err := h.decide("d1", structs.DecisionApprove, "alice"); err != nil {
				t.Fatal(err)
			}
			d := h.deployment("d1")
			want := []structs.Decision{{Kind: "approve", Actor: "alice", Comment: "looks good", Time: h.now}}
			if d.State != structs.StateApplying || !reflect.DeepEqual(utcDecisions(d.Decisions), want) {
				t.Fatalf("after approve: state %s, decisions %+v", d.State, d.Decisions)
			}
			wantEvents(t, h.eventsSince(2), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "pending_approval", To: "applying", Actor: "alice", Message: "approved: looks good"})
		},
		structs.PauseRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Namespace: "default", JobID: "web", Reason: "maintenance"})
			p, err := h.state().Paused("", "default", "web")
			if err != nil || p == nil || p.Key != "default/web" || p.Actor != "alice" || p.Reason != "maintenance" || p.CreateIndex != h.index || !p.CreatedAt.Equal(h.now) {
				t.Fatalf("pause = %+v, %v", p, err)
			}
			wantEvents(t, h.events(), eventWant{Kind: structs.EventKindPause, Object: "default/web", To: "paused", Actor: "alice", Message: "maintenance"})
		},
		structs.ResumeRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Global: true, Reason: "freeze"})
			h.mustApply(structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: h.meta("bob"), Global: true, Reason: "thaw"})
			if ps, err := h.state().Pauses(); err != nil || len(ps) != 0 {
				t.Fatalf("pauses after resume = %v, %v", ps, err)
			}
			wantEvents(t, h.eventsSince(1), eventWant{Kind: structs.EventKindPause, Object: "*", From: "paused", To: "resumed", Actor: "bob", Message: "thaw"})
		},
		structs.WindowUpsertRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"), Window: testWindow("nights")})
			w, err := h.state().Window("nights")
			if err != nil || w == nil || w.Schedule != "0 22 * * *" || w.CreateIndex != h.index || !reflect.DeepEqual(w.Jobs, []string{"web*"}) {
				t.Fatalf("window = %+v, %v", w, err)
			}
			wantEvents(t, h.events(), eventWant{Kind: structs.EventKindWindow, Object: "nights", To: "created", Actor: "alice"})
		},
		structs.WindowDeleteRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"), Window: testWindow("nights")})
			h.mustApply(structs.WindowDeleteRequestType, &structs.WindowDeleteRequest{WriteMeta: h.meta("alice"), Name: "nights"})
			if w, err := h.state().Window("nights"); err != nil || w != nil {
				t.Fatalf("window after delete = %+v, %v", w, err)
			}
			wantEvents(t, h.eventsSince(1), eventWant{Kind: structs.EventKindWindow, Object: "nights", To: "deleted", Actor: "alice"})
		},
		structs.WindowLiftRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: h.meta("alice"), Namespace: "default", JobID: "web"})
			l, err := h.state().Lift("", "default", "web")
			if err != nil || l == nil || l.Actor != "alice" || l.CreateIndex != h.index {
				t.Fatalf("lift = %+v, %v", l, err)
			}
			wantEvents(t, h.events(), eventWant{Kind: structs.EventKindJob, Object: "default/web", To: "deploy_now", Actor: "alice"})
		},
		structs.JobStatusUpsertRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("detector"), Statuses: []*structs.JobStatus{testJobStatus("web")}})
			st, err := h.state().JobStatus("", "default", "web")
			if err != nil || st == nil || st.Sync != structs.SyncDrift || st.CreateIndex != h.index {
				t.Fatalf("job status = %+v, %v", st, err)
			}
			wantEvents(t, h.events())
		},
		structs.JobStatusDeleteRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("detector"), Statuses: []*structs.JobStatus{testJobStatus("web"), testJobStatus("api")}})
			h.mustApply(structs.JobStatusDeleteRequestType, &structs.JobStatusDeleteRequest{WriteMeta: h.meta("detector"), Keys: []string{"default/web"}})
			all, err := h.state().JobStatuses()
			if err != nil || len(all) != 1 || all[0].JobID != "api" {
				t.Fatalf("job statuses after delete = %+v, %v", all, err)
			}
		},
		structs.RepoStatusUpsertRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("gitwatch"), Repos: []*structs.RepoStatus{testRepoStatus("infra")}})
			rs, err := h.state().RepoStatuses()
			if err != nil || len(rs) != 1 || rs[0].Head != "feedface" || rs[0].ModifyIndex != h.index {
				t.Fatalf("repo statuses = %+v, %v", rs, err)
			}
		},
		structs.DetectionCycleRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: h.meta("detector"), Cycle: &structs.DetectionCycle{Leader: "nops-1", StartedAt: h.now, FinishedAt: h.now.Add(time.Second), Jobs: 3, Drifted: 1, Created: 1}})
			c, err := h.state().DetectionCycle()
			if err != nil || c == nil || c.Leader != "nops-1" || c.Jobs != 3 || c.Index != h.index {
				t.Fatalf("detection cycle = %+v, %v", c, err)
			}
		},
		structs.RetryRequestType: func(t *testing.T, h *harness) {
			h.create(testDeployment("d1", "default", "web", 0, 0))
			h.mustTransition("d1", structs.StateFailed, nil)
			h.mustApply(structs.RetryRequestType, &structs.RetryRequest{WriteMeta: h.meta("alice"), Namespace: "default", JobID: "web"})
			b, err := h.state().Block("", "default", "web")
			if err != nil || b == nil || !b.Retried || b.RetriedBy != "alice" {
				t.Fatalf("block after retry = %+v, %v", b, err)
			}
			wantEvents(t, h.eventsSince(2), eventWant{Kind: structs.EventKindJob, Object: "default/web", From: "blocked", To: "retry", Actor: "alice", Message: "retry after deployment d1"})
		},
		structs.AutopilotSetConfigRequestType: func(t *testing.T, h *harness) {
			conf := structs.AutopilotConfig{CleanupDeadServers: true, LastContactThreshold: time.Second, MaxTrailingLogs: 10, MinQuorum: 3, ServerStabilizationTime: time.Minute}
			h.mustApply(structs.AutopilotSetConfigRequestType, &structs.AutopilotSetConfigRequest{WriteMeta: h.meta("ops"), Config: conf})
			first := h.index
			got, err := h.state().AutopilotConfig()
			if err != nil || got == nil || got.MinQuorum != 3 || got.CreateIndex != first || got.ModifyIndex != first {
				t.Fatalf("autopilot config = %+v, %v", got, err)
			}
			// A compare-and-set at a stale index is refused and changes nothing.
			stale := conf
			stale.MinQuorum, stale.ModifyIndex = 5, first-1
			h.refused(structs.ErrConflict, []string{"autopilot configuration is at index"}, func() error {
				return h.apply(structs.AutopilotSetConfigRequestType, &structs.AutopilotSetConfigRequest{WriteMeta: h.meta("ops"), Config: stale, CAS: true})
			})
			bad := conf
			bad.LastContactThreshold = 0
			h.refused(structs.ErrInvalid, []string{"last_contact_threshold"}, func() error {
				return h.apply(structs.AutopilotSetConfigRequestType, &structs.AutopilotSetConfigRequest{WriteMeta: h.meta("ops"), Config: bad})
			})
			next := conf
			next.MinQuorum, next.ModifyIndex = 5, first
			h.mustApply(structs.AutopilotSetConfigRequestType, &structs.AutopilotSetConfigRequest{WriteMeta: h.meta("ops"), Config: next, CAS: true})
			got, _ = h.state().AutopilotConfig()
			if got.MinQuorum != 5 || got.CreateIndex != first || got.ModifyIndex != h.index {
				t.Fatalf("autopilot config after CAS = %+v", got)
			}
			wantEvents(t, h.eventsSince(1), eventWant{Kind: structs.EventKindOperator, Object: "autopilot", To: "configured", Actor: "ops"})
		},
		structs.EventAppendRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: h.meta("engine"), Events: []*structs.Event{
				{Kind: structs.EventKindDeployment, Object: "d1", Message: "canaries promoted"},
				{Kind: structs.EventKindJob, Object: "default/web", Actor: "bob", Message: "observed"},
			}})
			wantEvents(t, h.events(),
				eventWant{Kind: structs.EventKindDeployment, Object: "d1", Actor: "engine", Message: "canaries promoted"},
				eventWant{Kind: structs.EventKindJob, Object: "default/web", Actor: "bob", Message: "observed"})
		},
	}
	for mt, fn := range aclApplyCases() {
		cases[mt] = fn
	}
	for mt, fn := range outboxCases {
		cases[mt] = fn
	}
	cases[structs.GCRequestType] = func(t *testing.T, h *harness) {
		h.finished("d1", "web", structs.StateCompleted)
		h.finished("d2", "web", structs.StateCompleted)
		if got := h.gc(structs.GCRequest{DeploymentsBefore: h.now.Add(time.Hour)}); got.DeploymentsDeleted != 1 || got.Index != h.index {
			t.Fatalf("gc result = %+v", got)
		}
		if ids := h.ids(); len(ids) != 1 || ids[0] != "d2" {
			t.Fatalf("deployments after gc = %v, want d2", ids)
		}
	}
	cases[structs.DeploymentSkipRequirementsRequestType] = testSkipRequirementsApply
	cases[structs.WebhookDeliveryRequestType] = func(t *testing.T, h *harness) {
		if h.delivery("gitea", "d-1") {
			t.Fatal("a first delivery is a duplicate")
		}
		if !h.delivery("gitea", "d-1") {
			t.Fatal("a replayed delivery is not a duplicate")
		}
	}
	cases[structs.BatchRequestType] = func(t *testing.T, h *harness) {
		var parts [][]byte
		for _, name := range []string{"night", "weekend"} {
			data, err := structs.Encode(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"),
				Window: &structs.SyncWindow{Name: name, Kind: structs.WindowDeny, Schedule: "0 22 * * *", Duration: "8h"}})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, data)
		}
		h.index++
		resp := h.fsm.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: structs.EncodeBatch(parts)})
		if !reflect.DeepEqual(resp, []any{nil, nil}) {
			t.Fatalf("answer %#v, want two nils", resp)
		}
		for _, name := range []string{"night", "weekend"} {
			raw, err := h.state().db.Txn(false).First(TableWindows, "id", name)
			if err != nil || raw == nil {
				t.Fatalf("window %s not stored: %v", name, err)
			}
			if w := raw.(*structs.SyncWindow); w.CreateIndex != h.index {
				t.Fatalf("window %s has index %d, want the batch entry's %d", name, w.CreateIndex, h.index)
			}
		}
	}
	for _, mt := range knownMessageTypes() {
		fn, ok := cases[mt]
		if !ok {
			t.Errorf("message type %s has no case in this test", mt)
			continue
		}
		t.Run(mt.String(), func(t *testing.T) {
			h := newHarness(t)
			fn(t, h)
			if got := h.state().LatestIndex(); got != h.index {
				t.Fatalf("latest index %d, want %d", got, h.index)
			}
		})
	}
	if len(cases) != len(knownMessageTypes()) {
		t.Errorf("%d cases for %d message types", len(cases), len(knownMessageTypes()))
	}
}

// eventWant is what a test expects of an event; empty fields are not
// checked, except From and To which must match.
type eventWant struct {
	Kind, Object, From, To, Actor, Message string
}

// wantEvents checks the events, their order and their sequence numbers.
func wantEvents(t *testing.T, got []*structs.Event, want ...eventWant) {
	t.Helper()
	if len(got) != len(want) {
		var b strings.Builder
		for _, e := range got {
			fmt.Fprintf(&b, "  %+v\n", *e)
		}
		t.Fatalf("%d events, want %d:\n%s", len(got), len(want), b.String())
	}
	for i, w := range want {
		e := got[i]
		if e.Kind != w.Kind || e.Object != w.Object || e.From != w.From || e.To != w.To ||
			(w.Actor != "" && e.Actor != w.Actor) || (w.Message != "" && !strings.Contains(e.Message, w.Message)) {
			t.Errorf("event %d = %+v, want %+v", i, *e, w)
		}
		if e.Time.IsZero() || e.Index == 0 || e.Seq == 0 {
			t.Errorf("event %d is not stamped: %+v", i, *e)
		}
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Errorf("event %d has seq %d after %d", i, e.Seq, got[i-1].Seq)
		}
	}
}

func utcDecisions(ds []structs.Decision) []structs.Decision {
	out := make([]structs.Decision, len(ds))
	for i, d := range ds {
		d.Time = d.Time.UTC()
		out[i] = d
	}
	return out
}

func testWindow(name string) *structs.SyncWindow {
	return &structs.SyncWindow{
		Name: name, Kind: structs.WindowDeny, Schedule: "0 22 * * *", Duration: "8h",
		Timezone: "Europe/Paris", Namespaces: []string{"default"}, Jobs: []string{"web*"}, Clusters: []string{"default", "eu*"},
	}
}

func testJobStatus(jobID string) *structs.JobStatus {
	return &structs.JobStatus{
		Namespace: "default", JobID: jobID, Repository: "infra", File: "jobs/" + jobID + ".nomad.hcl",
		Commit: "feedface", Policy: structs.PolicyApproval, Sync: structs.SyncDrift,
		DriftSummary: "1 group changed", SpecHash: "spec-" + jobID, Hold: "paused by alice",
		Blocked: true, Errors: []string{"hook backup: not found"}, Orphan: true, LiveModifyIndex: 42,
		WaitingFor: "waiting for default/db: deploying",
		ObservedAt: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC),
		Drift:      testPlanDiff(jobID),
		Health:     &structs.JobHealth{Running: 2, Healthy: 1, Unhealthy: 1, Pending: 1, Complete: 1, Failed: 1},
	}
}

func testRepoStatus(name string) *structs.RepoStatus {
	return &structs.RepoStatus{
		Name: name, URL: "https://git.example.com/" + name + ".git", Branch: "main", Path: "jobs",
		Head: "feedface", LastFetch: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC),
		FetchError: "timeout", ParseErrors: []string{"jobs/bad.nomad.hcl: unexpected }"}, Files: 7,
	}
}

// TestOneActiveDeploymentPerJob checks that a job has at most one active
// deployment and that deployment IDs are unique.
func TestOneActiveDeploymentPerJob(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))

	create := func(d *structs.Deployment) func() error {
		return func() error {
			return h.apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h.meta("detector"), Deployment: d})
		}
	}
	h.refused(structs.ErrConflict, []string{"default/web", "active deployment d1", "detected"}, create(testDeployment("d2", "default", "web", 0, 0)))

	// The same job ID in another namespace is another job.
	h.create(testDeployment("d3", "staging", "web", 0, 0))

	// Every active state counts.
	for _, to := range []structs.DeploymentState{structs.StatePendingApproval} {
		h.mustTransition("d1", to, nil)
		h.refused(structs.ErrConflict, []string{"active deployment d1", string(to)}, create(testDeployment("d2", "default", "web", 0, 0)))
	}
	h.mustApply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: h.meta("alice"), ID: "d1", Decision: "approve"})
	h.refused(structs.ErrConflict, []string{"active deployment d1", "applying"}, create(testDeployment("d2", "default", "web", 0, 0)))

	// Once the first ends, the next one may be created.
	h.mustTransition("d1", structs.StateCompleted, nil)
	h.create(testDeployment("d2", "default", "web", 0, 0))
	active, err := h.state().ActiveDeployment("", "default", "web")
	if err != nil || active == nil || active.ID != "d2" {
		t.Fatalf("active deployment = %v, %v; want d2", active, err)
	}

	// A deployment ID is never reused, even for another job once the first
	// has ended.
	h.refused(structs.ErrConflict, []string{"deployment d1 already exists"}, create(testDeployment("d1", "default", "api", 0, 0)))
	h.refused(structs.ErrConflict, []string{"deployment d2 already exists"}, create(testDeployment("d2", "default", "api", 0, 0)))

	// Malformed creates.
	bad := testDeployment("d9", "default", "api", 0, 0)
	bad.State = structs.StateApplying
	noID := testDeployment("", "default", "api", 0, 0)
	noNS := testDeployment("d9", "", "api", 0, 0)
	h.refused(structs.ErrInvalid, []string{"created in state detected", "applying"}, create(bad))
	h.refused(structs.ErrInvalid, []string{"needs an ID"}, create(noID))
	h.refused(structs.ErrInvalid, []string{"namespace"}, create(noNS))
	h.refused(structs.ErrInvalid, []string{"needs an ID"}, create(nil))
	negative := testDeployment("d9", "default", "api", 0, 0)
	negative.ApprovalsRequired = -1
	h.refused(structs.ErrInvalid, []string{"needs -1 approvals", "may be negative"}, create(negative))
}

// TestApprove_RefusedWhilePausedStartsAfterResume checks that a pause of the
// job or of every job refuses an approval, and that after the resume the
// approval starts the deployment in pre_hook or applying.
func TestApprove_RefusedWhilePausedStartsAfterResume(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pause  structs.PauseRequest
		naming string
		pre    int
		start  structs.DeploymentState
	}{
		{"job pause, pre-hooks", structs.PauseRequest{Namespace: "default", JobID: "web", Reason: "db migration"}, "job default/web is paused by alice (db migration)", 1, structs.StatePreHook},
		{"job pause, no pre-hooks", structs.PauseRequest{Namespace: "default", JobID: "web", Reason: "db migration"}, "job default/web is paused by alice (db migration)", 0, structs.StateApplying},
		{"global pause, pre-hooks", structs.PauseRequest{Global: true, Reason: "change freeze"}, "every job is paused by alice (change freeze)", 2, structs.StatePreHook},
		{"global pause, post-hooks only", structs.PauseRequest{Global: true, Reason: "change freeze"}, "every job is paused by alice (change freeze)", 0, structs.StateApplying},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			d := testDeployment("d1", "default", "web", tc.pre, 1)
			d.Policy = structs.PolicyApproval
			h.create(d)
			h.mustTransition("d1", structs.StatePendingApproval, nil)
			pause := tc.pause
			pause.WriteMeta = h.meta("alice")
			h.mustApply(structs.PauseRequestType, &pause)

			h.refused(structs.ErrConflict, []string{tc.naming, "resume"}, func() error { return h.decide("d1", structs.DecisionApprove, "bob") })

			// A pause of another job does not hold this one.
			h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("carol"), Namespace: "default", JobID: "other", Reason: "x"})

			resume := tc.pause
			resume.WriteMeta = h.meta("alice")
			h.mustApply(structs.ResumeRequestType, &resume)
			n := len(h.events())
			if err := h.decide("d1", structs.DecisionApprove, "bob"); err != nil {
				t.Fatalf("approve after resume: %v", err)
			}
			got := h.deployment("d1")
			if got.State != tc.start {
				t.Fatalf("approved deployment is %s, want %s", got.State, tc.start)
			}
			if len(got.Decisions) != 1 || got.Decisions[0].Actor != "bob" || got.Decisions[0].Kind != "approve" {
				t.Fatalf("decisions = %+v", got.Decisions)
			}
			wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "pending_approval", To: string(tc.start), Actor: "bob", Message: "approved"})
		})
	}
}

// TestRejectWhilePaused checks that a pause does not stop a rejection, and
// that a rejection leaves a block with the deployment's spec hash.
func TestRejectWhilePaused(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 1, 1))
	h.mustTransition("d1", structs.StatePendingApproval, nil)
	h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Global: true, Reason: "freeze"})
	n := len(h.events())
	if err := h.apply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: h.meta("bob"), ID: "d1", Decision: "reject", Comment: "not now"}); err != nil {
		t.Fatalf("reject: %v", err)
	}
	d := h.deployment("d1")
	if d.State != structs.StateRejected || len(d.Decisions) != 1 || d.Decisions[0].Kind != "reject" || d.Decisions[0].Comment != "not now" {
		t.Fatalf("rejected deployment = %+v", d)
	}
	wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "pending_approval", To: "rejected", Actor: "bob", Message: "rejected: not now"})
	b, err := h.state().Block("", "default", "web")
	if err != nil || b == nil {
		t.Fatalf("block = %v, %v", b, err)
	}
	want := structs.Block{Cluster: structs.DefaultCluster, Namespace: "default", JobID: "web", DeploymentID: "d1", SpecHash: "spec-web", JobModifyIndex: 42, CreateIndex: h.index}
	if *b != want {
		t.Fatalf("block = %+v, want %+v", *b, want)
	}
	if !b.Blocks("spec-web", 42) || b.Blocks("spec-web", 43) || b.Blocks("spec-other", 42) {
		t.Fatalf("a block from before the register must hold for the same spec and live job only")
	}
}

// TestTextLimit_CommentAndReason checks that the FSM refuses a decision's
// comment or a pause's reason over structs.MaxTextLen, whoever proposed
// it, and changes nothing; text at the limit goes through.
func TestTextLimit_CommentAndReason(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 1, 1))
	h.mustTransition("d1", structs.StatePendingApproval, nil)
	long := strings.Repeat("x", structs.MaxTextLen+1)
	before := dumpStore(t, h.state(), TableMeta)
	err := h.apply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: h.meta("bob"), ID: "d1", Decision: "reject", Comment: long})
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "comment: at most 4096 characters") {
		t.Fatalf("reject with a long comment: %v, want the limit refused", err)
	}
	err = h.apply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Global: true, Reason: long})
	if !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "reason: at most 4096 characters") {
		t.Fatalf("pause with a long reason: %v, want the limit refused", err)
	}
	if after := dumpStore(t, h.state(), TableMeta); after != before {
		t.Fatal("a refused text changed the state")
	}
	h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Global: true, Reason: long[1:]})
	h.mustApply(structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: h.meta("alice"), Global: true})
	h.mustApply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: h.meta("bob"), ID: "d1", Decision: "reject", Comment: long[1:]})
}

// TestBlocks_FailureBlocksUntilRetryOrNewDeployment checks the block a
// failure leaves, the retry that lifts it and the create that removes it.
func TestBlocks_FailureBlocksUntilRetryOrNewDeployment(t *testing.T) {
	h := newHarness(t)
	retry := func(jobID string) func() error {
		return func() error {
			return h.apply(structs.RetryRequestType, &structs.RetryRequest{WriteMeta: h.meta("alice"), Namespace: "default", JobID: jobID})
		}
	}
	// Nothing to retry.
	h.refused(structs.ErrConflict, []string{"job default/web is not blocked"}, retry("web"))

	// A failure after the register.
	h.create(testDeployment("d1", "default", "web", 0, 0))
	at := h.now
	h.mustTransition("d1", structs.StateApplying, &structs.DeploymentPatch{RegisterStartedAt: &at})
	if err := h.update("d1", &structs.DeploymentPatch{Registered: ptr(true), JobVersion: ptr(uint64(3)), NomadEvalID: ptr("eval-1")}); err != nil {
		t.Fatal(err)
	}
	n := len(h.events())
	if err := h.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: h.meta("engine"), ID: "d1", To: structs.StateFailed, Error: "deployment failed: 1 unhealthy allocation"}); err != nil {
		t.Fatal(err)
	}
	d := h.deployment("d1")
	if d.State != structs.StateFailed || d.Error != "deployment failed: 1 unhealthy allocation" {
		t.Fatalf("failed deployment = %+v", d)
	}
	wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "applying", To: "failed", Message: "1 unhealthy allocation"})
	b, _ := h.state().Block("", "default", "web")
	if b == nil || !b.AfterRegister || b.DeploymentID != "d1" || b.SpecHash != "spec-web" || b.Retried {
		t.Fatalf("block after a failure after the register = %+v", b)
	}
	if !b.Blocks("spec-web", 99) {
		t.Fatalf("a block after the register must survive a change of the live job")
	}

	// Retry, once.
	n = len(h.events())
	if err := retry("web")(); err != nil {
		t.Fatalf("retry: %v", err)
	}
	b, _ = h.state().Block("", "default", "web")
	if b == nil || !b.Retried || b.RetriedBy != "alice" || b.Blocks("spec-web", 42) {
		t.Fatalf("block after retry = %+v", b)
	}
	wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindJob, Object: "default/web", From: "blocked", To: "retry", Actor: "alice"})
	h.refused(structs.ErrConflict, []string{"job default/web is not blocked"}, retry("web"))

	// The next deployment removes the block.
	h.create(testDeployment("d2", "default", "web", 0, 0))
	if b, _ := h.state().Block("", "default", "web"); b != nil {
		t.Fatalf("block after a new deployment = %+v", b)
	}

	// A failure before the register.
	h.mustTransition("d2", structs.StateFailed, &structs.DeploymentPatch{})
	b, _ = h.state().Block("", "default", "web")
	if b == nil || b.AfterRegister || b.DeploymentID != "d2" {
		t.Fatalf("block after a failure before the register = %+v", b)
	}
	// A new deployment removes even a block that was not retried.
	h.create(testDeployment("d3", "default", "web", 0, 0))
	if bs, _ := h.state().Blocks(); len(bs) != 0 {
		t.Fatalf("blocks after a new deployment = %+v", bs)
	}
	// Completed and superseded deployments leave no block.
	h.mustTransition("d3", structs.StateCompleted, nil)
	h.create(testDeployment("d4", "default", "web", 0, 0))
	h.mustTransition("d4", structs.StateSuperseded, nil)
	if bs, _ := h.state().Blocks(); len(bs) != 0 {
		t.Fatalf("blocks after completed and superseded = %+v", bs)
	}
}

// TestRegisterIntentOnce checks that the register intent is recorded once
// per deployment.
func TestRegisterIntentOnce(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	first := h.now
	h.mustTransition("d1", structs.StateApplying, &structs.DeploymentPatch{RegisterStartedAt: &first})
	again := h.now.Add(time.Minute)
	h.refused(structs.ErrConflict, []string{"deployment d1 already recorded its register"}, func() error {
		return h.update("d1", &structs.DeploymentPatch{RegisterStartedAt: &again})
	})
	// Through a transition too: the whole entry is refused.
	h.refused(structs.ErrConflict, []string{"already recorded its register"}, func() error {
		return h.transition("d1", structs.StateCompleted, &structs.DeploymentPatch{RegisterStartedAt: &again})
	})
	if d := h.deployment("d1"); !d.RegisterStartedAt.Equal(first) || d.State != structs.StateApplying {
		t.Fatalf("deployment after refused intents = %+v", d)
	}
	// The rest of the bookkeeping is recorded as it comes.
	deadline := h.now.Add(15 * time.Minute)
	if err := h.update("d1", &structs.DeploymentPatch{Registered: ptr(true), JobVersion: ptr(uint64(7)), NomadEvalID: ptr("eval-1"), NomadDeploymentID: ptr("dep-1"), HealthDeadline: &deadline}); err != nil {
		t.Fatal(err)
	}
	d := h.deployment("d1")
	if !d.Registered || d.JobVersion != 7 || d.NomadEvalID != "eval-1" || d.NomadDeploymentID != "dep-1" || !d.HealthDeadline.Equal(deadline) {
		t.Fatalf("deployment after register = %+v", d)
	}
}

// TestHookRuns_DispatchOncePerPositionAndToken checks the rules of hook
// runs: a dispatch recorded once per (phase, position), the idempotency
// token, ended runs and the dispatch first.
func TestHookRuns_DispatchOncePerPositionAndToken(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 2, 1))
	h.mustTransition("d1", structs.StatePreHook, nil)
	d := h.deployment("d1")
	up := func(r *structs.HookRun) func() error {
		return func() error { return h.update("d1", &structs.DeploymentPatch{HookRun: r}) }
	}

	// A run must first be recorded as dispatching.
	h.refused(structs.ErrConflict, []string{"hook run pre/0 of deployment d1 must record its dispatch first"}, up(hookRun(d, structs.PhasePre, 0, structs.HookRunRunning, h.now)))

	if err := up(hookRun(d, structs.PhasePre, 0, structs.HookRunDispatching, h.now))(); err != nil {
		t.Fatal(err)
	}
	// Dispatched at most once.
	h.refused(structs.ErrConflict, []string{"hook run pre/0 of deployment d1 was already dispatched"}, up(hookRun(d, structs.PhasePre, 0, structs.HookRunDispatching, h.now)))

	// Another token is another run.
	other := hookRun(d, structs.PhasePre, 0, structs.HookRunRunning, h.now)
	other.Token = "nops-d0-pre-0"
	h.refused(structs.ErrConflict, []string{"has token nops-d1-pre-0, not nops-d0-pre-0"}, up(other))

	running := hookRun(d, structs.PhasePre, 0, structs.HookRunRunning, h.now)
	if err := up(running)(); err != nil {
		t.Fatal(err)
	}
	succeeded := hookRun(d, structs.PhasePre, 0, structs.HookRunSucceeded, h.now)
	if err := up(succeeded)(); err != nil {
		t.Fatal(err)
	}
	got, ok := h.deployment("d1").HookRun(structs.PhasePre, 0)
	if !ok || got.State != structs.HookRunSucceeded || got.DispatchedJobID == "" || got.FinishedAt.IsZero() {
		t.Fatalf("hook run = %+v, %v", got, ok)
	}
	// An ended run never changes.
	for _, s := range []structs.HookRunState{structs.HookRunDispatching, structs.HookRunRunning, structs.HookRunSucceeded, structs.HookRunFailed} {
		h.refused(structs.ErrConflict, []string{"hook run pre/0 of deployment d1 already ended succeeded"}, up(hookRun(d, structs.PhasePre, 0, s, h.now)))
	}

	// The next position has its own run; a failure ends it too.
	if err := up(hookRun(d, structs.PhasePre, 1, structs.HookRunDispatching, h.now))(); err != nil {
		t.Fatal(err)
	}
	if err := up(hookRun(d, structs.PhasePre, 1, structs.HookRunFailed, h.now))(); err != nil {
		t.Fatal(err)
	}
	h.refused(structs.ErrConflict, []string{"hook run pre/1 of deployment d1 already ended failed"}, up(hookRun(d, structs.PhasePre, 1, structs.HookRunRunning, h.now)))

	// The same position in the other phase is another run.
	if err := up(hookRun(d, structs.PhasePost, 0, structs.HookRunDispatching, h.now))(); err != nil {
		t.Fatal(err)
	}
	runs := h.deployment("d1").HookRuns
	if len(runs) != 3 {
		t.Fatalf("hook runs = %+v", runs)
	}

	// A transition may carry the run it records: the failed pre-hook fails
	// the deployment in the same entry.
	h.create(testDeployment("d2", "default", "api", 1, 0))
	h.mustTransition("d2", structs.StatePreHook, nil)
	d2 := h.deployment("d2")
	if err := h.update("d2", &structs.DeploymentPatch{HookRun: hookRun(d2, structs.PhasePre, 0, structs.HookRunDispatching, h.now)}); err != nil {
		t.Fatal(err)
	}
	h.mustTransition("d2", structs.StateFailed, &structs.DeploymentPatch{HookRun: hookRun(d2, structs.PhasePre, 0, structs.HookRunFailed, h.now)})
	if r, _ := h.deployment("d2").HookRun(structs.PhasePre, 0); r.State != structs.HookRunFailed {
		t.Fatalf("hook run recorded with the transition = %+v", r)
	}
}

// TestUpdate_RefusesUnknownEmptyOrWrongStateUpdates checks the refusals of a
// deployment update.
func TestUpdate_RefusesUnknownEmptyOrWrongStateUpdates(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	h.refused(structs.ErrNotFound, []string{`deployment "nope"`}, func() error {
		return h.update("nope", &structs.DeploymentPatch{Registered: ptr(true)})
	})
	h.refused(structs.ErrInvalid, []string{"update of deployment d1 needs a patch"}, func() error {
		return h.update("d1", nil)
	})
	h.refused(structs.ErrConflict, []string{"deployment d1 is detected, not applying"}, func() error {
		return h.apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: h.meta("engine"), ID: "d1", State: structs.StateApplying, Update: &structs.DeploymentPatch{Registered: ptr(true)}})
	})
	// With the right expected state, and without a message, no event.
	n := len(h.events())
	if err := h.apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: h.meta("engine"), ID: "d1", State: structs.StateDetected, Update: &structs.DeploymentPatch{NomadEvalID: ptr("e")}}); err != nil {
		t.Fatal(err)
	}
	if len(h.events()) != n {
		t.Fatalf("an update without a message appended an event")
	}
	h.refused(structs.ErrNotFound, []string{`deployment "nope"`}, func() error { return h.transition("nope", structs.StateApplying, nil) })
	h.refused(structs.ErrNotFound, []string{`deployment "nope"`}, func() error { return h.decide("nope", structs.DecisionApprove, "alice") })
	h.refused(structs.ErrInvalid, []string{`decision must be approve or reject, not "maybe"`}, func() error { return h.decide("d1", "maybe", "alice") })
}

// TestDeployNowLift checks that a deploy-now request is consumed by the
// next create that asks for it, and only by that one.
func TestDeployNowLift(t *testing.T) {
	h := newHarness(t)
	h.mustApply(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: h.meta("alice"), Namespace: "default", JobID: "web"})

	// A create without ConsumeLift leaves the lift.
	h.create(testDeployment("d1", "default", "web", 0, 0))
	if d := h.deployment("d1"); d.LiftedWindow || d.LiftedBy != "" {
		t.Fatalf("deployment created without ConsumeLift = %+v", d)
	}
	if l, _ := h.state().Lift("", "default", "web"); l == nil {
		t.Fatalf("lift consumed by a create without ConsumeLift")
	}
	h.mustTransition("d1", structs.StateSuperseded, nil)

	// A lift of another job is not consumed.
	h.mustApply(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: h.meta("bob"), Namespace: "default", JobID: "api"})

	n := len(h.events())
	h.mustApply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h.meta("detector"), Deployment: testDeployment("d2", "default", "web", 0, 0), ConsumeLift: true})
	d := h.deployment("d2")
	if !d.LiftedWindow || d.LiftedBy != "alice" {
		t.Fatalf("deployment created with ConsumeLift = %+v", d)
	}
	if l, _ := h.state().Lift("", "default", "web"); l != nil {
		t.Fatalf("lift left after it was consumed: %+v", l)
	}
	if ls, _ := h.state().Lifts(); len(ls) != 1 || ls[0].JobID != "api" {
		t.Fatalf("lifts = %+v", ls)
	}
	wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindDeployment, Object: "d2", To: "detected", Message: "deploy now by alice lifts the sync window"})

	// ConsumeLift with no lift stored creates a plain deployment.
	h.mustTransition("d2", structs.StateSuperseded, nil)
	h.mustApply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h.meta("detector"), Deployment: testDeployment("d3", "default", "web", 0, 0), ConsumeLift: true})
	if d := h.deployment("d3"); d.LiftedWindow {
		t.Fatalf("deployment lifted a window with no deploy-now request: %+v", d)
	}
	h.refused(structs.ErrInvalid, []string{"deploy now needs a namespace and a job ID"}, func() error {
		return h.apply(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: h.meta("bob"), Namespace: "default"})
	})
}

// TestPauseResume_OneJobAndEveryJob covers pauses of one job and of every
// job.
func TestPauseResume_OneJobAndEveryJob(t *testing.T) {
	h := newHarness(t)
	pause := func(r structs.PauseRequest, actor string) error {
		r.WriteMeta = h.meta(actor)
		return h.apply(structs.PauseRequestType, &r)
	}
	resume := func(r structs.PauseRequest, actor string) error {
		r.WriteMeta = h.meta(actor)
		return h.apply(structs.ResumeRequestType, &r)
	}
	job := structs.PauseRequest{Namespace: "default", JobID: "web", Reason: "incident 42"}
	global := structs.PauseRequest{Global: true, Reason: "freeze"}

	h.refused(structs.ErrNotFound, []string{"job default/web is not paused"}, func() error { return resume(job, "alice") })
	h.refused(structs.ErrNotFound, []string{"not paused globally"}, func() error { return resume(global, "alice") })
	h.refused(structs.ErrInvalid, []string{"a pause needs a job (a namespace and a job ID), a cluster, or global"}, func() error {
		return pause(structs.PauseRequest{Namespace: "default"}, "alice")
	})

	if err := pause(job, "alice"); err != nil {
		t.Fatal(err)
	}
	if p, _ := h.state().Paused("", "default", "web"); p == nil || p.Global || p.Actor != "alice" {
		t.Fatalf("paused = %+v", p)
	}
	if p, _ := h.state().Paused("", "default", "api"); p != nil {
		t.Fatalf("another job is paused: %+v", p)
	}
	if err := pause(global, "bob"); err != nil {
		t.Fatal(err)
	}
	// The global pause is reported first.
	if p, _ := h.state().Paused("", "default", "web"); p == nil || !p.Global || p.Key != "*" || p.Actor != "bob" {
		t.Fatalf("paused with both pauses = %+v", p)
	}
	if p, _ := h.state().Paused("", "other", "api"); p == nil || !p.Global {
		t.Fatalf("global pause does not hold every job: %+v", p)
	}
	if ps, _ := h.state().Pauses(); len(ps) != 2 {
		t.Fatalf("pauses = %+v", ps)
	}
	if err := resume(global, "carol"); err != nil {
		t.Fatal(err)
	}
	if p, _ := h.state().Paused("", "default", "web"); p == nil || p.Global {
		t.Fatalf("after the global resume = %+v", p)
	}
	if err := resume(job, "carol"); err != nil {
		t.Fatal(err)
	}
	if ps, _ := h.state().Pauses(); len(ps) != 0 {
		t.Fatalf("pauses after both resumes = %+v", ps)
	}
	wantEvents(t, h.events(),
		eventWant{Kind: structs.EventKindPause, Object: "default/web", To: "paused", Actor: "alice", Message: "incident 42"},
		eventWant{Kind: structs.EventKindPause, Object: "*", To: "paused", Actor: "bob", Message: "freeze"},
		eventWant{Kind: structs.EventKindPause, Object: "*", From: "paused", To: "resumed", Actor: "carol"},
		eventWant{Kind: structs.EventKindPause, Object: "default/web", From: "paused", To: "resumed", Actor: "carol"})
}

// TestWindows_CreateReplaceAndDelete covers the create, replace and delete
// of sync windows.
func TestWindows_CreateReplaceAndDelete(t *testing.T) {
	h := newHarness(t)
	upsert := func(w *structs.SyncWindow) func() error {
		return func() error {
			return h.apply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"), Window: w})
		}
	}
	h.refused(structs.ErrInvalid, []string{"sync window needs a name"}, upsert(&structs.SyncWindow{Kind: structs.WindowAllow}))
	h.refused(structs.ErrInvalid, []string{"sync window needs a name"}, upsert(nil))
	h.refused(structs.ErrInvalid, []string{`window w: kind must be allow or deny, not "sometimes"`}, upsert(&structs.SyncWindow{Name: "w", Kind: "sometimes"}))

	if err := upsert(testWindow("nights"))(); err != nil {
		t.Fatal(err)
	}
	created := h.index
	repl := testWindow("nights")
	repl.Kind, repl.Schedule, repl.Jobs = structs.WindowAllow, "0 8 * * 1-5", nil
	if err := upsert(repl)(); err != nil {
		t.Fatal(err)
	}
	w, _ := h.state().Window("nights")
	if w == nil || w.Kind != structs.WindowAllow || w.Schedule != "0 8 * * 1-5" || len(w.Jobs) != 0 || w.CreateIndex != created || w.ModifyIndex != h.index {
		t.Fatalf("replaced window = %+v", w)
	}
	if err := upsert(testWindow("akiba"))(); err != nil {
		t.Fatal(err)
	}
	ws, _ := h.state().Windows()
	if len(ws) != 2 || ws[0].Name != "akiba" || ws[1].Name != "nights" {
		t.Fatalf("windows = %+v", ws)
	}
	// A reader's copy does not share the stored selectors.
	ws[0].Jobs[0] = "changed"
	if w, _ := h.state().Window("akiba"); w.Jobs[0] != "web*" {
		t.Fatalf("a reader changed a stored window: %+v", w)
	}
	if err := h.apply(structs.WindowDeleteRequestType, &structs.WindowDeleteRequest{WriteMeta: h.meta("bob"), Name: "nights"}); err != nil {
		t.Fatal(err)
	}
	h.refused(structs.ErrNotFound, []string{`sync window "nights"`}, func() error {
		return h.apply(structs.WindowDeleteRequestType, &structs.WindowDeleteRequest{WriteMeta: h.meta("bob"), Name: "nights"})
	})
	wantEvents(t, h.events(),
		eventWant{Kind: structs.EventKindWindow, Object: "nights", To: "created"},
		eventWant{Kind: structs.EventKindWindow, Object: "nights", To: "replaced", Message: "allow window"},
		eventWant{Kind: structs.EventKindWindow, Object: "akiba", To: "created"},
		eventWant{Kind: structs.EventKindWindow, Object: "nights", To: "deleted", Actor: "bob"})
}

// TestWindowsSince covers the poll for changed windows: only the windows
// written after the index, copied, and the newest modify index of all.
func TestWindowsSince_OnlyWindowsWrittenAfterTheIndex(t *testing.T) {
	h := newHarness(t)
	for _, name := range []string{"a", "b", "c"} {
		h.mustApply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"), Window: testWindow(name)})
	}
	all, newest, err := h.state().WindowsSince(0)
	if err != nil || len(all) != 3 || newest != h.index {
		t.Fatalf("since 0: %d windows, newest %d (index %d), err %v", len(all), newest, h.index, err)
	}
	mark := h.index
	none, again, err := h.state().WindowsSince(mark)
	if err != nil || len(none) != 0 || again != mark {
		t.Fatalf("since %d with no change: %+v, newest %d, err %v", mark, none, again, err)
	}
	h.mustApply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"), Window: testWindow("b")})
	changed, newest, err := h.state().WindowsSince(mark)
	if err != nil || len(changed) != 1 || changed[0].Name != "b" || changed[0].ModifyIndex != h.index || newest != h.index {
		t.Fatalf("since %d after a change of b: %+v, newest %d, err %v", mark, changed, newest, err)
	}
	// A reader's copy does not share the stored selectors.
	changed[0].Jobs[0] = "changed"
	if w, _ := h.state().Window("b"); w.Jobs[0] != "web*" {
		t.Fatalf("a reader changed a stored window: %+v", w)
	}
}

// TestObservedStatus_UpsertsWithoutEvents covers job and repository statuses
// and detection cycles, which append no event.
func TestObservedStatus_UpsertsWithoutEvents(t *testing.T) {
	h := newHarness(t)
	h.mustApply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("d"), Statuses: []*structs.JobStatus{testJobStatus("web"), testJobStatus("api")}})
	first := h.index
	st := testJobStatus("web")
	st.Sync, st.Blocked, st.Errors = structs.SyncInSync, false, nil
	h.mustApply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("d"), Statuses: []*structs.JobStatus{st}})
	got, _ := h.state().JobStatus("", "default", "web")
	if got == nil || got.Sync != structs.SyncInSync || got.CreateIndex != first || got.ModifyIndex != h.index {
		t.Fatalf("job status after update = %+v", got)
	}
	all, _ := h.state().JobStatuses()
	if len(all) != 2 || all[0].JobID != "api" || all[1].JobID != "web" {
		t.Fatalf("job statuses = %+v", all)
	}
	// A reader's copy does not share the stored errors.
	all[0].Errors[0] = "changed"
	if again, _ := h.state().JobStatus("", "default", "api"); again.Errors[0] != "hook backup: not found" {
		t.Fatalf("a reader changed a stored status: %+v", again)
	}
	h.refused(structs.ErrInvalid, []string{"job status needs a namespace and a job ID"}, func() error {
		return h.apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("d"), Statuses: []*structs.JobStatus{testJobStatus("x"), {Namespace: "default"}}})
	})
	h.refused(structs.ErrInvalid, []string{`job key "web" is not namespace/job`}, func() error {
		return h.apply(structs.JobStatusDeleteRequestType, &structs.JobStatusDeleteRequest{WriteMeta: h.meta("d"), Keys: []string{"default/api", "web"}})
	})
	// Deleting an unknown key is not an error.
	h.mustApply(structs.JobStatusDeleteRequestType, &structs.JobStatusDeleteRequest{WriteMeta: h.meta("d"), Keys: []string{"default/api", "default/gone"}})
	if all, _ := h.state().JobStatuses(); len(all) != 1 {
		t.Fatalf("job statuses after delete = %+v", all)
	}

	h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("g"), Repos: []*structs.RepoStatus{testRepoStatus("infra"), testRepoStatus("apps")}})
	r := testRepoStatus("infra")
	r.FetchError, r.Head = "", "cafebabe"
	h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("g"), Repos: []*structs.RepoStatus{r}})
	repos, _ := h.state().RepoStatuses()
	if len(repos) != 2 || repos[1].Name != "infra" || repos[1].Head != "cafebabe" || repos[1].FetchError != "" || repos[1].ModifyIndex != h.index {
		t.Fatalf("repo statuses = %+v", repos)
	}
	h.refused(structs.ErrInvalid, []string{"repository status needs a name"}, func() error {
		return h.apply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("g"), Repos: []*structs.RepoStatus{{}}})
	})

	if c, _ := h.state().DetectionCycle(); c != nil {
		t.Fatalf("detection cycle before any = %+v", c)
	}
	for i := 1; i <= 2; i++ {
		h.mustApply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: h.meta("d"), Cycle: &structs.DetectionCycle{Leader: "nops-1", StartedAt: h.now, FinishedAt: h.now, Jobs: i}})
	}
	if c, _ := h.state().DetectionCycle(); c == nil || c.Jobs != 2 || c.Index != h.index {
		t.Fatalf("last detection cycle = %+v", c)
	}
	h.refused(structs.ErrInvalid, []string{"needs a cycle"}, func() error {
		return h.apply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: h.meta("d")})
	})
	if evs := h.events(); len(evs) != 0 {
		t.Fatalf("observed status appended events: %+v", evs)
	}
}

// TestEvents_SequenceNumbersAndFilters covers event sequence numbers and the
// filters of Events.
func TestEvents_SequenceNumbersAndFilters(t *testing.T) {
	h := newHarness(t)
	h.refused(structs.ErrInvalid, []string{"event needs a kind and an object"}, func() error {
		return h.apply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: h.meta("x"), Events: []*structs.Event{{Kind: "job", Object: "a"}, {Kind: "job"}}})
	})
	// 300 events, so that sequence numbers need more than one byte.
	kinds := []string{structs.EventKindDeployment, structs.EventKindJob, structs.EventKindWindow}
	var times []time.Time
	for i := 0; i < 100; i++ {
		m := h.meta("engine")
		times = append(times, m.Time)
		var evs []*structs.Event
		for j := 0; j < 3; j++ {
			evs = append(evs, &structs.Event{Kind: kinds[j], Object: fmt.Sprintf("obj-%d", (i*3+j)%7), Message: fmt.Sprint(i*3 + j)})
		}
		h.mustApply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: m, Events: evs})
	}
	all := h.events()
	if len(all) != 300 {
		t.Fatalf("%d events, want 300", len(all))
	}
	for i, e := range all {
		if e.Seq != uint64(i+1) || e.Message != fmt.Sprint(i) {
			t.Fatalf("event %d has seq %d and message %q", i, e.Seq, e.Message)
		}
		if e.Index != uint64(i/3+2) || !e.Time.Equal(times[i/3]) {
			t.Fatalf("event %d has index %d and time %v", i, e.Index, e.Time)
		}
	}
	seqs := func(evs []*structs.Event) []uint64 {
		var out []uint64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	want := func(pred func(e *structs.Event) bool, limit int) []uint64 {
		var out []uint64
		for _, e := range all {
			if pred(e) {
				out = append(out, e.Seq)
				if limit > 0 && len(out) == limit {
					break
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    EventFilter
		pred func(e *structs.Event) bool
	}{
		{"all", EventFilter{}, func(*structs.Event) bool { return true }},
		{"after seq", EventFilter{AfterSeq: 250}, func(e *structs.Event) bool { return e.Seq > 250 }},
		{"after the last", EventFilter{AfterSeq: 300}, func(e *structs.Event) bool { return false }},
		{"since", EventFilter{Since: times[60]}, func(e *structs.Event) bool { return !e.Time.Before(times[60]) }},
		{"since, between", EventFilter{Since: times[60].Add(-time.Millisecond)}, func(e *structs.Event) bool { return !e.Time.Before(times[60]) }},
		{"kind", EventFilter{Kind: structs.EventKindJob}, func(e *structs.Event) bool { return e.Kind == structs.EventKindJob }},
		{"object", EventFilter{Object: "obj-3"}, func(e *structs.Event) bool { return e.Object == "obj-3" }},
		{"unknown object", EventFilter{Object: "obj"}, func(e *structs.Event) bool { return false }},
		{"limit", EventFilter{Limit: 10}, func(e *structs.Event) bool { return true }},
		{"object after seq with limit", EventFilter{Object: "obj-5", AfterSeq: 140, Limit: 4}, func(e *structs.Event) bool { return e.Object == "obj-5" && e.Seq > 140 }},
		{"kind since after seq", EventFilter{Kind: structs.EventKindWindow, Since: times[10], AfterSeq: 200}, func(e *structs.Event) bool {
			return e.Kind == structs.EventKindWindow && e.Seq > 200 && !e.Time.Before(times[10])
		}},
		{"object since", EventFilter{Object: "obj-1", Since: times[90]}, func(e *structs.Event) bool { return e.Object == "obj-1" && !e.Time.Before(times[90]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h.state().Events(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := seqs(got), want(tc.pred, tc.f.Limit); !reflect.DeepEqual(g, w) {
				t.Fatalf("events %v, want %v", g, w)
			}
		})
	}
	// A reader's copy does not change the stored event.
	all[0].Message = "changed"
	if again := h.events(); again[0].Message != "0" {
		t.Fatalf("a reader changed a stored event")
	}
}

// TestDeployments_FiltersAndPagination covers the filters and pagination of
// Deployments, LastDeployment and ActiveDeployments.
func TestDeployments_FiltersAndPagination(t *testing.T) {
	h := newHarness(t)
	// 200 deployments, so that create indexes need more than one byte:
	// jobs j0..j4 in two namespaces; all but the last of each job ended.
	var ids []string
	for i := 0; i < 200; i++ {
		ns := []string{"default", "prod"}[i%2]
		job := fmt.Sprintf("j%d", (i/2)%5)
		if a, _ := h.state().ActiveDeployment("", ns, job); a != nil {
			h.mustTransition(a.ID, []structs.DeploymentState{structs.StateCompleted, structs.StateSuperseded, structs.StateFailed}[i%3], nil)
		}
		id := fmt.Sprintf("d%03d", i)
		h.create(testDeployment(id, ns, job, 0, 0))
		ids = append(ids, id)
	}
	all, next, err := h.state().Deployments(DeploymentFilter{})
	if err != nil || next != 0 || len(all) != 200 {
		t.Fatalf("all deployments: %d, next %d, %v", len(all), next, err)
	}
	for i, d := range all {
		if d.ID != ids[199-i] {
			t.Fatalf("deployment %d is %s, want %s (newest first)", i, d.ID, ids[199-i])
		}
	}
	filter := func(f DeploymentFilter) []string {
		var out []string
		for _, d := range all {
			if (f.Namespace == "" || d.Namespace == f.Namespace) && (f.JobID == "" || d.JobID == f.JobID) && (f.State == "" || d.State == f.State) {
				out = append(out, d.ID)
			}
		}
		return out
	}
	for _, f := range []DeploymentFilter{
		{Namespace: "prod"},
		{JobID: "j3"},
		{Namespace: "default", JobID: "j1"},
		{State: structs.StateDetected},
		{State: structs.StateFailed},
		{Namespace: "prod", State: structs.StateCompleted},
		{Namespace: "nope"},
	} {
		for _, limit := range []int{0, 1, 7, 1000} {
			f.Limit = limit
			var got []string
			cursor := uint64(0)
			for pages := 0; ; pages++ {
				if pages > 300 {
					t.Fatalf("%+v: pagination does not end", f)
				}
				f.Before = cursor
				page, next, err := h.state().Deployments(f)
				if err != nil {
					t.Fatal(err)
				}
				if limit > 0 && len(page) > limit {
					t.Fatalf("%+v: page of %d", f, len(page))
				}
				for _, d := range page {
					got = append(got, d.ID)
				}
				if next == 0 {
					break
				}
				if next != page[len(page)-1].CreateIndex {
					t.Fatalf("%+v: cursor %d is not the create index of the last of the page", f, next)
				}
				cursor = next
			}
			if w := filter(f); !reflect.DeepEqual(got, w) {
				t.Fatalf("%+v: got %v, want %v", f, got, w)
			}
		}
	}
	// The cursor is exclusive.
	page, _, _ := h.state().Deployments(DeploymentFilter{Before: all[10].CreateIndex, Limit: 1})
	if len(page) != 1 || page[0].ID != all[11].ID {
		t.Fatalf("page before %s = %v", all[10].ID, page)
	}

	active, err := h.state().ActiveDeployments()
	if err != nil || len(active) != 10 {
		t.Fatalf("active deployments: %d, %v", len(active), err)
	}
	for _, d := range active {
		if d.State != structs.StateDetected {
			t.Fatalf("active deployment %s is %s", d.ID, d.State)
		}
		last, _ := h.state().LastDeployment("", d.Namespace, d.JobID)
		if last == nil || last.ID != d.ID {
			t.Fatalf("last deployment of %s = %v, want %s", d.Key(), last, d.ID)
		}
	}
	if last, err := h.state().LastDeployment("", "default", "nope"); last != nil || err != nil {
		t.Fatalf("last deployment of an unknown job = %v, %v", last, err)
	}
	// The last completed deployment of each job is the newest of its
	// completed ones, whatever came after.
	for _, ns := range []string{"default", "prod"} {
		for j := 0; j < 5; j++ {
			job := fmt.Sprintf("j%d", j)
			var want string
			for _, d := range all {
				if d.Namespace == ns && d.JobID == job && d.State == structs.StateCompleted {
					want = d.ID
					break
				}
			}
			got, err := h.state().LastCompletedDeployment("", ns, job)
			if err != nil || want == "" || got == nil || got.ID != want {
				t.Fatalf("last completed deployment of %s/%s = %v, %v; want %s", ns, job, got, err, want)
			}
		}
	}
	if last, err := h.state().LastCompletedDeployment("", "default", "nope"); last != nil || err != nil {
		t.Fatalf("last completed deployment of an unknown job = %v, %v", last, err)
	}
	if d, err := h.state().Deployment("nope"); d != nil || err != nil {
		t.Fatalf("unknown deployment = %v, %v", d, err)
	}

	// A reader's copy does not share the stored slices.
	h.create(testDeployment("hooked", "default", "hooked", 1, 1))
	d := h.deployment("hooked")
	d.Spec[0], d.Hooks[0].Spec[0], d.Hooks[0].MetaKeys[0] = 'X', 'X', "changed"
	if again := h.deployment("hooked"); again.Spec[0] == 'X' || again.Hooks[0].Spec[0] == 'X' || again.Hooks[0].MetaKeys[0] == "changed" {
		t.Fatalf("a reader changed a stored deployment")
	}
}

// TestMalformedEntries checks that an entry the FSM cannot read is
// refused with ErrBadEntry and changes nothing (no panic: a panic would stop
// the server, and again at every restart), one by one and in a batch, and
// that an unknown type is skipped only when it says so.
func TestMalformedEntries(t *testing.T) {
	mustRefuse := func(t *testing.T, want string, resp any) {
		t.Helper()
		err, ok := resp.(error)
		if !ok || !errors.Is(err, ErrBadEntry) {
			t.Fatalf("response %v, want an error wrapping ErrBadEntry", resp)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	before := dumpStore(t, h.state(), TableMeta)

	t.Run("decode failure", func(t *testing.T) {
		mustRefuse(t, "decode", h.fsm.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: []byte{byte(structs.DeploymentTransitionRequestType), 0xc1}}))
		// A body of the wrong shape fails to decode too.
		data, _ := structs.Encode(structs.PauseRequestType, []string{"not", "a", "pause"})
		mustRefuse(t, "decode", h.fsm.Apply(&raft.Log{Index: 101, Type: raft.LogCommand, Data: data}))
		// A tiny entry that claims a huge collection is refused without
		// allocating it.
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		heap := m.HeapAlloc
		huge := []byte{byte(structs.DeploymentCreateRequestType), 0x81, 0xaa}
		huge = append(huge, "deployment"...)
		huge = append(huge, 0x81, 0xa5, 'h', 'o', 'o', 'k', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff)
		mustRefuse(t, "decode", h.fsm.Apply(&raft.Log{Index: 102, Type: raft.LogCommand, Data: huge}))
		runtime.ReadMemStats(&m)
		if m.HeapAlloc > heap+64<<20 {
			t.Fatalf("a %d-byte entry grew the heap by %d MB", len(huge), (m.HeapAlloc-heap)>>20)
		}
		// Trailing bytes after a whole value are refused.
		data, _ = structs.Encode(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("a"), Global: true})
		mustRefuse(t, "trailing", h.fsm.Apply(&raft.Log{Index: 103, Type: raft.LogCommand, Data: append(data, 0x01)}))
	})
	t.Run("unknown type", func(t *testing.T) {
		mustRefuse(t, "unknown message type 99 at index 104", h.fsm.Apply(&raft.Log{Index: 104, Type: raft.LogCommand, Data: []byte{99, 0x80}}))
	})
	t.Run("batch", func(t *testing.T) {
		good, _ := structs.Encode(structs.WindowDeleteRequestType, &structs.WindowDeleteRequest{WriteMeta: h.meta("a"), Name: "none"})
		resps := h.fsm.ApplyBatch([]*raft.Log{
			{Index: 105, Type: raft.LogCommand, Data: []byte{77, 0x01, 0x02}},
			{Index: 106, Type: raft.LogCommand, Data: []byte{byte(structs.ResumeRequestType), 0xdc, 0xff}},
			{Index: 107, Type: raft.LogCommand, Data: good},
		})
		mustRefuse(t, "unknown message type 77", resps[0])
		mustRefuse(t, "decode", resps[1])
		if err, _ := resps[2].(error); errors.Is(err, ErrBadEntry) {
			t.Fatalf("a good entry after bad ones was refused: %v", err)
		}
	})
	if got := h.state().LatestIndex(); got != 107 {
		t.Fatalf("latest index %d after refused entries, want 107", got)
	}
	if after := dumpStore(t, h.state(), TableMeta); after != before {
		t.Fatalf("a malformed entry changed the state:\n%s\n%s", before, after)
	}
	t.Run("ignorable unknown type", func(t *testing.T) {
		before := dumpStore(t, h.state(), TableMeta)
		resp := h.fsm.Apply(&raft.Log{Index: 203, Type: raft.LogCommand, Data: []byte{99 | byte(structs.IgnoreUnknownTypeFlag), 0x80}})
		if resp != nil {
			t.Fatalf("response %v", resp)
		}
		if got := h.state().LatestIndex(); got != 203 {
			t.Fatalf("latest index %d after a skipped entry, want 203", got)
		}
		if after := dumpStore(t, h.state(), TableMeta); after != before {
			t.Fatalf("a skipped entry changed the state")
		}
	})
	t.Run("known type with the ignore flag", func(t *testing.T) {
		data, _ := structs.Encode(structs.PauseRequestType|structs.IgnoreUnknownTypeFlag, &structs.PauseRequest{WriteMeta: h.meta("a"), Global: true})
		if resp := h.fsm.Apply(&raft.Log{Index: 204, Type: raft.LogCommand, Data: data}); resp != nil {
			t.Fatalf("response %v", resp)
		}
		if p, _ := h.state().Paused("", "x", "y"); p == nil {
			t.Fatalf("a known type with the ignore flag was not applied")
		}
	})
	t.Run("not a command", func(t *testing.T) {
		before := dumpStore(t, h.state())
		for _, l := range []*raft.Log{{Index: 205, Type: raft.LogNoop}, {Index: 206, Type: raft.LogCommand}} {
			if resp := h.fsm.Apply(l); resp != nil {
				t.Fatalf("response %v", resp)
			}
		}
		if after := dumpStore(t, h.state()); after != before {
			t.Fatalf("an entry with no command changed the state")
		}
	})
}

// TestRefusedEntryMovesLatestIndex checks that a refused request is still
// an applied entry: the latest index moves on and watchers wake up, and
// nothing else changes.
func TestRefusedEntryMovesLatestIndex(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	changed := h.state().Changed()
	err := h.transition("d1", structs.StateRejected, nil)
	if !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("error %v, want conflict", err)
	}
	if got := h.state().LatestIndex(); got != h.index {
		t.Fatalf("latest index %d, want %d", got, h.index)
	}
	select {
	case <-changed:
	default:
		t.Fatalf("watchers were not woken by the applied entry")
	}
	changed = h.state().Changed()
	h.create(testDeployment("d2", "default", "api", 0, 0))
	select {
	case <-changed:
	default:
		t.Fatalf("watchers were not woken by a change")
	}
}

// TestEventsSinceWithSkew checks the Since filter when event times go
// back, as they do when leadership moves to a server whose clock is
// behind, or when a request carries an event stamped earlier: every event
// at or after the time is found, whatever the order of the times.
func TestEventsSinceWithSkew(t *testing.T) {
	h := newHarness(t)
	base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	// Offsets in seconds: two leaders, the second 40s behind, and a few
	// events stamped earlier still.
	offsets := []int{0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70,
		30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 100, 101, 102, 1, 103, 104}
	for i, off := range offsets {
		at := base.Add(time.Duration(off) * time.Second)
		h.mustApply(structs.EventAppendRequestType, &structs.EventAppendRequest{
			WriteMeta: structs.WriteMeta{Time: at, Actor: "engine"},
			Events:    []*structs.Event{{Kind: structs.EventKindJob, Object: fmt.Sprintf("o%d", i%3)}},
		})
	}
	all := h.events()
	for since := -1; since <= 106; since++ {
		at := base.Add(time.Duration(since) * time.Second)
		for _, f := range []EventFilter{{Since: at}, {Since: at, AfterSeq: 20}, {Since: at, Kind: structs.EventKindJob, Limit: 3}, {Since: at, Object: "o1"}} {
			var want []uint64
			for _, e := range all {
				if !e.Time.Before(at) && e.Seq > f.AfterSeq && (f.Object == "" || e.Object == f.Object) {
					want = append(want, e.Seq)
				}
			}
			if f.Limit > 0 && len(want) > f.Limit {
				want = want[:f.Limit]
			}
			got, err := h.state().Events(f)
			if err != nil {
				t.Fatal(err)
			}
			var gotSeqs []uint64
			for _, e := range got {
				gotSeqs = append(gotSeqs, e.Seq)
			}
			if !reflect.DeepEqual(gotSeqs, want) {
				t.Fatalf("since %ds %+v: %v, want %v", since, f, gotSeqs, want)
			}
		}
	}
	// Without skew, the search starts at exactly the first event since.
	h2 := newHarness(t)
	for i := 0; i < 50; i++ {
		h2.mustApply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: h2.meta("e"), Events: []*structs.Event{{Kind: "job", Object: "o"}}})
	}
	evs := h2.events()
	first, err := firstEventSince(h2.state().db.Txn(false), evs[17].Time)
	if err != nil || first != evs[17].Seq {
		t.Fatalf("first event since the 18th: %d, %v", first, err)
	}
}

// TestEventsOfAnObject checks the list of an object's events: a refused
// request that appended to it in place leaves no trace, and a reader keeps
// the list it read while the writer appends.
func TestEventsOfAnObject(t *testing.T) {
	h := newHarness(t)
	appendEvents := func(objects ...string) error {
		var evs []*structs.Event
		for _, o := range objects {
			evs = append(evs, &structs.Event{Kind: structs.EventKindJob, Object: o})
		}
		return h.apply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: h.meta("e"), Events: evs})
	}
	for i := 0; i < 5; i++ {
		if err := appendEvents("a", "b"); err != nil {
			t.Fatal(err)
		}
	}
	held := h.state().db.Txn(false)
	// Refused after its first event was recorded.
	if err := appendEvents("a", ""); !errors.Is(err, structs.ErrInvalid) {
		t.Fatalf("error %v, want invalid", err)
	}
	if err := appendEvents("b", "a", "a"); err != nil {
		t.Fatal(err)
	}
	seqsOf := func(object string) []uint64 {
		evs, err := h.state().Events(EventFilter{Object: object})
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, e := range evs {
			if e.Object != object {
				t.Fatalf("event %d of %s is about %s", e.Seq, object, e.Object)
			}
			out = append(out, e.Seq)
		}
		return out
	}
	if got, want := seqsOf("a"), []uint64{1, 3, 5, 7, 9, 12, 13}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events of a: %v, want %v", got, want)
	}
	if got, want := seqsOf("b"), []uint64{2, 4, 6, 8, 10, 11}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events of b: %v, want %v", got, want)
	}
	// A read transaction opened before sees the list as it was.
	raw, err := held.First(tableEventObjects, "id", "a")
	if err != nil || raw == nil {
		t.Fatalf("held list: %v, %v", raw, err)
	}
	if got := raw.(*eventObjects).Seqs; !reflect.DeepEqual(got, []uint64{1, 3, 5, 7, 9}) {
		t.Fatalf("a reader's list changed: %v", got)
	}
	if got := seqsOf("c"); got != nil {
		t.Fatalf("events of an unknown object: %v", got)
	}
}

// knownMessageTypes lists the message types structs names, in order.
func knownMessageTypes() []structs.MessageType {
	var out []structs.MessageType
	for t := structs.MessageType(0); t < structs.IgnoreUnknownTypeFlag; t++ {
		if !strings.HasPrefix(t.String(), "MessageType(") {
			out = append(out, t)
		}
	}
	return out
}

// Each Nomad cluster keeps its own last detection cycle (SPEC section 16):
// one cluster's cycle does not replace another's, and the last of all is
// the one that finished last.
func TestDetectionCycle_OnePerCluster(t *testing.T) {
	h := newHarness(t)
	cycle := func(cluster string, finished time.Time, jobs int) {
		h.mustApply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: h.meta("detector"),
			Cycle: &structs.DetectionCycle{Cluster: cluster, Leader: "n1", StartedAt: finished.Add(-time.Second), FinishedAt: finished, Jobs: jobs}})
	}
	cycle("default", h.now, 3)
	cycle("eu", h.now.Add(time.Minute), 7)
	cycle("default", h.now.Add(30*time.Second), 4)
	st := h.state()
	if c, _ := st.ClusterDetectionCycle(""); c == nil || c.Jobs != 4 {
		t.Fatalf("default cluster's cycle %+v, want its last (4 jobs)", c)
	}
	if c, _ := st.ClusterDetectionCycle("eu"); c == nil || c.Jobs != 7 {
		t.Fatalf("eu's cycle %+v, want 7 jobs", c)
	}
	if c, _ := st.ClusterDetectionCycle("us"); c != nil {
		t.Fatalf("us's cycle %+v, want none", c)
	}
	if c, _ := st.DetectionCycle(); c == nil || c.Cluster != "eu" {
		t.Fatalf("last cycle of all %+v, want eu's, which finished last", c)
	}
}
