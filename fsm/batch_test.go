package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
)

// batchLog builds a log of entries that mixes accepted and refused
// requests, including a refused request that had changed something before
// it was refused (a job status delete whose second key is malformed).
func batchLog(t *testing.T) []*raft.Log {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var logs []*raft.Log
	add := func(mt structs.MessageType, req any) {
		data, err := structs.Encode(mt, req)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	meta := func() structs.WriteMeta {
		now = now.Add(time.Second)
		return structs.WriteMeta{Time: now, Actor: "tester"}
	}
	for i, id := range []string{"d-1", "d-2", "d-3"} {
		d := testDeployment(id, "default", "job-"+id, 1, 0)
		add(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta(), Deployment: d})
		add(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: meta(), Statuses: []*structs.JobStatus{
			{Namespace: "default", JobID: "job-" + id, Sync: structs.SyncDrift}}})
		if i == 1 {
			// Refused, changing nothing: a second active deployment.
			add(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta(), Deployment: testDeployment("d-dup", "default", "job-"+id, 0, 0)})
		}
	}
	add(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: meta(), ID: "d-1", To: structs.StatePendingApproval})
	add(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: meta(), Global: true, Reason: "freeze"})
	// Refused by the pause.
	add(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: meta(), ID: "d-1", Decision: structs.DecisionApprove})
	// Refused after a change: the first key is deleted, the second is not a key.
	add(structs.JobStatusDeleteRequestType, &structs.JobStatusDeleteRequest{WriteMeta: meta(), Keys: []string{"default/job-d-1", "no-slash"}})
	add(structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: meta(), Global: true, Reason: "thaw"})
	add(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: meta(), ID: "d-1", Decision: structs.DecisionApprove})
	return logs
}

// newFSM returns an FSM over an empty state.
func newFSM(t *testing.T) *FSM {
	t.Helper()
	f, err := New(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// applyEach applies logs one entry at a time to a new FSM, which it
// returns with the answers.
func applyEach(t *testing.T, logs []*raft.Log) (*FSM, []any) {
	t.Helper()
	f := newFSM(t)
	var resps []any
	for _, l := range logs {
		resps = append(resps, f.Apply(l))
	}
	return f, resps
}

// applyInBatches applies logs to a new FSM in Raft batches of size
// entries, and returns it with the answers.
func applyInBatches(t *testing.T, logs []*raft.Log, size int) (*FSM, []any) {
	t.Helper()
	f := newFSM(t)
	var resps []any
	for start := 0; start < len(logs); start += size {
		resps = append(resps, f.ApplyBatch(logs[start:min(start+size, len(logs))])...)
	}
	return f, resps
}

// sameAnswer reports whether two answers agree: both nil, or errors with
// the same message.
func sameAnswer(a, b any) bool {
	ae, _ := a.(error)
	be, _ := b.(error)
	return (ae == nil) == (be == nil) && (ae == nil || ae.Error() == be.Error())
}

// encodeEntry encodes one request as a log entry's data.
func encodeEntry(t *testing.T, mt structs.MessageType, req any) []byte {
	t.Helper()
	data, err := structs.Encode(mt, req)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// bothPaths applies l alone through Apply or through ApplyBatch, by name.
func bothPaths(l *raft.Log) map[string]func(f *FSM) any {
	return map[string]func(f *FSM) any{
		"Apply":      func(f *FSM) any { return f.Apply(l) },
		"ApplyBatch": func(f *FSM) any { return f.ApplyBatch([]*raft.Log{l})[0] },
	}
}

// TestApplyBatch_SameAsOneByOne applies one log entry by entry and in
// batches of every size: the answers and the resulting state are the same,
// byte for byte.
func TestApplyBatch_SameAsOneByOne(t *testing.T) {
	logs := batchLog(t)
	single, want := applyEach(t, logs)
	refused := 0
	for _, r := range want {
		if r != nil {
			refused++
		}
	}
	if refused != 3 {
		t.Fatalf("want 3 refused entries in the test log, got %d: %v", refused, want)
	}
	wantSnap := persist(t, single)

	for size := 1; size <= len(logs); size++ {
		f, got := applyInBatches(t, logs, size)
		for i := range want {
			if !sameAnswer(got[i], want[i]) {
				t.Fatalf("batch size %d, entry %d: answer %v, want %v", size, i+1, got[i], want[i])
			}
			if ge, _ := got[i].(error); ge != nil && !errors.Is(ge, structs.ErrConflict) && !errors.Is(ge, structs.ErrInvalid) {
				t.Fatalf("batch size %d, entry %d: %v is not a business error", size, i+1, ge)
			}
		}
		if snap := persist(t, f); !bytes.Equal(snap, wantSnap) {
			t.Fatalf("batch size %d: state differs from the one-by-one state", size)
		}
		if idx := f.State().LatestIndex(); idx != uint64(len(logs)) {
			t.Fatalf("batch size %d: latest index %d, want %d", size, idx, len(logs))
		}
	}
}

// packLog packs the requests of logs into batch entries of up to n
// requests each, indexed from 1. Like the leader's proposer, it packs a
// deployment create alone, in its place.
func packLog(logs []*raft.Log, n int) []*raft.Log {
	var out []*raft.Log
	var parts [][]byte
	flush := func() {
		if len(parts) > 0 {
			out = append(out, &raft.Log{Index: uint64(len(out) + 1), Term: 1, Type: raft.LogCommand, Data: structs.EncodeBatch(parts)})
		}
		parts = nil
	}
	for _, l := range logs {
		if structs.MessageType(l.Data[0]) == structs.DeploymentCreateRequestType {
			flush()
			parts = [][]byte{l.Data}
			flush()
			continue
		}
		if parts = append(parts, l.Data); len(parts) == n {
			flush()
		}
	}
	flush()
	return out
}

// flatten lists the answers of batch entries request by request.
func flatten(t *testing.T, resps []any) []any {
	t.Helper()
	var out []any
	for i, r := range resps {
		list, ok := r.([]any)
		if !ok {
			t.Fatalf("entry %d: answer %T (%v), want the list of a batch entry's answers", i+1, r, r)
		}
		out = append(out, list...)
	}
	return out
}

// outline is what the state says apart from its indexes: each
// deployment's state, each event, and the notifications' kinds.
func outline(t *testing.T, f *FSM) string {
	t.Helper()
	txn := f.State().db.Txn(false)
	var b strings.Builder
	// By the create index, which a shared index would break.
	it, err := txn.Get(TableDeployments, "create")
	if err != nil {
		t.Fatal(err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		d := raw.(*structs.Deployment)
		fmt.Fprintf(&b, "deployment %s %s\n", d.ID, d.State)
	}
	if it, err = txn.Get(TableEvents, "id"); err != nil {
		t.Fatal(err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		e := raw.(*structs.Event)
		fmt.Fprintf(&b, "event %d %s %s %s>%s %s\n", e.Seq, e.Kind, e.Object, e.From, e.To, e.Message)
	}
	if it, err = txn.Get(TableNotifications, "id"); err != nil {
		t.Fatal(err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n := raw.(*structs.Notification)
		fmt.Fprintf(&b, "notification %s %s event %d\n", n.Kind, n.Object, n.EventSeq)
	}
	return b.String()
}

// TestBatchEntry_AnswersAsAlone packs the test log's requests into batch
// entries of every size. Each request gets the answer it gets as an entry
// of its own, and the state holds the same deployments, events and
// notifications. Applied entry by entry or in Raft batches of every size,
// a packed log gives the same answers and the same state, byte for byte.
func TestBatchEntry_AnswersAsAlone(t *testing.T) {
	logs := batchLog(t)
	single, want := applyEach(t, logs)
	wantOutline := outline(t, single)
	if !strings.Contains(wantOutline, "notification") {
		t.Fatalf("the test log writes no notification:\n%s", wantOutline)
	}
	for pack := 1; pack <= len(logs); pack++ {
		packed := packLog(logs, pack)
		each, resps := applyEach(t, packed)
		got := flatten(t, resps)
		if len(got) != len(want) {
			t.Fatalf("pack %d: %d answers for %d requests", pack, len(got), len(want))
		}
		for i := range want {
			if !sameAnswer(got[i], want[i]) {
				t.Fatalf("pack %d, request %d: answer %v, want %v", pack, i+1, got[i], want[i])
			}
		}
		if o := outline(t, each); o != wantOutline {
			t.Fatalf("pack %d: state differs from the one-by-one state:\n%s\nwant:\n%s", pack, o, wantOutline)
		}
		if idx := each.State().LatestIndex(); idx != uint64(len(packed)) {
			t.Fatalf("pack %d: latest index %d, want %d", pack, idx, len(packed))
		}
		wantSnap := persist(t, each)
		for size := 1; size <= len(packed); size++ {
			f, batched := applyInBatches(t, packed, size)
			for i, r := range flatten(t, batched) {
				if !sameAnswer(r, got[i]) {
					t.Fatalf("pack %d, raft batch %d, request %d: answer %v, want %v", pack, size, i+1, r, got[i])
				}
			}
			if snap := persist(t, f); !bytes.Equal(snap, wantSnap) {
				t.Fatalf("pack %d, raft batch %d: state differs from the entry-by-entry state", pack, size)
			}
		}
	}
}

// TestBatchEntry_NotificationIDs: the requests of a batch entry share its
// index, which numbers notifications, so their numbers go on from one
// request to the next rather than starting again and colliding.
func TestBatchEntry_NotificationIDs(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFSM(t)
	encode := func(mt structs.MessageType, req any) []byte { return encodeEntry(t, mt, req) }
	var parts [][]byte
	for i, id := range []string{"d-1", "d-2", "d-3"} {
		l := &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: encode(structs.DeploymentCreateRequestType,
			&structs.DeploymentCreateRequest{WriteMeta: structs.WriteMeta{Time: now, Actor: "tester"}, Deployment: testDeployment(id, "default", "job-"+id, 1, 0)})}
		if resp := f.Apply(l); resp != nil {
			t.Fatalf("create %s: %v", id, resp)
		}
		// Each notifies: pending approval.
		parts = append(parts, encode(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
			WriteMeta: structs.WriteMeta{Time: now, Actor: "tester"}, ID: id, To: structs.StatePendingApproval}))
	}
	l := &raft.Log{Index: 7, Term: 1, Type: raft.LogCommand, Data: structs.EncodeBatch(parts)}
	snap := persist(t, f)
	for name, apply := range bothPaths(l) {
		t.Run(name, func(t *testing.T) {
			f := newFSM(t)
			if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatal(err)
			}
			if resp := apply(f); !reflect.DeepEqual(resp, []any{nil, nil, nil}) {
				t.Fatalf("answer %#v, want three nils", resp)
			}
			it, err := f.State().db.Txn(false).Get(TableNotifications, "id")
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for raw := it.Next(); raw != nil; raw = it.Next() {
				if n := raw.(*structs.Notification); n.CreateIndex == 7 {
					ids = append(ids, n.ID)
				}
			}
			want := []string{structs.NotificationID(7, 0), structs.NotificationID(7, 1), structs.NotificationID(7, 2)}
			if !reflect.DeepEqual(ids, want) {
				t.Fatalf("notification IDs at index 7: %v, want %v", ids, want)
			}
		})
	}
}

// TestBatchEntry_OneCreatePerEntry: the create index orders deployments
// and is unique, so a batch entry that holds two deployment creates (the
// proposer never packs one) has the second refused, on every path, and
// every deployment stays listed.
func TestBatchEntry_OneCreatePerEntry(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var parts [][]byte
	for _, id := range []string{"d-1", "d-2"} {
		parts = append(parts, encodeEntry(t, structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
			WriteMeta: structs.WriteMeta{Time: now, Actor: "tester"}, Deployment: testDeployment(id, "default", "job-"+id, 1, 0)}))
	}
	l := &raft.Log{Index: 5, Term: 1, Type: raft.LogCommand, Data: structs.EncodeBatch(parts)}
	for name, apply := range bothPaths(l) {
		t.Run(name, func(t *testing.T) {
			f := newFSM(t)
			resp, ok := apply(f).([]any)
			if !ok || len(resp) != 2 || resp[0] != nil {
				t.Fatalf("answer %#v, want the first create applied", resp)
			}
			if err, ok := resp[1].(error); !ok || !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), "at most one deployment") {
				t.Fatalf("second create answered %v, want a refusal", resp[1])
			}
			list, _, err := f.State().Deployments(DeploymentFilter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].ID != "d-1" {
				t.Fatalf("deployments listed: %v, want d-1", list)
			}
		})
	}
}

// TestBatchEntry_SeenWhole: a reader sees a batch entry whole or not at
// all, even when a request in it is refused after it changed something and
// the entry is applied again without it: never some of its requests at the
// entry's index.
func TestBatchEntry_SeenWhole(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	encode := func(mt structs.MessageType, req any) []byte { return encodeEntry(t, mt, req) }
	meta := structs.WriteMeta{Time: now, Actor: "tester"}
	status := &raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: encode(structs.JobStatusUpsertRequestType,
		&structs.JobStatusUpsertRequest{WriteMeta: meta, Statuses: []*structs.JobStatus{{Namespace: "default", JobID: "web", Sync: structs.SyncDrift}}})}
	const windows = 300
	var parts [][]byte
	for i := range windows {
		parts = append(parts, encode(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: meta,
			Window: &structs.SyncWindow{Name: fmt.Sprintf("w-%03d", i), Kind: structs.WindowDeny, Schedule: "0 22 * * *", Duration: "8h"}}))
		if i == windows/2 {
			// Refused after a change: the first key is deleted, the
			// second is not a key.
			parts = append(parts, encode(structs.JobStatusDeleteRequestType,
				&structs.JobStatusDeleteRequest{WriteMeta: meta, Keys: []string{"default/web", "no-slash"}}))
		}
	}
	batch := &raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: structs.EncodeBatch(parts)}
	for name, apply := range map[string]func(f *FSM){
		"Apply":      func(f *FSM) { f.Apply(batch) },
		"ApplyBatch": func(f *FSM) { f.ApplyBatch([]*raft.Log{status, batch}) },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFSM(t)
			if name == "Apply" {
				f.Apply(status)
			}
			st := f.State()
			done := make(chan struct{})
			seen := make(chan string, 1)
			go func() {
				defer close(seen)
				for {
					txn := st.db.Txn(false)
					idx := readMeta(txn).LatestIndex
					n := 0
					it, err := txn.Get(TableWindows, "id")
					if err != nil {
						seen <- err.Error()
						return
					}
					for raw := it.Next(); raw != nil; raw = it.Next() {
						n++
					}
					if idx == 2 && n != windows || idx < 2 && n != 0 {
						seen <- fmt.Sprintf("index %d with %d windows", idx, n)
						return
					}
					select {
					case <-done:
						return
					default:
					}
				}
			}()
			apply(f)
			close(done)
			if bad, ok := <-seen; ok {
				t.Fatalf("a reader saw a part of the batch entry: %s", bad)
			}
			if idx := st.LatestIndex(); idx != 2 {
				t.Fatalf("latest index %d, want 2", idx)
			}
			raw, err := st.db.Txn(false).First(TableJobStatus, "id", structs.DefaultCluster, "default", "web")
			if err != nil || raw == nil {
				t.Fatalf("the refused request's change was kept out, yet the job status is gone: %v", err)
			}
		})
	}
}

// TestBatchEntry_Refused: a batch entry that does not read is refused
// whole and changes nothing but the latest index; a request in a batch
// that is refused (a batch inside it, a bad body) is answered with its
// error while the others apply.
func TestBatchEntry_Refused(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	window := encodeEntry(t, structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "tester"},
		Window:    &structs.SyncWindow{Name: "night", Kind: structs.WindowDeny, Schedule: "0 22 * * *", Duration: "8h"}})
	whole := structs.EncodeBatch([][]byte{window})
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", []byte{byte(structs.BatchRequestType)}},
		{"length past the end", append(whole[:len(whole):len(whole)], 5, 1)},
		{"cut short", whole[:len(whole)-1]},
		{"zero length", append(whole[:len(whole):len(whole)], 0)},
		{"bad varint", append(whole[:len(whole):len(whole)], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			before := h.dump()
			l := &raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: tc.data}
			for _, resp := range []any{h.fsm.Apply(l), h.fsm.ApplyBatch([]*raft.Log{l})[0]} {
				err, ok := resp.(error)
				if !ok || !errors.Is(err, ErrBadEntry) || !errors.Is(err, structs.ErrBadBatch) {
					t.Fatalf("answer %#v, want a refused batch entry", resp)
				}
			}
			if after := h.dump(); after != before {
				t.Fatalf("a refused batch entry changed the state:\n%s", after)
			}
			if idx := h.state().LatestIndex(); idx != 3 {
				t.Fatalf("latest index %d, want 3", idx)
			}
		})
	}
	t.Run("refused requests inside", func(t *testing.T) {
		data := structs.EncodeBatch([][]byte{whole, {byte(structs.PauseRequestType), 0xc1}, window})
		for name, apply := range bothPaths(&raft.Log{Index: 4, Term: 1, Type: raft.LogCommand, Data: data}) {
			h := newHarness(t)
			resp, ok := apply(h.fsm).([]any)
			if !ok || len(resp) != 3 {
				t.Fatalf("%s: answer %#v, want three answers", name, resp)
			}
			for i, want := range []string{"a batch entry inside a batch entry", "decode"} {
				if err, ok := resp[i].(error); !ok || !errors.Is(err, ErrBadEntry) || !strings.Contains(err.Error(), want) {
					t.Fatalf("%s: request %d answered %v, want a refusal naming %q", name, i+1, resp[i], want)
				}
			}
			if resp[2] != nil {
				t.Fatalf("%s: the window upsert answered %v", name, resp[2])
			}
			if raw, err := h.state().db.Txn(false).First(TableWindows, "id", "night"); err != nil || raw == nil {
				t.Fatalf("%s: the window of the batch was not stored: %v", name, err)
			} else if w := raw.(*structs.SyncWindow); w.ModifyIndex != 4 {
				t.Fatalf("%s: the window has index %d, want the entry's 4", name, w.ModifyIndex)
			}
		}
	})
}

// TestSetOnApply: the hook runs once as each batch of committed entries
// starts to apply, before the batch is visible.
func TestSetOnApply(t *testing.T) {
	logs := batchLog(t)
	f := newFSM(t)
	calls := 0
	f.SetOnApply(func() {
		calls++
		if idx := f.State().LatestIndex(); idx != uint64(3*(calls-1)) {
			t.Errorf("call %d saw index %d: the hook runs before its batch applies", calls, idx)
		}
	})
	for start := 0; start+3 <= len(logs); start += 3 {
		f.ApplyBatch(logs[start : start+3])
	}
	if want := len(logs) / 3; calls != want {
		t.Fatalf("hook called %d times for %d batches", calls, want)
	}
}
