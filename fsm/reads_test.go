package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
)

// TestIDReads_AnswerAsTheTransaction makes random changes in one write
// transaction, through the writer's insert, delete and deleteAll, to a
// table keyed by one field (windows) and one keyed by three (lifts:
// cluster, namespace, job). After
// each change, idReads answers every key of both tables exactly as the
// write transaction itself does.
func TestIDReads_AnswerAsTheTransaction(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			f := newFSM(t)
			db := f.State().db
			names := []string{"a", "b", "c", "d"}
			jobs := [][3]string{{"default", "default", "a"}, {"default", "default", "b"}, {"eu", "default", "a"}, {"default", "prod", "a"}}
			// A committed state to start from, so that some keys come
			// from the state before the transaction.
			seedTxn := db.Txn(true)
			for _, n := range names[:2] {
				if err := seedTxn.Insert(TableWindows, &structs.SyncWindow{Name: n, Kind: structs.WindowDeny, CreateIndex: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if err := seedTxn.Insert(TableLifts, &structs.WindowLift{Cluster: "default", Namespace: "default", JobID: "a", CreateIndex: 1}); err != nil {
				t.Fatal(err)
			}
			seedTxn.Commit()

			txn := db.Txn(true)
			defer txn.Abort()
			w := &writer{txn: txn, reads: newIDReads(db, txn)}
			check := func(step int, op string) {
				t.Helper()
				for _, n := range names {
					got, err := w.first(TableWindows, n)
					if err != nil {
						t.Fatal(err)
					}
					want, err := txn.First(TableWindows, "id", n)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) || (got != nil && got != want) {
						t.Fatalf("step %d (%s): window %s: idReads has %v, the transaction %v", step, op, n, got, want)
					}
				}
				for _, j := range jobs {
					got, err := w.first(TableLifts, j[0], j[1], j[2])
					if err != nil {
						t.Fatal(err)
					}
					want, err := txn.First(TableLifts, "id", j[0], j[1], j[2])
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("step %d (%s): lift %s: idReads has %v, the transaction %v", step, op, j, got, want)
					}
				}
			}
			check(0, "start")
			for step := 1; step <= 60; step++ {
				var op string
				switch rng.IntN(6) {
				case 0, 1:
					n := names[rng.IntN(len(names))]
					op = "insert window " + n
					if err := w.insert(TableWindows, &structs.SyncWindow{Name: n, Kind: structs.WindowAllow, CreateIndex: uint64(step)}); err != nil {
						t.Fatal(err)
					}
				case 2:
					n := names[rng.IntN(len(names))]
					op = "delete window " + n
					if raw, _ := txn.First(TableWindows, "id", n); raw != nil {
						if err := w.delete(TableWindows, raw); err != nil {
							t.Fatal(err)
						}
					}
				case 3:
					j := jobs[rng.IntN(len(jobs))]
					op = "insert lift " + structs.JobKey(j[0], j[1], j[2])
					if err := w.insert(TableLifts, &structs.WindowLift{Cluster: j[0], Namespace: j[1], JobID: j[2], CreateIndex: uint64(step)}); err != nil {
						t.Fatal(err)
					}
				case 4:
					j := jobs[rng.IntN(len(jobs))]
					op = "delete lift " + structs.JobKey(j[0], j[1], j[2])
					if raw, _ := txn.First(TableLifts, "id", j[0], j[1], j[2]); raw != nil {
						if err := w.delete(TableLifts, raw); err != nil {
							t.Fatal(err)
						}
					}
				case 5:
					// Rarer: after it, the table is read through the
					// transaction.
					if rng.IntN(4) != 0 {
						continue
					}
					n := names[rng.IntN(len(names))]
					op = "deleteAll window " + n
					if _, err := w.deleteAll(TableWindows, "id", n); err != nil {
						t.Fatal(err)
					}
				}
				check(step, op)
			}
		})
	}
}

// TestIDReads_BadTable: a lookup in a table the schema lacks is an error,
// as memdb's own is, and so is a lookup by primary key without a key, in a
// batch's reads and in the direct ones alike.
func TestIDReads_BadTable(t *testing.T) {
	f := newFSM(t)
	db := f.State().db
	txn := db.Txn(true)
	defer txn.Abort()
	w := &writer{txn: txn, reads: newIDReads(db, txn)}
	if err := w.insert(TableWindows, &structs.SyncWindow{Name: "a", Kind: structs.WindowDeny}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.first("no-such-table", "a"); err == nil {
		t.Fatal("a lookup in a table that does not exist gave no error")
	}
	if _, err := w.first(TableWindows); err == nil {
		t.Fatal("a lookup by primary key without a key gave no error")
	}
	// The same through the reads of a transaction of one request, which
	// go straight to memdb.
	d := &writer{txn: txn, reads: directReads(txn)}
	if _, err := d.first("no-such-table", "a"); err == nil {
		t.Fatal("a direct lookup in a table that does not exist gave no error")
	}
	if _, err := d.first(TableWindows); err == nil {
		t.Fatal("a direct lookup by primary key without a key gave no error")
	}
}

// windowsLog is a log whose entries write the same windows, job statuses
// and event lists again and again, so that a batch reads what an earlier
// entry of it wrote: a window replaced, deleted and created again, a job
// status deleted (deleteAll) and written again, and a retention pass that
// prunes events between writes that add to the same objects' event lists.
func windowsLog(t *testing.T) []*raft.Log {
	t.Helper()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var logs []*raft.Log
	add := func(mt structs.MessageType, req any) {
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: encodeEntry(t, mt, req)})
	}
	meta := func() structs.WriteMeta {
		now = now.Add(time.Minute)
		return structs.WriteMeta{Time: now, Actor: "tester"}
	}
	window := func(name, schedule string) {
		add(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: meta(), Window: &structs.SyncWindow{
			Name: name, Kind: structs.WindowDeny, Schedule: schedule, Duration: "1h"}})
	}
	status := func(job string) {
		add(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: meta(), Statuses: []*structs.JobStatus{
			{Namespace: "default", JobID: job, Sync: structs.SyncDrift}}})
	}
	window("w1", "0 22 * * *")
	window("w2", "0 23 * * *")
	// The retention entry below prunes the events of the two entries
	// above, and keeps the rest.
	pruneBefore := now.Add(30 * time.Second)
	window("w1", "0 21 * * *") // replaced: keeps the create index of the first
	add(structs.WindowDeleteRequestType, &structs.WindowDeleteRequest{WriteMeta: meta(), Name: "w1"})
	window("w1", "0 20 * * *") // created again
	// Refused, changing nothing.
	add(structs.WindowDeleteRequestType, &structs.WindowDeleteRequest{WriteMeta: meta(), Name: "w3"})
	status("a")
	status("b")
	add(structs.JobStatusDeleteRequestType, &structs.JobStatusDeleteRequest{WriteMeta: meta(), Keys: []string{"default/a"}})
	status("a")
	add(structs.GCRequestType, &structs.GCRequest{WriteMeta: meta(), KeepPerJob: 1, EventsBefore: pruneBefore,
		MaxDeployments: 10, MaxScan: 10, MaxEvents: 10})
	window("w2", "0 1 * * *")
	add(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: meta(), Namespace: "default", JobID: "a"})
	window("w1", "0 2 * * *")
	add(structs.WindowDeleteRequestType, &structs.WindowDeleteRequest{WriteMeta: meta(), Name: "w2"})
	window("w2", "0 3 * * *")
	// Created and replaced with nothing between: the replacement keeps
	// the create index.
	window("w4", "0 4 * * *")
	window("w4", "0 5 * * *")
	return logs
}

// TestApplyBatch_RereadsItsOwnWrites applies windowsLog entry by entry and
// in batches of every size: the answers and the state are the same, byte
// for byte, so every read a batch made of its own writes saw them.
func TestApplyBatch_RereadsItsOwnWrites(t *testing.T) {
	logs := windowsLog(t)
	single, want := applyEach(t, logs)
	refused := 0
	for _, r := range want {
		if r != nil && !isResult(r) {
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("want 1 refused entry in the test log, got %d: %v", refused, want)
	}
	gc, ok := want[10].(*structs.GCResult)
	if !ok || gc.EventsDeleted == 0 {
		t.Fatalf("the retention entry deleted no events: %#v", want[10])
	}
	w1, err := single.State().Window("w1")
	if err != nil || w1 == nil || w1.CreateIndex != 5 || w1.Schedule != "0 2 * * *" {
		t.Fatalf("window w1 after the log: %+v, %v; want the one created again at index 5", w1, err)
	}
	w4, err := single.State().Window("w4")
	if err != nil || w4 == nil || w4.CreateIndex != uint64(len(logs)-1) || w4.ModifyIndex != uint64(len(logs)) {
		t.Fatalf("window w4 after the log: %+v, %v; want it created by the entry before the last and replaced by the last", w4, err)
	}
	wantSnap := persist(t, single)
	for size := 2; size <= len(logs); size++ {
		f, got := applyInBatches(t, logs, size)
		for i := range want {
			if !sameAnswer(got[i], want[i]) && !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("batch size %d, entry %d: answer %v, want %v", size, i+1, got[i], want[i])
			}
		}
		if snap := persist(t, f); !bytes.Equal(snap, wantSnap) {
			t.Fatalf("batch size %d: state differs from the one-by-one state", size)
		}
	}
	// Packed into batch entries too (the requests of one entry share its
	// index, so the state is compared with the packed log applied alone).
	packed := packLog(logs, len(logs))
	alone, _ := applyEach(t, packed)
	batched, _ := applyInBatches(t, packed, len(packed))
	if !bytes.Equal(persist(t, alone), persist(t, batched)) {
		t.Fatal("packed log: batched state differs from the one-by-one state")
	}
}

// isResult reports whether an answer is a result rather than an error.
func isResult(r any) bool {
	_, isErr := r.(error)
	return !isErr
}

// TestStateStore_TracksNoMutations: the store's writes close no memdb watch
// channel (NewStateStore turns the tracking off), while Changed still
// announces each change.
func TestStateStore_TracksNoMutations(t *testing.T) {
	h := newHarness(t)
	db := h.state().db
	watch, _, err := db.Txn(false).FirstWatch(TableWindows, "id", "w1")
	if err != nil {
		t.Fatal(err)
	}
	changed := h.state().Changed()
	if err := h.apply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("tester"), Window: &structs.SyncWindow{
		Name: "w1", Kind: structs.WindowDeny, Schedule: "0 22 * * *", Duration: "1h"}}); err != nil {
		t.Fatal(err)
	}
	if w, err := h.state().Window("w1"); err != nil || w == nil {
		t.Fatalf("window w1 not written: %v, %v", w, err)
	}
	select {
	case <-watch:
		t.Fatal("a write closed a memdb watch channel: the store tracks mutations")
	default:
	}
	select {
	case <-changed:
	default:
		t.Fatal("Changed did not announce the write")
	}
}
