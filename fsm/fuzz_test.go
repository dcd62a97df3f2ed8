package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
)

// fuzzEntrySeeds are well-formed entries of every kind the FSM applies,
// for the fuzzer to start from.
func fuzzEntrySeeds(t testing.TB) [][]byte {
	h := newHarness(t)
	d := testDeployment("d1", "default", "web", 1, 1)
	var out [][]byte
	add := func(mt structs.MessageType, req any) {
		b, err := structs.Encode(mt, req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	add(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h.meta("a"), Deployment: d})
	add(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: h.meta("a"), ID: "d0", To: structs.StateApplying})
	add(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: h.meta("a"), ID: "d0", Decision: structs.DecisionApprove})
	add(structs.PauseRequestType, &structs.PauseRequest{WriteMeta: h.meta("a"), Namespace: "default", JobID: "web"})
	add(structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: h.meta("a"), Global: true})
	add(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("a"),
		Window: &structs.SyncWindow{Name: "w", Kind: structs.WindowDeny, Schedule: "0 22 * * *", Duration: "8h"}})
	add(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: h.meta("a"),
		Statuses: []*structs.JobStatus{{Namespace: "default", JobID: "web", Sync: structs.SyncDrift}}})
	add(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: h.meta("a"), Repos: []*structs.RepoStatus{{Name: "r"}}})
	add(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: h.meta("a"), Events: []*structs.Event{{Kind: "job", Object: "o"}}})
	out = append(out, []byte{byte(structs.PauseRequestType), 0xc1}, []byte{99, 0x80}, []byte{byte(structs.DeploymentCreateRequestType), 0xdd, 0x7f, 0xff, 0xff, 0xff})
	// Batch entries: of the requests above, and one holding a batch.
	out = append(out, structs.EncodeBatch(out[:3]), structs.EncodeBatch([][]byte{out[5], structs.EncodeBatch(out[6:8])}))
	return out
}

// fuzzBase returns an FSM with a little of everything, for entries to
// apply to.
func fuzzBase(t testing.TB) *harness {
	h := newHarness(t)
	h.create(testDeployment("d0", "default", "api", 0, 0))
	h.mustApply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: h.meta("a"),
		Window: &structs.SyncWindow{Name: "w0", Kind: structs.WindowAllow, Schedule: "0 6 * * *", Duration: "2h"}})
	return h
}

// FuzzApplyEntry decodes and applies arbitrary log entries: the FSM never
// panics (not even a panic it recovers from), two servers applying the same
// entry end in the same state, a refused entry changes nothing but the
// latest index, and the state a snapshot writes afterwards restores.
func FuzzApplyEntry(f *testing.F) {
	for _, s := range fuzzEntrySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		// An entry that makes the FSM spin is a crash too: the fuzzer
		// reports a panic, and has no time limit of its own.
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				panic(fmt.Sprintf("HANG on %x", data))
			}
		}()
		a, b := fuzzBase(t), fuzzBase(t)
		before := dumpStore(t, a.state(), TableMeta)
		l := &raft.Log{Index: 1000, Term: 1, Type: raft.LogCommand, Data: data}
		resp := a.fsm.Apply(l)
		b.fsm.ApplyBatch([]*raft.Log{l})
		// A batch entry answers with the list of its requests' answers.
		answers := []any{resp}
		if list, ok := resp.([]any); ok {
			answers = list
		}
		refused := 0
		for _, resp := range answers {
			if err, ok := resp.(error); ok {
				if strings.Contains(err.Error(), "panic") {
					t.Fatalf("applying %x panicked: %v", data, err)
				}
				if errors.Is(err, ErrBadEntry) {
					refused++
				}
			} else if resp != nil {
				t.Fatalf("response %T, want nil or an error", resp)
			}
		}
		if refused == len(answers) {
			if after := dumpStore(t, a.state(), TableMeta); after != before {
				t.Fatalf("a refused entry changed the state")
			}
		}
		if a.state().LatestIndex() != 1000 {
			t.Fatalf("latest index %d after the entry", a.state().LatestIndex())
		}
		if da, db := dumpStore(t, a.state()), dumpStore(t, b.state()); da != db {
			t.Fatalf("Apply and ApplyBatch of %x disagree:\n%s\n%s", data, da, db)
		}
		// Whatever the log accepts, a snapshot of it restores: the
		// restore checks are the rules the entries are held to.
		if _, err := ReadOnly(bytes.NewReader(persist(t, a.fsm))); err != nil {
			t.Fatalf("the state after %x does not restore: %v", data, err)
		}
	})
}

// FuzzRestore restores arbitrary snapshots: never a panic; a snapshot that
// is accepted writes back a snapshot that restores to the same state.
func FuzzRestore(f *testing.F) {
	h := fuzzBase(f)
	f.Add(persist(f, h.fsm))
	f.Add(persist(f, newHarness(f).fsm))
	f.Add(snapshotMagic[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		// A small limit, far above the seeds' states: a few bytes of
		// compressed input can expand to any size, and each run would
		// decompress up to the limit.
		st, err := ReadOnlyLimited(bytes.NewReader(data), 4<<20)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := writeSnapshot(st.db.Txn(false), &buf); err != nil {
			t.Fatalf("an accepted snapshot cannot be written back: %v", err)
		}
		again, err := ReadOnly(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("a snapshot written from an accepted one is refused: %v", err)
		}
		if a, b := dumpStore(t, st), dumpStore(t, again); a != b {
			t.Fatalf("the state changed over a round trip:\n%s\n%s", a, b)
		}
	})
}
