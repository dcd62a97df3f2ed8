package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
)

// harness drives an FSM the way Raft does: one encoded log entry at a time,
// with increasing indexes, and a clock that the test advances (the leader
// stamps times; the FSM reads none).
type harness struct {
	t     testing.TB
	fsm   *FSM
	index uint64
	now   time.Time
	// log is every entry applied through the harness.
	log []*raft.Log
	// resp is the last answer that was not an error (a GC result).
	resp any
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	f, err := New(hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("new FSM: %v", err)
	}
	return &harness{t: t, fsm: f, now: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)}
}

func (h *harness) state() *StateStore { return h.fsm.State() }

// meta stamps a request as the leader would: the next second and an actor.
func (h *harness) meta(actor string) structs.WriteMeta {
	h.now = h.now.Add(time.Second)
	return structs.WriteMeta{Time: h.now, Actor: actor}
}

// apply encodes req as one log entry and applies it; it returns the FSM's
// response as an error.
func (h *harness) apply(t structs.MessageType, req any) error {
	h.t.Helper()
	data, err := structs.Encode(t, req)
	if err != nil {
		h.t.Fatalf("encode %s: %v", t, err)
	}
	h.index++
	l := &raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: data}
	h.log = append(h.log, l)
	resp := h.fsm.Apply(l)
	h.resp = nil
	if resp == nil {
		return nil
	}
	if r, ok := resp.(*structs.GCResult); ok {
		h.resp = r
		return nil
	}
	err, ok := resp.(error)
	if !ok {
		h.t.Fatalf("apply %s: response is %T, not an error", t, resp)
	}
	return err
}

func (h *harness) mustApply(t structs.MessageType, req any) {
	h.t.Helper()
	if err := h.apply(t, req); err != nil {
		h.t.Fatalf("apply %s: %v", t, err)
	}
}

// create creates a deployment in state detected.
func (h *harness) create(d *structs.Deployment) {
	h.t.Helper()
	h.mustApply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
		WriteMeta: h.meta("detector"), Deployment: d,
	})
}

// createExpired creates a deployment of job that needs approval within
// ttl, lets it wait until the ttl has run out on the harness's clock, and
// expires it. It returns the deployment as created.
func (h *harness) createExpired(id, namespace, job string, ttl time.Duration) *structs.Deployment {
	h.t.Helper()
	d := testDeployment(id, namespace, job, 0, 0)
	d.Policy, d.ApprovalTTL = structs.PolicyApproval, ttl
	h.create(d)
	h.mustTransition(id, structs.StatePendingApproval, nil)
	h.now = h.now.Add(ttl)
	h.mustTransition(id, structs.StateExpired, nil)
	return d
}

// transition makes a system move.
func (h *harness) transition(id string, to structs.DeploymentState, patch *structs.DeploymentPatch) error {
	h.t.Helper()
	return h.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: h.meta("engine"), ID: id, To: to, Update: patch,
	})
}

func (h *harness) mustTransition(id string, to structs.DeploymentState, patch *structs.DeploymentPatch) {
	h.t.Helper()
	if err := h.transition(id, to, patch); err != nil {
		h.t.Fatalf("move %s to %s: %v", id, to, err)
	}
}

func (h *harness) update(id string, patch *structs.DeploymentPatch) error {
	h.t.Helper()
	return h.apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{
		WriteMeta: h.meta("engine"), ID: id, Update: patch,
	})
}

func (h *harness) decide(id, decision, actor string) error {
	h.t.Helper()
	return h.apply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{
		WriteMeta: h.meta(actor), ID: id, Decision: decision, Comment: "looks good",
	})
}

func (h *harness) deployment(id string) *structs.Deployment {
	h.t.Helper()
	d, err := h.state().Deployment(id)
	if err != nil {
		h.t.Fatalf("deployment %s: %v", id, err)
	}
	if d == nil {
		h.t.Fatalf("deployment %s not found", id)
	}
	return d
}

func (h *harness) events() []*structs.Event {
	h.t.Helper()
	evs, err := h.state().Events(EventFilter{})
	if err != nil {
		h.t.Fatalf("events: %v", err)
	}
	return evs
}

// eventsSince returns the events appended after the first n.
func (h *harness) eventsSince(n int) []*structs.Event {
	h.t.Helper()
	evs := h.events()
	if len(evs) < n {
		h.t.Fatalf("events went from %d to %d", n, len(evs))
	}
	return evs[n:]
}

// dump renders every table but the meta counters as JSON, to check that a
// refused request changed nothing (the latest applied index moves on every
// entry, so the meta table is left out).
func (h *harness) dump() string {
	h.t.Helper()
	return dumpStore(h.t, h.state(), TableMeta)
}

func dumpStore(t testing.TB, st *StateStore, skip ...string) string {
	t.Helper()
	var b strings.Builder
	txn := st.db.Txn(false)
tables:
	for _, tbl := range snapshotTables {
		for _, s := range skip {
			if s == tbl.table {
				continue tables
			}
		}
		it, err := txn.Get(tbl.table, "id")
		if err != nil {
			t.Fatalf("dump %s: %v", tbl.table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			js, err := json.Marshal(raw)
			if err != nil {
				t.Fatalf("dump %s: %v", tbl.table, err)
			}
			fmt.Fprintf(&b, "%s %s\n", tbl.table, js)
		}
	}
	return b.String()
}

// refused applies a request that must be refused with the given sentinel
// and a message naming the problem, and checks that it changed nothing and
// appended no event.
func (h *harness) refused(sentinel error, want []string, fn func() error) {
	h.t.Helper()
	before, nEvents := h.dump(), len(h.events())
	err := fn()
	if err == nil {
		h.t.Fatalf("request was accepted; want %v", sentinel)
	}
	if !errors.Is(err, sentinel) {
		h.t.Fatalf("error %q is not %v", err, sentinel)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			h.t.Errorf("error %q does not name %q", err, w)
		}
	}
	if after := h.dump(); after != before {
		h.t.Errorf("refused request changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if n := len(h.events()); n != nEvents {
		h.t.Errorf("refused request appended %d events", n-nEvents)
	}
}

// testDeployment returns a deployment in state detected with the given
// number of pre- and post-hooks.
func testDeployment(id, namespace, jobID string, pre, post int) *structs.Deployment {
	d := &structs.Deployment{
		ID: id, Namespace: namespace, JobID: jobID,
		Repository: "infra", Commit: "0123456789abcdef0123456789abcdef01234567",
		File: "jobs/" + jobID + ".nomad.hcl", Policy: structs.PolicyAuto,
		State: structs.StateDetected, SpecHash: "spec-" + jobID,
		Spec:     []byte(`{"ID":"` + jobID + `","Type":"service"}`),
		Diff:     "+/- Job: \"" + jobID + "\"\n  +/- Count: \"1\" => \"2\"",
		DiffHash: "diff-" + jobID, JobModifyIndex: 42,
		ApplyTimeout: 15 * time.Minute, PlanDiff: testPlanDiff(jobID),
	}
	for i := 0; i < pre; i++ {
		d.Hooks = append(d.Hooks, testHook(structs.PhasePre, i))
	}
	for i := 0; i < post; i++ {
		d.Hooks = append(d.Hooks, testHook(structs.PhasePost, i))
	}
	return d
}

// testPlanDiff returns a plan diff tree with every field set, at every
// level.
func testPlanDiff(jobID string) *structs.PlanDiff {
	fields := func(name string) []structs.DiffField {
		return []structs.DiffField{{Type: structs.DiffEdited, Name: name, Old: "1", New: "2", Annotations: []string{"forces create"}}}
	}
	objects := func(name string) []structs.DiffObject {
		return []structs.DiffObject{{Type: structs.DiffEdited, Name: name, Fields: fields(name + "[a]"),
			Objects: []structs.DiffObject{{Type: structs.DiffDeleted, Name: "Inner", Fields: fields("X")}}}}
	}
	return &structs.PlanDiff{Type: structs.DiffEdited, ID: jobID, Fields: fields("Priority"), Objects: objects("Meta"),
		Groups: []structs.GroupDiff{{Type: structs.DiffEdited, Name: jobID, Updates: []string{"1 create/destroy update"},
			Fields: fields("Count"), Objects: objects("Update"),
			Tasks: []structs.TaskDiff{{Type: structs.DiffEdited, Name: jobID, Annotations: []string{"forces create/destroy update"},
				Fields: fields("Env[LEVEL]"), Objects: objects("Config")}}}}}
}

func testHook(phase structs.HookPhase, pos int) structs.FrozenHook {
	name := fmt.Sprintf("%s-hook-%d", phase, pos)
	return structs.FrozenHook{
		Name: name, Phase: phase, Position: pos,
		RevisionJobID: name + "-0badc0de", Hash: "0badc0de0badc0de",
		Spec:     []byte(`{"ID":"` + name + `","Type":"batch"}`),
		Timeout:  10 * time.Minute,
		MetaKeys: []string{"nops_deployment", "nops_phase"},
	}
}

// hookRun returns the run of a hook of d in the given state.
func hookRun(d *structs.Deployment, phase structs.HookPhase, pos int, state structs.HookRunState, at time.Time) *structs.HookRun {
	r := &structs.HookRun{
		Hook: fmt.Sprintf("%s-hook-%d", phase, pos), Phase: phase, Position: pos,
		Token: structs.HookRunToken(d.ID, phase, pos), State: state, StartedAt: at,
	}
	if state != structs.HookRunDispatching {
		r.DispatchedJobID = r.Hook + "-0badc0de/dispatch-1"
	}
	if state == structs.HookRunSucceeded || state == structs.HookRunFailed {
		r.FinishedAt = at.Add(time.Minute)
	}
	if state == structs.HookRunFailed {
		r.Error = "allocation failed"
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// persist writes a snapshot of the FSM into memory.
func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Release()
	sink := &bufferSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	if !sink.closed {
		t.Fatalf("persist did not close the sink")
	}
	return sink.Bytes()
}

// bufferSink is a raft.SnapshotSink over memory.
type bufferSink struct {
	bytes.Buffer
	closed, cancelled bool
}

var _ raft.SnapshotSink = (*bufferSink)(nil)

func (s *bufferSink) ID() string    { return "test" }
func (s *bufferSink) Close() error  { s.closed = true; return nil }
func (s *bufferSink) Cancel() error { s.cancelled = true; return nil }

// restore restores a snapshot into a new FSM.
func restore(t testing.TB, snap []byte) *FSM {
	t.Helper()
	f, err := New(hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("new FSM: %v", err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return f
}
