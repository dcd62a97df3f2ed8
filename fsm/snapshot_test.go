package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/klauspost/compress/zstd"

	"github.com/nops-dev/nops/fsm/snapcodec"
	"github.com/nops-dev/nops/structs"
)

// populate fills every table through FSM.Apply, so that every field of
// every stored kind, nested ones included, is set in at least one object.
func populate(t testing.TB, h *harness) {
	t.Helper()
	// A deployment that goes the whole way: deploy now, approval, two
	// pre-hooks, register, a post-hook that fails, a retry.
	h.mustApply(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: h.meta("alice"), Namespace: "default", JobID: "web"})
	full := testDeployment("full", "default", "web", 2, 1)
	full.Policy = structs.PolicyApproval
	full.CommitMessage, full.CommitAuthor = "Bump web to v2\n\nThe new image.", "Ops <ops@example.com>"
	full.CommitCommitter = "Release Bot <bot@example.com>"
	full.CommitSigner = "3AA5C34371567BD2C3AA5C34371567BD2C0FFEE1"
	full.CommitTime, full.CommitURL = h.now.Add(-time.Hour), "https://git.example.com/ops/jobs/commit/"+full.Commit
	full.FileDiff = "--- a/jobs/web.nomad.hcl\n+++ b/jobs/web.nomad.hcl\n@@ -1 +1 @@\n-image = \"web:1\"\n+image = \"web:2\"\n"
	full.ApprovalsRequired, full.ApprovalTTL = 2, 72*time.Hour
	h.mustApply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h.meta("detector"), Deployment: full, ConsumeLift: true})
	h.mustApply(structs.DeploymentSkipRequirementsRequestType, &structs.DeploymentSkipRequirementsRequest{WriteMeta: h.meta("carol"), ID: "full", Reason: "staging is down for maintenance"})
	h.mustTransition("full", structs.StatePendingApproval, nil)
	h.mustApply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: h.meta("bob"), ID: "full", Decision: "approve", Comment: "after the backup"})
	h.mustApply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: h.meta("erin"), ID: "full", Decision: "approve"})
	d := h.deployment("full")
	for pos := 0; pos < 2; pos++ {
		for _, s := range []structs.HookRunState{structs.HookRunDispatching, structs.HookRunRunning, structs.HookRunSucceeded} {
			if err := h.update("full", &structs.DeploymentPatch{HookRun: hookRun(d, structs.PhasePre, pos, s, h.now), Message: fmt.Sprintf("pre-hook %d %s", pos, s)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	at, deadline := h.now, h.now.Add(15*time.Minute)
	h.mustTransition("full", structs.StateApplying, &structs.DeploymentPatch{RegisterStartedAt: &at})
	if err := h.update("full", &structs.DeploymentPatch{Registered: ptr(true), JobVersion: ptr(uint64(4)), NomadEvalID: ptr("eval-1"), NomadDeploymentID: ptr("dep-1"), HealthDeadline: &deadline}); err != nil {
		t.Fatal(err)
	}
	h.mustTransition("full", structs.StatePostHook, nil)
	if err := h.update("full", &structs.DeploymentPatch{HookRun: hookRun(d, structs.PhasePost, 0, structs.HookRunDispatching, h.now)}); err != nil {
		t.Fatal(err)
	}
	if err := h.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: h.meta("engine"), ID: "full", From: structs.StatePostHook, To: structs.StateFailed,
		Error:  "post-hook smoke failed",
		Update: &structs.DeploymentPatch{HookRun: hookRun(d, structs.PhasePost, 0, structs.HookRunFailed, h.now)},
	}); err != nil {
		t.Fatal(err)
	}
	h.mustApply(structs.RetryRequestType, &structs.RetryRequest{WriteMeta: h.meta("carol"), Namespace: "default", JobID: "web"})

	// A retry of a job already in sync, waiting.
	skip := testDeployment("skip", "prod", "api", 0, 1)
	skip.SkipRegister = true
	h.create(skip)
	// An approval that expired, which leaves its kind of block.
	h.createExpired("expired", "prod", "cron", time.Hour)
	// Some more history.
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("old-%d", i)
		h.create(testDeployment(id, "default", "batch", 0, 0))
		h.mustTransition(id, []structs.DeploymentState{structs.StateCompleted, structs.StateSuperseded}[i%2], nil)
	}

	h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Namespace: "prod", JobID: "api", Reason: "incident"})
	h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Global: true, Reason: "freeze"})
	// A job of another Nomad cluster, with the same namespace and ID as
	// one of the default cluster, and the pause of that whole cluster.
	eu := testDeployment("eu-web", "default", "web", 2, 1)
	eu.Cluster = "eu"
	h.create(eu)
	h.mustApply(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("alice"), Cluster: "eu", Reason: "eu maintenance"})
	h.mustApply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"), Window: testWindow("nights")})
	h.mustApply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("alice"), Window: testWindow("nights")})
	h.mustApply(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: h.meta("bob"), Namespace: "prod", JobID: "api"})
	h.mustApply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("detector"), Statuses: []*structs.JobStatus{testJobStatus("web"), testJobStatus("api")}})
	h.mustApply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("detector"), Statuses: []*structs.JobStatus{testJobStatus("web")}})
	refused := testRepoStatus("apps")
	refused.Refused, refused.FetchError = "0ddba11", "commit 0ddba11 refused: the commit is not signed"
	h.mustApply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("gitwatch"), Repos: []*structs.RepoStatus{testRepoStatus("infra"), refused}})
	h.mustApply(structs.AutopilotSetConfigRequestType, &structs.AutopilotSetConfigRequest{WriteMeta: h.meta("ops"), Config: structs.AutopilotConfig{
		CleanupDeadServers: true, LastContactThreshold: time.Second, MaxTrailingLogs: 500, MinQuorum: 3, ServerStabilizationTime: 20 * time.Second,
	}})
	h.mustApply(structs.AutopilotSetConfigRequestType, &structs.AutopilotSetConfigRequest{WriteMeta: h.meta("ops"), CAS: true, Config: structs.AutopilotConfig{
		CleanupDeadServers: true, LastContactThreshold: time.Second, MaxTrailingLogs: 500, MinQuorum: 3, ServerStabilizationTime: 20 * time.Second,
		ModifyIndex: h.index,
	}})
	h.mustApply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: h.meta("detector"), Cycle: &structs.DetectionCycle{
		Leader: "nops-1", StartedAt: h.now.Add(-2 * time.Second), FinishedAt: h.now, Jobs: 3, Drifted: 2, Created: 1,
	}})
	// Each cluster keeps its own last cycle.
	h.mustApply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: h.meta("detector"), Cycle: &structs.DetectionCycle{
		Cluster: "eu", Leader: "nops-1", StartedAt: h.now.Add(-3 * time.Second), FinishedAt: h.now.Add(-time.Second), Jobs: 1,
	}})
	h.mustApply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: h.meta("engine"), Events: []*structs.Event{{
		Time: h.now.Add(-time.Minute), Kind: structs.EventKindDeployment, Object: "full", Namespace: "default", JobID: "web",
		From: "post_hook", To: "post_hook", Actor: "dave", Message: "canaries promoted",
	}}})
	populateACL(t, h)
	// The outbox: one notification tried and failed, one delivered.
	h.mustApply(structs.NotifyMarkRequestType, &structs.NotifyMarkRequest{WriteMeta: h.meta("leader"), Kind: structs.MarkLeader, Object: "cluster", Value: "nops-1"})
	ns, _, _ := h.state().Notifications(NotificationFilter{})
	h.mustApply(structs.NotificationResultRequestType, &structs.NotificationResultRequest{WriteMeta: h.meta("leader"), Results: []structs.NotificationResult{
		{ID: ns[0].ID, Target: "hook", State: structs.TargetPending, Attempted: true, Error: "HTTP 500", NextAttemptAt: h.now.Add(time.Minute)},
		{ID: ns[1].ID, Target: "hook", State: structs.TargetDelivered, Attempted: true, Final: structs.NotificationDelivered},
	}})
	h.mustApply(structs.WebhookDeliveryRequestType, &structs.WebhookDeliveryRequest{WriteMeta: h.meta("webhook"), Provider: "github", ID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"})
	// A refused entry at the end, so the latest index is its index.
	if err := h.decide("skip", structs.DecisionApprove, "bob"); err == nil {
		t.Fatalf("approve of a detected deployment was accepted")
	}
}

// tableObjects returns the stored objects of a table in index order.
func tableObjects(t testing.TB, st *StateStore, table string) []any {
	t.Helper()
	it, err := st.db.Txn(false).Get(table, "id")
	if err != nil {
		t.Fatalf("list %s: %v", table, err)
	}
	var out []any
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw)
	}
	return out
}

var timeType = reflect.TypeFor[time.Time]()

// fieldPaths lists the paths of every field of t, through structs, slices
// and pointers. A struct inside itself (a tree's node) is listed once, at
// its outer place.
func fieldPaths(t reflect.Type, prefix string, out map[string]bool) {
	fieldPathsIn(t, prefix, out, map[reflect.Type]bool{})
}

func fieldPathsIn(t reflect.Type, prefix string, out map[string]bool, outer map[reflect.Type]bool) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return
		}
		fieldPathsIn(t.Elem(), prefix+"[]", out, outer)
	case reflect.Struct:
		if t == timeType || outer[t] {
			return
		}
		outer[t] = true
		defer delete(outer, t)
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("codec") == "-" {
				// A field the codec never writes is never stored.
				continue
			}
			p := prefix + "." + f.Name
			out[p] = false
			fieldPathsIn(f.Type, p, out, outer)
		}
	}
}

// markSet records which field paths are set (not zero) in v.
func markSet(v reflect.Value, prefix string, set map[string]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			markSet(v.Elem(), prefix+"[]", set)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := 0; i < v.Len(); i++ {
			markSet(v.Index(i), prefix+"[]", set)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			p := prefix + "." + f.Name
			if !v.Field(i).IsZero() {
				set[p] = true
			}
			markSet(v.Field(i), p, set)
		}
	}
}

// equalTimes is reflect.DeepEqual, but compares times as instants, so that
// the time zone a decoder picks does not matter.
func equalTimes(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalTimes(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !equalTimes(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Struct:
		if a.Type() == timeType {
			return a.Interface().(time.Time).Equal(b.Interface().(time.Time))
		}
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				continue
			}
			if !equalTimes(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(a.Interface(), b.Interface())
	}
}

// assertSameState compares every object of every table of two stores.
func assertSameState(t *testing.T, want, got *StateStore) {
	t.Helper()
	tables := []string{tableEventObjects}
	for _, tbl := range snapshotTables {
		tables = append(tables, tbl.table)
	}
	for _, tbl := range tables {
		w, g := tableObjects(t, want, tbl), tableObjects(t, got, tbl)
		if len(w) != len(g) {
			t.Errorf("%s: %d objects, want %d", tbl, len(g), len(w))
			continue
		}
		for i := range w {
			if !equalTimes(reflect.ValueOf(w[i]), reflect.ValueOf(g[i])) {
				t.Errorf("%s object %d:\n got %#v\nwant %#v", tbl, i, g[i], w[i])
			}
		}
	}
	if want.LatestIndex() != got.LatestIndex() {
		t.Errorf("latest index %d, want %d", got.LatestIndex(), want.LatestIndex())
	}
}

// TestSnapshotRoundTrip persists a state in which every table and every
// field is set, restores it into a new FSM and compares every object.
func TestSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	populate(t, h)

	// Every table is populated, with every field set somewhere.
	for _, tbl := range snapshotTables {
		objs := tableObjects(t, h.state(), tbl.table)
		if len(objs) == 0 {
			t.Errorf("table %s is empty", tbl.table)
			continue
		}
		paths, set := map[string]bool{}, map[string]bool{}
		fieldPaths(reflect.TypeOf(tbl.new()), tbl.table, paths)
		for _, o := range objs {
			markSet(reflect.ValueOf(o), tbl.table, set)
		}
		for p := range paths {
			if !set[p] {
				t.Errorf("no object sets %s: the round trip would not show it is lost", p)
			}
		}
	}

	snap := persist(t, h.fsm)
	restored := restore(t, snap)
	assertSameState(t, h.state(), restored.State())

	// The readers see the same state.
	wantCounts, _ := h.state().Counts()
	gotCounts, _ := restored.State().Counts()
	if !reflect.DeepEqual(wantCounts, gotCounts) {
		t.Errorf("counts %v, want %v", gotCounts, wantCounts)
	}
	if wantCounts[TableDeployments] != 9 || wantCounts[TableEvents] < 30 {
		t.Errorf("counts %v", wantCounts)
	}
	d := restored.State().Deployments
	if all, _, _ := d(DeploymentFilter{}); len(all) != 9 || all[0].ID != "eu-web" {
		t.Errorf("restored deployments, newest first: %v", all)
	}
	if active, _ := restored.State().ActiveDeployments(); len(active) != 2 {
		t.Errorf("restored active deployments: %v", active)
	}
	// The same namespace and job ID in two clusters are two jobs.
	if a, _ := restored.State().ActiveDeployment("eu", "default", "web"); a == nil || a.ID != "eu-web" {
		t.Errorf("active deployment of eu:default/web = %+v", a)
	}
	if a, _ := restored.State().ActiveDeployment(structs.DefaultCluster, "default", "web"); a != nil {
		t.Errorf("active deployment of default/web = %+v, want none (its deployment failed)", a)
	}
	if eu, _, _ := d(DeploymentFilter{Cluster: "eu"}); len(eu) != 1 || eu[0].ID != "eu-web" {
		t.Errorf("deployments of cluster eu: %v", eu)
	}
	if p, _ := restored.State().Paused("eu", "prod", "other"); p == nil || !p.Global {
		t.Errorf("pause of a job of eu = %+v, want the global pause first", p)
	}
	full, _ := restored.State().Deployment("full")
	if full == nil || len(full.HookRuns) != 3 || len(full.Decisions) != 2 || !full.LiftedWindow || !full.Registered ||
		full.ApprovalsRequired != 2 || full.ApprovalTTL != 72*time.Hour {
		t.Errorf("restored deployment: %+v", full)
	}

	// The restored FSM goes on applying where the other left off: event
	// numbers continue, and the job keeps its one active deployment.
	h2 := &harness{t: t, fsm: restored, index: h.index, now: h.now}
	h2.refused(structs.ErrConflict, []string{"active deployment skip"}, func() error {
		return h2.apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h2.meta("d"), Deployment: testDeployment("again", "prod", "api", 0, 0)})
	})
	last := h.events()[len(h.events())-1].Seq
	h2.mustTransition("skip", structs.StateSuperseded, nil)
	if evs := h2.eventsSince(int(last)); len(evs) != 1 || evs[0].Seq != last+1 {
		t.Errorf("events after restore: %+v", evs)
	}
	// The events of an object, rebuilt by the restore, go on too.
	before, _ := h.state().Events(EventFilter{Object: "skip"})
	after, _ := h2.state().Events(EventFilter{Object: "skip"})
	if len(before) == 0 || len(after) != len(before)+1 || after[len(after)-1].Seq != last+1 {
		t.Errorf("events of a deployment: %d before the restore, %d after one more", len(before), len(after))
	}

	// ReadOnly reads the same snapshot into a store for inspection.
	ro, err := ReadOnly(bytes.NewReader(snap))
	if err != nil {
		t.Fatalf("read only: %v", err)
	}
	assertSameState(t, h.state(), ro)

	// A snapshot is a point in time: entries applied after it do not
	// reach it.
	s, err := h.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	h.mustTransition("skip", structs.StateSuperseded, nil)
	sink := &bufferSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if !bytes.Equal(sink.Bytes(), snap) {
		t.Errorf("a snapshot taken before an entry holds that entry")
	}
}

// TestSnapshotEmpty round-trips an empty state.
func TestSnapshotEmpty(t *testing.T) {
	h := newHarness(t)
	snap := persist(t, h.fsm)
	if body := unpack(t, snap); len(body) != 5+8 {
		t.Fatalf("empty snapshot of %d bytes", len(body))
	}
	restored := restore(t, snap)
	assertSameState(t, h.state(), restored.State())
}

// TestRestoreReplacesState checks that a restore replaces the whole state
// and wakes watchers, and that a failed restore keeps the old state.
func TestRestoreReplacesState(t *testing.T) {
	src := newHarness(t)
	src.create(testDeployment("d1", "default", "web", 0, 0))
	snap := persist(t, src.fsm)

	h := newHarness(t)
	populate(t, h)
	before := dumpStore(t, h.state())
	old := h.state()
	changed := old.Changed()

	if err := h.fsm.Restore(io.NopCloser(bytes.NewReader(snap[:len(snap)-1]))); err == nil {
		t.Fatalf("restore of a truncated snapshot succeeded")
	}
	if h.state() != old || dumpStore(t, h.state()) != before {
		t.Fatalf("a failed restore changed the state")
	}
	if err := h.fsm.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatalf("watchers of the old store were not woken by the restore")
	}
	assertSameState(t, src.state(), h.state())
}

// TestRestoreCorrupt checks that a damaged snapshot is refused with an
// error, never a panic, and never restored as a partial state.
func TestRestoreCorrupt(t *testing.T) {
	h := newHarness(t)
	populate(t, h)
	snap := persist(t, h.fsm)

	tryRestore := func(b []byte) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
				t.Errorf("restore panicked: %v", r)
			}
		}()
		_, err = ReadOnly(bytes.NewReader(b))
		return err
	}
	record := func(kind byte, body []byte) []byte {
		b := []byte{kind, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
		return append(b, body...)
	}
	end := func(n uint64) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, n)
		return record(byte(snapshotEnd), b)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// pk frames records as a snapshot of this format: the header, then
	// the records compressed.
	pk := func(parts ...[]byte) []byte { return pack(t, cat(parts...)) }
	magic := snapshotMagic[:]
	v2 := []byte("NOPSSNP\x02")
	body := unpack(t, snap)
	var flipped []byte
	{
		c := bytes.Clone(snap)
		c[len(c)/2] ^= 0xff
		flipped = c
	}

	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "read snapshot header"},
		{"short header", magic[:5], "read snapshot header"},
		{"wrong magic", cat([]byte("NOPSSNQ\x03"), end(0)), "not a Nops state snapshot"},
		{"format 9", cat([]byte("NOPSSNP\x09"), end(0)), "format version 9, and it reads versions 2 to 4"},
		{"format 1", cat([]byte("NOPSSNP\x01"), end(0)), "not a Nops state snapshot this server can read: format version 1"},
		{"raft bytes", []byte("{\"Deployments\":[]}"), "not a Nops state snapshot"},
		{"header only", magic, "truncated after 0 records"},
		{"empty stream", pk(), "truncated after 0 records"},
		{"records not compressed", cat(magic, end(0)), "read snapshot record 1"},
		{"cut in a record header", pk([]byte{0, 0}), "read snapshot record 1"},
		{"cut in a record body", pk([]byte{byte(PauseSnapshot), 0, 0, 0, 9, 0x80}), "read snapshot record 1"},
		{"unknown record type", pk(record(77, []byte{0x80}), end(1)), "unknown type 77"},
		{"undecodable record", pk(record(byte(PauseSnapshot), []byte{0xc1}), end(1)), "decode snapshot pauses record"},
		{"record of the wrong shape", pk(record(byte(PauseSnapshot), []byte{0x93, 1, 2, 3}), end(1)), "decode snapshot pauses record"},
		{"trailing bytes in a record", pk(record(byte(MetaSnapshot), []byte{0x80, 0x80}), end(1)), "trailing bytes"},
		{"trailing bytes in a deployment", pk(record(byte(DeploymentSnapshot), []byte{0x90, 0x80}), end(1)), "trailing bytes"},
		{"trailing bytes in an event", pk(record(byte(EventSnapshot), []byte{0x90, 0x80}), end(1)), "trailing bytes"},
		{"object without its key", pk(record(byte(PauseSnapshot), []byte{0x80}), end(1)), "restore pauses"},
		{"huge record length", pk([]byte{byte(DeploymentSnapshot), 0xff, 0xff, 0xff, 0xff}), "over the limit"},
		{"large record length, little data", pk([]byte{byte(DeploymentSnapshot), 0x0f, 0xff, 0xff, 0xff}, make([]byte, 3<<20)), "unexpected EOF"},
		{"end count too high", pk(end(1)), "end record does not match the 0 records"},
		{"end of the wrong size", pk(record(byte(snapshotEnd), []byte{0})), "end record does not match"},
		{"data after the end", pk(body, []byte{0}), "data after its end record"},
		{"garbage after the stream", cat(snap, []byte{0}), "data after its end record"},
		{"two snapshots", cat(snap, snap), "data after its end record"},
		{"a flipped byte in the stream", flipped, "snapshot"},
		{"format 2, cut in a record header", cat(v2, []byte{0, 0}), "read snapshot record 1"},
		{"format 2, data after the end", cat(v2, end(0), []byte{0}), "data after its end record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tryRestore(tc.data)
			if err == nil {
				t.Fatalf("restore succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}

	// The positions to damage, in the records before compression: every
	// byte of the framing (each record header) and its neighbours, and a
	// sample of the bodies. Restoring every position of every body would
	// only repeat these.
	header := map[int]bool{}
	for off := 0; off < len(body); {
		for i := 0; i < 5; i++ {
			header[off+i] = true
		}
		off += 5 + int(binary.BigEndian.Uint32(body[off+1:]))
	}
	var positions []int
	for i := range body {
		if header[i] || header[i-1] || header[i+1] || i%17 == 0 {
			positions = append(positions, i)
		}
	}
	// Every prefix is refused, of the records and of the compressed
	// stream.
	for _, n := range positions {
		if err := tryRestore(pack(t, body[:n])); err == nil {
			t.Fatalf("a snapshot cut to %d of %d bytes of records was restored", n, len(body))
		}
	}
	for n := range len(snap) {
		if err := tryRestore(snap[:n]); err == nil {
			t.Fatalf("a snapshot cut to %d of %d bytes was restored", n, len(snap))
		}
	}
	// A flipped byte gives an error or a state, never a panic; a flip in a
	// record's type or length is always refused.
	refused := 0
	for _, i := range positions {
		b := bytes.Clone(body)
		b[i] ^= 0xff
		err := tryRestore(pack(t, b))
		if err != nil {
			refused++
		} else if header[i] {
			t.Errorf("a snapshot with byte %d of its framing flipped was restored", i)
		}
	}
	if refused == 0 {
		t.Fatalf("no corrupt snapshot was refused")
	}
	t.Logf("%d of %d single-byte corruptions of the records refused", refused, len(positions))
	// The compressed stream has a checksum: a flip in it, or in the
	// header, is refused, unless it decodes to the very same records
	// (zstd ignores some bits of its table descriptions, so a flip there
	// changes nothing), which restoring is right.
	for i := range snap {
		b := bytes.Clone(snap)
		b[i] ^= 0xff
		if err := tryRestore(b); err == nil && !bytes.Equal(unpack(t, b), body) {
			t.Errorf("a snapshot with byte %d of %d flipped was restored with other records", i, len(snap))
		}
	}
}

// pack frames records as a snapshot of this format, compressed as
// writeSnapshot compresses them.
func pack(t testing.TB, records []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.Write(snapshotMagic[:])
	zw, err := getEncoder(&buf)
	if err != nil {
		t.Fatal(err)
	}
	defer putEncoder(zw)
	if _, err := zw.Write(records); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// unpack returns the records of a snapshot of this format.
func unpack(t testing.TB, snap []byte) []byte {
	t.Helper()
	if !bytes.HasPrefix(snap, snapshotMagic[:]) {
		t.Fatalf("snapshot header %q", snap[:min(len(snap), 8)])
	}
	zr, err := zstd.NewReader(bytes.NewReader(snap[len(snapshotMagic):]))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotReadsFormat2 restores a snapshot of the format before this
// one: records not compressed, deployments as maps.
func TestSnapshotReadsFormat2(t *testing.T) {
	h := newHarness(t)
	populate(t, h)
	txn := h.state().db.Txn(false)
	out := []byte("NOPSSNP\x02")
	hd := structs.NewMsgpackHandle()
	count := 0
	for _, tbl := range snapshotTables {
		it, err := txn.Get(tbl.table, "id")
		if err != nil {
			t.Fatal(err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			var body []byte
			if e, ok := raw.(*structs.Event); ok {
				// Format 2 wrote events as arrays, as this one does.
				body, err = snapcodec.AppendEvent(nil, e)
			} else {
				err = codec.NewEncoderBytes(&body, hd).Encode(raw)
			}
			if err != nil {
				t.Fatal(err)
			}
			if tbl.kind == DeploymentSnapshot && !isMsgpackMap(body[0]) {
				t.Fatalf("deployment written as %x", body[:1])
			}
			out = append(binary.BigEndian.AppendUint32(append(out, byte(tbl.kind)), uint32(len(body))), body...)
			count++
		}
	}
	out = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(append(out, byte(snapshotEnd)), 8), uint64(count))
	st, err := ReadOnly(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("a snapshot of format 2 was refused: %v", err)
	}
	assertSameState(t, h.state(), st)
	// Written again, it is a snapshot of this format, of the same state.
	var buf bytes.Buffer
	if err := writeSnapshot(st.db.Txn(false), &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), persist(t, h.fsm)) {
		t.Fatalf("a state read from format 2 writes other bytes than the state it came from")
	}
}

// TestRestoreStateLimit checks that ReadOnlyLimited stops reading at its
// limit, however well the state compresses.
func TestRestoreStateLimit(t *testing.T) {
	h := newHarness(t)
	populate(t, h)
	snap := persist(t, h.fsm)
	body := unpack(t, snap)
	if _, err := ReadOnlyLimited(bytes.NewReader(snap), int64(len(body))); err != nil {
		t.Fatalf("a state of exactly the limit was refused: %v", err)
	}
	_, err := ReadOnlyLimited(bytes.NewReader(snap), int64(len(body)-1))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("expands past the limit of %d bytes", len(body)-1)) {
		t.Fatalf("a state one byte over the limit: %v", err)
	}
	// A record of 200 MB of zeros: a few kilobytes compressed.
	bomb := make([]byte, 5, 200<<20+5)
	bomb[0] = byte(RepoStatusSnapshot)
	binary.BigEndian.PutUint32(bomb[1:], 200<<20)
	bomb = pack(t, bomb[:cap(bomb)])
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb of %d bytes", len(bomb))
	}
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	before := m.TotalAlloc
	_, err = ReadOnlyLimited(bytes.NewReader(bomb), 8<<20)
	if err == nil || !strings.Contains(err.Error(), "claims 209715200 bytes, more than the 8388608 left of the limit of 8388608 bytes") {
		t.Fatalf("a compressed bomb: %v", err)
	}
	runtime.ReadMemStats(&m)
	if grew := m.TotalAlloc - before; grew > 48<<20 {
		t.Fatalf("refusing a %d-byte bomb allocated %d MB", len(bomb), grew>>20)
	}
	t.Logf("refusing a %d-byte bomb allocated %d MB", len(bomb), (m.TotalAlloc-before)>>20)
}

// TestDeterminism applies the same log to two FSMs and checks that their
// snapshots are the same bytes, before and after a restore.
func TestDeterminism(t *testing.T) {
	a := newHarness(t)
	populate(t, a)
	log := a.log

	b := newHarness(t)
	for _, l := range log {
		b.fsm.Apply(l)
	}
	sa, sb := persist(t, a.fsm), persist(t, b.fsm)
	if !bytes.Equal(sa, sb) {
		t.Fatalf("the same log gave different snapshots (%d and %d bytes)", len(sa), len(sb))
	}
	// A restored FSM writes the same snapshot, and goes on the same way.
	c := restore(t, sa)
	if sc := persist(t, c); !bytes.Equal(sa, sc) {
		t.Fatalf("a restored FSM wrote a different snapshot")
	}
	more := newHarness(t)
	more.index, more.now = a.index, a.now
	more.fsm = c
	more.create(testDeployment("late", "default", "late", 1, 0))
	more.mustTransition("late", structs.StatePreHook, nil)
	for _, l := range more.log {
		a.fsm.Apply(l)
		b.fsm.Apply(l)
	}
	sa, sb, sc := persist(t, a.fsm), persist(t, b.fsm), persist(t, c)
	if !bytes.Equal(sa, sb) || !bytes.Equal(sa, sc) {
		t.Fatalf("FSMs diverged after more entries")
	}
}

// TestRestoreLimitBoundsTheWholeState: the limit bounds the state as a
// whole. Records each far under the limit of one record are refused once
// together they pass it: by their number, however small each is, and by
// their bytes, from the header of the record that claims more than is
// left, before it is read.
func TestRestoreLimitBoundsTheWholeState(t *testing.T) {
	// 20,000 repositories of a name each: a record of 14 bytes decodes to
	// a whole object. 360 KB in a limit of 1 MiB, but more records than
	// it admits.
	var records []byte
	h := structs.NewMsgpackHandle()
	const n = 20000
	for i := range n {
		var body []byte
		if err := codec.NewEncoderBytes(&body, h).Encode(map[string]string{"name": fmt.Sprintf("r%05d", i)}); err != nil {
			t.Fatal(err)
		}
		records = binary.BigEndian.AppendUint32(append(records, byte(RepoStatusSnapshot)), uint32(len(body)))
		records = append(records, body...)
	}
	records = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(append(records, byte(snapshotEnd)), 8), n)
	const limit = 1 << 20
	if len(records) > limit/2 {
		t.Fatalf("%d bytes of records", len(records))
	}
	_, err := ReadOnlyLimited(bytes.NewReader(pack(t, records)), limit)
	want := fmt.Sprintf("snapshot holds more than %d records, past the limit of %d bytes for the whole state", limit/restoreRecordCost, limit)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%d records in a limit of %d bytes: %v; want %q", n, limit, err, want)
	}
	// Three records of 100 KB, each under the limit of one record, in a
	// limit of 256 KB: the third is refused from its header.
	records = nil
	for i := range 3 {
		var body []byte
		big := map[string]string{"name": fmt.Sprintf("r%d", i), "head": strings.Repeat("a", 100<<10)}
		if err := codec.NewEncoderBytes(&body, h).Encode(big); err != nil {
			t.Fatal(err)
		}
		records = binary.BigEndian.AppendUint32(append(records, byte(RepoStatusSnapshot)), uint32(len(body)))
		records = append(records, body...)
	}
	_, err = ReadOnlyLimited(bytes.NewReader(pack(t, records)), 256<<10)
	if err == nil || !strings.Contains(err.Error(), "left of the limit of 262144 bytes for the whole state") {
		t.Fatalf("three records of 100 KB in 256 KB: %v", err)
	}
}

// isMsgpackMap reports whether b opens a msgpack map.
func isMsgpackMap(b byte) bool {
	return b&0xf0 == 0x80 || b == 0xde || b == 0xdf
}

// TestSnapshotReadsFormat3 restores a snapshot written by the format
// before clusters (format 3, testdata/state-format3.snap, written from
// populate by that version): every job-keyed object comes back as of the
// default cluster, reachable by the cluster-keyed lookups, and the state
// written again is of this format and reads back the same.
func TestSnapshotReadsFormat3(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "state-format3.snap"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(raw, []byte("NOPSSNP\x03")) {
		t.Fatalf("testdata is not a format 3 snapshot: %q", raw[:8])
	}
	st, err := ReadOnly(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("a snapshot of format 3 was refused: %v", err)
	}
	deps, _, err := st.Deployments(DeploymentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(deps) < 5 {
		t.Fatalf("restored %d deployments, want the populated ones", len(deps))
	}
	for _, d := range deps {
		if d.Cluster != structs.DefaultCluster {
			t.Errorf("deployment %s restored in cluster %q, want %q", d.ID, d.Cluster, structs.DefaultCluster)
		}
	}
	if d, err := st.LastDeployment(structs.DefaultCluster, "default", "web"); err != nil || d == nil || d.ID != "full" {
		t.Fatalf("last deployment of default/web in the default cluster = %v, %v; want full", d, err)
	}
	if b, err := st.Block(structs.DefaultCluster, "prod", "cron"); err != nil || b == nil {
		t.Fatalf("block of prod/cron in the default cluster = %v, %v", b, err)
	}
	if l, err := st.Lift(structs.DefaultCluster, "prod", "api"); err != nil || l == nil || l.Cluster != structs.DefaultCluster {
		t.Fatalf("deploy now of prod/api in the default cluster = %+v, %v", l, err)
	}
	if s, err := st.JobStatus(structs.DefaultCluster, "default", "web"); err != nil || s == nil || s.Cluster != structs.DefaultCluster {
		t.Fatalf("status of default/web in the default cluster = %+v, %v", s, err)
	}
	if p, err := st.Paused(structs.DefaultCluster, "prod", "api"); err != nil || p == nil || !p.Global {
		t.Fatalf("pause of prod/api = %+v, %v; want the global pause first", p, err)
	}
	pauses, err := st.Pauses()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pauses {
		if !p.Global && p.Cluster != structs.DefaultCluster {
			t.Errorf("job pause %s restored in cluster %q", p.Key, p.Cluster)
		}
	}
	// Written again, it is of this format and reads back the same.
	var buf bytes.Buffer
	if err := writeSnapshot(st.db.Txn(false), &buf); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes()[7] != snapshotVersion {
		t.Fatalf("written as format %d, want %d", buf.Bytes()[7], snapshotVersion)
	}
	again, err := ReadOnly(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	assertSameState(t, st, again)
}
