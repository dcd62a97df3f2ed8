package fsm

import (
	"bytes"
	"errors"
	"fmt"
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

// TestApplyBatch_SameAsOneByOne applies one log entry by entry and in
// batches of every size: the answers and the resulting state are the same,
// byte for byte.
func TestApplyBatch_SameAsOneByOne(t *testing.T) {
	logs := batchLog(t)
	single, err := New(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, l := range logs {
		want = append(want, single.Apply(l))
	}
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
		f, err := New(hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		var got []any
		for start := 0; start < len(logs); start += size {
			got = append(got, f.ApplyBatch(logs[start:min(start+size, len(logs))])...)
		}
		for i := range want {
			we, _ := want[i].(error)
			ge, _ := got[i].(error)
			if (we == nil) != (ge == nil) || (we != nil && we.Error() != ge.Error()) {
				t.Fatalf("batch size %d, entry %d: answer %v, want %v", size, i+1, got[i], want[i])
			}
			if we != nil && !errors.Is(ge, structs.ErrConflict) && !errors.Is(ge, structs.ErrInvalid) {
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

// packLog packs the requests of logs into batch entries of n requests each
// (a last, shorter one takes the rest), indexed from 1.
func packLog(logs []*raft.Log, n int) []*raft.Log {
	var out []*raft.Log
	for start := 0; start < len(logs); start += n {
		var parts [][]byte
		for _, l := range logs[start:min(start+n, len(logs))] {
			parts = append(parts, l.Data)
		}
		out = append(out, &raft.Log{Index: uint64(len(out) + 1), Term: 1, Type: raft.LogCommand, Data: structs.EncodeBatch(parts)})
	}
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
	it, err := txn.Get(TableDeployments, "id")
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
	single, err := New(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, l := range logs {
		want = append(want, single.Apply(l))
	}
	wantOutline := outline(t, single)
	if !strings.Contains(wantOutline, "notification") {
		t.Fatalf("the test log writes no notification:\n%s", wantOutline)
	}
	for pack := 2; pack <= len(logs); pack++ {
		packed := packLog(logs, pack)
		each, err := New(hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		var resps []any
		for _, l := range packed {
			resps = append(resps, each.Apply(l))
		}
		got := flatten(t, resps)
		if len(got) != len(want) {
			t.Fatalf("pack %d: %d answers for %d requests", pack, len(got), len(want))
		}
		for i := range want {
			we, _ := want[i].(error)
			ge, _ := got[i].(error)
			if (we == nil) != (ge == nil) || (we != nil && we.Error() != ge.Error()) {
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
			f, err := New(hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			var batched []any
			for start := 0; start < len(packed); start += size {
				batched = append(batched, f.ApplyBatch(packed[start:min(start+size, len(packed))])...)
			}
			for i, r := range flatten(t, batched) {
				ge, _ := r.(error)
				we, _ := got[i].(error)
				if (we == nil) != (ge == nil) || (we != nil && we.Error() != ge.Error()) {
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
	var parts [][]byte
	for _, id := range []string{"d-1", "d-2", "d-3"} {
		data, err := structs.Encode(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
			WriteMeta: structs.WriteMeta{Time: now, Actor: "tester"}, Deployment: testDeployment(id, "default", "job-"+id, 1, 0)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, data)
	}
	l := &raft.Log{Index: 7, Term: 1, Type: raft.LogCommand, Data: structs.EncodeBatch(parts)}
	for name, apply := range map[string]func(f *FSM) any{
		"Apply":      func(f *FSM) any { return f.Apply(l) },
		"ApplyBatch": func(f *FSM) any { return f.ApplyBatch([]*raft.Log{l})[0] },
	} {
		t.Run(name, func(t *testing.T) {
			f, err := New(hclog.NewNullLogger())
			if err != nil {
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
				n := raw.(*structs.Notification)
				ids = append(ids, n.ID)
				if n.CreateIndex != 7 {
					t.Errorf("notification %s has index %d, want the entry's 7", n.ID, n.CreateIndex)
				}
			}
			want := []string{structs.NotificationID(7, 0), structs.NotificationID(7, 1), structs.NotificationID(7, 2)}
			if !reflect.DeepEqual(ids, want) {
				t.Fatalf("notification IDs %v, want %v", ids, want)
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
	window, err := structs.Encode(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "tester"},
		Window:    &structs.SyncWindow{Name: "night", Kind: structs.WindowDeny, Schedule: "0 22 * * *", Duration: "8h"}})
	if err != nil {
		t.Fatal(err)
	}
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
		for name, apply := range map[string]func(f *FSM, l *raft.Log) any{
			"Apply":      func(f *FSM, l *raft.Log) any { return f.Apply(l) },
			"ApplyBatch": func(f *FSM, l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] },
		} {
			h := newHarness(t)
			resp, ok := apply(h.fsm, &raft.Log{Index: 4, Term: 1, Type: raft.LogCommand, Data: data}).([]any)
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
