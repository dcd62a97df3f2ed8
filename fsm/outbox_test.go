package fsm

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

// outbox returns every notification, oldest first.
func (h *harness) outbox() []*structs.Notification {
	h.t.Helper()
	out, _, err := h.state().Notifications(NotificationFilter{})
	if err != nil {
		h.t.Fatalf("notifications: %v", err)
	}
	return out
}

func outboxKinds(ns []*structs.Notification) string {
	var kinds []string
	for _, n := range ns {
		kinds = append(kinds, n.Kind)
	}
	return strings.Join(kinds, ",")
}

// TestOutboxLifecycle checks that each step of a deployment's lifecycle
// writes its notifications in the same entry, with IDs from the entry's
// index, and only the redacted diff summary, never the spec.
func TestOutboxLifecycle(t *testing.T) {
	h := newHarness(t)
	d := testDeployment("d1", "default", "web", 0, 0)
	h.create(d)
	created := h.index
	h.mustTransition("d1", structs.StatePendingApproval, nil)
	if err := h.decide("d1", structs.DecisionApprove, "alice"); err != nil {
		t.Fatal(err)
	}
	approved := h.index
	h.mustTransition("d1", structs.StateCompleted, nil)

	got := h.outbox()
	if k := outboxKinds(got); k != "created,pending_approval,approved,applying,completed" {
		t.Fatalf("kinds = %s", k)
	}
	if got[0].ID != structs.NotificationID(created, 0) {
		t.Errorf("first ID = %s, want %s", got[0].ID, structs.NotificationID(created, 0))
	}
	if got[2].ID != structs.NotificationID(approved, 0) || got[3].ID != structs.NotificationID(approved, 1) {
		t.Errorf("approve IDs = %s, %s", got[2].ID, got[3].ID)
	}
	if got[2].Actor != "alice" || got[2].Deployment == nil || got[2].Deployment.Commit != d.Commit {
		t.Errorf("approved = %+v", got[2])
	}
	for _, n := range got {
		if n.State != structs.NotificationPending || n.EventSeq == 0 || n.Namespace != "default" || n.JobID != "web" {
			t.Errorf("notification %+v", n)
		}
		if !strings.Contains(n.Deployment.DiffSummary, "Count") {
			t.Errorf("diff summary %q", n.Deployment.DiffSummary)
		}
	}
	// The spec never reaches the outbox.
	var outboxOnly bytes.Buffer
	for _, n := range got {
		b, _ := structs.Encode(0, n)
		outboxOnly.Write(b)
	}
	if bytes.Contains(outboxOnly.Bytes(), []byte(`"Type":"service"`)) {
		t.Error("a notification carries the job spec")
	}
}

// TestOutboxFailureBlocksAndUnblocks checks the failure, block and unblock
// notifications, and that a refused entry writes none.
func TestOutboxFailureBlocksAndUnblocks(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	if err := h.transition("d1", structs.StateFailed, nil); err != nil {
		t.Fatal(err)
	}
	// Refused: already terminal.
	h.refused(structs.ErrConflict, []string{"terminal"}, func() error {
		return h.transition("d1", structs.StateCompleted, nil)
	})
	h.mustApply(structs.RetryRequestType, &structs.RetryRequest{WriteMeta: h.meta("bob"), Namespace: "default", JobID: "web"})
	h.create(testDeployment("d2", "default", "web", 0, 0))
	if k := outboxKinds(h.outbox()); k != "created,failed,blocked,unblocked,created" {
		t.Fatalf("kinds = %s", k)
	}
}

// TestOutboxNewDeploymentUnblocks: a new deployment of a blocked job that
// was not retried (a new commit) clears the block and says so once, in the
// same entry that creates it.
func TestOutboxNewDeploymentUnblocks(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	if err := h.transition("d1", structs.StateFailed, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := h.state().Block("", "default", "web"); b == nil {
		t.Fatal("the failed deployment did not block its job")
	}
	h.create(testDeployment("d2", "default", "web", 0, 0))
	created := h.index
	got := h.outbox()
	if k := outboxKinds(got); k != "created,failed,blocked,unblocked,created" {
		t.Fatalf("kinds = %s", k)
	}
	unblocked := got[3]
	if unblocked.ID != structs.NotificationID(created, 0) || unblocked.Namespace != "default" || unblocked.JobID != "web" {
		t.Fatalf("unblocked = %+v, want the first notification of index %d", unblocked, created)
	}
	if b, _ := h.state().Block("", "default", "web"); b != nil {
		t.Fatalf("the new deployment left the block: %+v", b)
	}
}

func TestOutboxPauseRepoAndMarks(t *testing.T) {
	h := newHarness(t)
	h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Global: true, Reason: "freeze"})
	h.mustApply(structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: h.meta("alice"), Global: true})
	repo := testRepoStatus("infra")
	repo.FetchError = ""
	h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("git"), Repos: []*structs.RepoStatus{repo}})
	failing := *repo
	failing.FetchError = "connection refused"
	for range 2 {
		h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("git"), Repos: []*structs.RepoStatus{&failing}})
	}
	h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("git"), Repos: []*structs.RepoStatus{repo}})
	mark := func(kind, object, value string) {
		h.mustApply(structs.NotifyMarkRequestType, &structs.NotifyMarkRequest{WriteMeta: h.meta("leader"), Kind: kind, Object: object, Value: value})
	}
	mark(structs.MarkWindow, "nights", "closed") // first seen closed: nothing
	mark(structs.MarkWindow, "nights", "open")
	mark(structs.MarkWindow, "nights", "open")
	mark(structs.MarkWindow, "nights", "closed")
	mark(structs.MarkLeader, "cluster", "node-a")
	mark(structs.MarkLeader, "cluster", "node-a")
	mark(structs.MarkLeader, "cluster", "node-b")
	want := "paused,resumed,repo_failing,repo_recovered,window_opened,window_closed,leader_changed,leader_changed"
	if k := outboxKinds(h.outbox()); k != want {
		t.Fatalf("kinds = %s\nwant    %s", k, want)
	}
	h.refused(structs.ErrInvalid, []string{"unknown kind"}, func() error {
		return h.apply(structs.NotifyMarkRequestType, &structs.NotifyMarkRequest{WriteMeta: h.meta("x"), Kind: "bogus", Object: "o", Value: "v"})
	})
}

// TestOutboxResults checks attempts, final states, refusals and pruning.
func TestOutboxResults(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	id := h.outbox()[0].ID
	next := h.now.Add(time.Minute)
	result := func(rs ...structs.NotificationResult) error {
		return h.apply(structs.NotificationResultRequestType, &structs.NotificationResultRequest{WriteMeta: h.meta("leader"), Results: rs})
	}
	if err := result(structs.NotificationResult{ID: id, Target: "hook", State: structs.TargetPending, Attempted: true, Error: "HTTP 500", NextAttemptAt: next}); err != nil {
		t.Fatal(err)
	}
	n, _ := h.state().Notification(id)
	if tg := n.Target("hook"); tg == nil || tg.Attempts != 1 || tg.LastError != "HTTP 500" || !tg.NextAttemptAt.Equal(next) {
		t.Fatalf("target = %+v", tg)
	}
	h.refused(structs.ErrNotFound, []string{"nope"}, func() error {
		return result(structs.NotificationResult{ID: "nope", Target: "hook", State: structs.TargetPending})
	})
	h.refused(structs.ErrInvalid, []string{"state must be"}, func() error {
		return result(structs.NotificationResult{ID: id, Target: "hook", State: "weird"})
	})
	if err := result(structs.NotificationResult{ID: id, Target: "hook", State: structs.TargetDelivered, Attempted: true, Final: structs.NotificationDelivered}); err != nil {
		t.Fatal(err)
	}
	n, _ = h.state().Notification(id)
	if n.State != structs.NotificationDelivered || n.Target("hook").Attempts != 2 || n.FinishedAt.IsZero() {
		t.Fatalf("after delivery: %+v", n)
	}
	// A second leader's late result for a finished notification is refused.
	h.refused(structs.ErrConflict, []string{"ended"}, func() error {
		return result(structs.NotificationResult{ID: id, Target: "hook", State: structs.TargetDelivered, Attempted: true, Final: structs.NotificationDelivered})
	})
	if pending, _, _ := h.state().Notifications(NotificationFilter{State: structs.NotificationPending}); len(pending) != 0 {
		t.Fatalf("pending = %d", len(pending))
	}
	// Pruning keeps what finished after the cut-off.
	h.mustApply(structs.NotificationPruneRequestType, &structs.NotificationPruneRequest{WriteMeta: h.meta("leader"), Before: n.FinishedAt})
	if len(h.outbox()) != 1 {
		t.Fatal("pruned a notification that finished at the cut-off")
	}
	h.mustApply(structs.NotificationPruneRequestType, &structs.NotificationPruneRequest{WriteMeta: h.meta("leader"), Before: n.FinishedAt.Add(time.Nanosecond)})
	if len(h.outbox()) != 0 {
		t.Fatal("prune left a finished notification")
	}
}

// TestOutboxSnapshotRoundTrip checks that the outbox and the marks survive
// a snapshot and restore.
func TestOutboxSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	h.create(testDeployment("d1", "default", "web", 0, 0))
	h.mustApply(structs.NotifyMarkRequestType, &structs.NotifyMarkRequest{WriteMeta: h.meta("leader"), Kind: structs.MarkLeader, Object: "cluster", Value: "n1"})
	var buf bytes.Buffer
	if err := writeSnapshot(h.state().db.Txn(false), &buf); err != nil {
		t.Fatal(err)
	}
	st, err := ReadOnly(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := dumpStore(t, h.state()), dumpStore(t, st); a != b {
		t.Fatalf("restored state differs:\n%s\n%s", a, b)
	}
	if m, _ := st.Mark(structs.MarkLeader, "cluster"); m == nil || m.Value != "n1" {
		t.Fatalf("mark = %+v", m)
	}
	if p, _, _ := st.Notifications(NotificationFilter{State: structs.NotificationPending}); len(p) != 2 {
		t.Fatalf("pending after restore = %d", len(p))
	}
}

// outboxCases are the cases of TestEveryMessageType for the outbox types.
var outboxCases = map[structs.MessageType]func(t *testing.T, h *harness){
	structs.NotificationResultRequestType: func(t *testing.T, h *harness) {
		h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Global: true})
		id := h.outbox()[0].ID
		h.mustApply(structs.NotificationResultRequestType, &structs.NotificationResultRequest{WriteMeta: h.meta("leader"),
			Results: []structs.NotificationResult{{ID: id, Final: structs.NotificationDelivered}}})
		if n, _ := h.state().Notification(id); n.State != structs.NotificationDelivered {
			t.Fatalf("state = %s", n.State)
		}
	},
	structs.NotificationPruneRequestType: func(t *testing.T, h *harness) {
		h.mustApply(structs.NotificationPruneRequestType, &structs.NotificationPruneRequest{WriteMeta: h.meta("leader"), Before: h.now})
	},
	structs.NotifyMarkRequestType: func(t *testing.T, h *harness) {
		h.mustApply(structs.NotifyMarkRequestType, &structs.NotifyMarkRequest{WriteMeta: h.meta("leader"), Kind: structs.MarkWindow, Object: "w", Value: "open"})
		if k := outboxKinds(h.outbox()); k != "window_opened" {
			t.Fatalf("kinds = %s", k)
		}
	},
}

// TestRepoRefusedHeads: each head a repository refuses for its signature
// appends a repository event and a repo_failing notification naming it,
// also while the repository is already failing; the same refusal recorded
// again, and other fetch errors, append no event.
func TestRepoRefusedHeads(t *testing.T) {
	h := newHarness(t)
	upsert := func(fetchErr, refused string) {
		r := testRepoStatus("infra")
		r.FetchError, r.Refused = fetchErr, refused
		h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("git"), Repos: []*structs.RepoStatus{r}})
	}
	upsert("", "")
	before := len(h.events())
	upsert("commit aaa refused: the commit is not signed", "aaa")
	upsert("commit aaa refused: the commit is not signed", "aaa")
	upsert("commit bbb refused: the commit is signed by a key that is not trusted", "bbb")
	upsert("connection refused", "bbb")
	upsert("", "")
	var got []string
	for _, e := range h.eventsSince(before) {
		got = append(got, e.Kind+" "+e.Object+" "+e.To+": "+e.Message)
	}
	want := []string{
		"repository repository/infra refused: commit aaa refused: the commit is not signed",
		"repository repository/infra refused: commit bbb refused: the commit is signed by a key that is not trusted",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var notes []string
	for _, n := range h.outbox() {
		notes = append(notes, n.Kind+": "+n.Message)
	}
	wantNotes := []string{
		"repo_failing: fetch failing: commit aaa refused: the commit is not signed",
		"repo_failing: fetch failing: commit bbb refused: the commit is signed by a key that is not trusted",
		"repo_recovered: fetch recovered at " + structs.ShortID(testRepoStatus("infra").Head),
	}
	if strings.Join(notes, "\n") != strings.Join(wantNotes, "\n") {
		t.Fatalf("notifications:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(wantNotes, "\n"))
	}
}
