package fsm

import (
	"bytes"
	"errors"
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
