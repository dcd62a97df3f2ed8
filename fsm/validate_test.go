package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/fsm/snapcodec"
	"github.com/nops-dev/nops/structs"
)

// craft writes a snapshot of the given records, framed as writeSnapshot
// frames them, with a correct end record: only the state is wrong.
func craft(t testing.TB, records ...craftRecord) []byte {
	t.Helper()
	var out []byte
	h := structs.NewMsgpackHandle()
	frame := func(kind SnapshotType, body []byte) {
		var hdr [5]byte
		hdr[0] = byte(kind)
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(body)))
		out = append(append(out, hdr[:]...), body...)
	}
	for _, r := range records {
		body := r.raw
		if body == nil {
			var err error
			switch o := r.obj.(type) {
			case *structs.Event:
				body, err = snapcodec.AppendEvent(nil, o)
			case *structs.Deployment:
				body, err = snapcodec.AppendDeployment(nil, o)
			default:
				err = codec.NewEncoderBytes(&body, h).Encode(r.obj)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		frame(r.kind, body)
	}
	var end [8]byte
	binary.BigEndian.PutUint64(end[:], uint64(len(records)))
	frame(snapshotEnd, end[:])
	return pack(t, out)
}

// fixstr appends a msgpack string of under 32 bytes.
func fixstr(b []byte, s string) []byte {
	return append(append(b, 0xa0|byte(len(s))), s...)
}

type craftRecord struct {
	kind SnapshotType
	obj  any
	raw  []byte
}

func dep(id, job string, state structs.DeploymentState) craftRecord {
	return craftRecord{kind: DeploymentSnapshot, obj: &structs.Deployment{ID: id, Namespace: "default", JobID: job, State: state,
		CreatedAt: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)}}
}

// TestRestoreRefusesInvalidState checks that a snapshot whose state no
// sequence of log entries could build is refused, with the reason, and
// that a refused restore leaves the FSM's state as it was.
func TestRestoreRefusesInvalidState(t *testing.T) {
	at := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	meta := craftRecord{kind: MetaSnapshot, obj: &metaRow{Key: metaKey, LatestIndex: 10, EventSeq: 2}}
	ev := func(seq uint64) craftRecord {
		return craftRecord{kind: EventSnapshot, obj: &structs.Event{Seq: seq, Time: at, Kind: "job", Object: "default/web"}}
	}
	for _, tc := range []struct {
		name    string
		records []craftRecord
		want    string
	}{
		{"unknown deployment state", []craftRecord{meta, dep("d1", "web", "exploded")}, `state "exploded"`},
		{"two approved deployments for one job", []craftRecord{meta, dep("d1", "web", structs.StateApplying), dep("d2", "web", structs.StatePreHook)}, "two active deployments"},
		{"an active and a waiting deployment", []craftRecord{meta, dep("d1", "web", structs.StateDetected), dep("d2", "web", structs.StatePostHook)}, "two active deployments"},
		{"deployment twice", []craftRecord{meta, dep("d1", "web", structs.StateCompleted), dep("d1", "web", structs.StateCompleted)}, "repeated"},
		{"deployment without a job", []craftRecord{meta, {kind: DeploymentSnapshot, obj: &structs.Deployment{ID: "d1", State: structs.StateCompleted}}}, "restore deployments"},
		{"window of an unknown kind", []craftRecord{meta, {kind: WindowSnapshot, obj: &structs.SyncWindow{Name: "w", Kind: "sometimes"}}}, "kind must be allow or deny"},
		{"pause under another key", []craftRecord{meta, {kind: PauseSnapshot, obj: &structs.Pause{Key: "*", Namespace: "default", JobID: "web"}}}, "does not match"},
		{"counters twice", []craftRecord{meta, meta}, "repeated"},
		{"pause with a reason over the limit", []craftRecord{meta, {kind: PauseSnapshot, obj: &structs.Pause{Key: "*", Global: true, Reason: strings.Repeat("x", structs.MaxTextLen+1)}}}, "reason: at most 4096 characters"},
		{"decision with a comment over the limit", []craftRecord{meta, func() craftRecord {
			r := dep("d1", "web", structs.StateRejected)
			r.obj.(*structs.Deployment).Decisions = []structs.Decision{{Kind: structs.DecisionReject, Actor: "bob", Comment: strings.Repeat("x", structs.MaxTextLen+1), Time: at}}
			return r
		}()}, "comment: at most 4096 characters"},
		{"file diff over the limit", []craftRecord{meta, func() craftRecord {
			r := dep("d1", "web", structs.StateCompleted)
			r.obj.(*structs.Deployment).FileDiff = strings.Repeat("+x\n", structs.MaxFileDiffLen/3+1)
			return r
		}()}, "file_diff: at most 65536 bytes"},
		{"commit message over the limit", []craftRecord{meta, func() craftRecord {
			r := dep("d1", "web", structs.StateCompleted)
			r.obj.(*structs.Deployment).CommitMessage = strings.Repeat("x", structs.MaxTextLen+1)
			return r
		}()}, "commit_message: at most 4096 characters"},
		{"plan diff nested too deep", []craftRecord{meta, func() craftRecord {
			r := dep("d1", "web", structs.StateCompleted)
			o := structs.DiffObject{Name: "leaf"}
			for range structs.MaxDiffDepth {
				o = structs.DiffObject{Name: "block", Objects: []structs.DiffObject{o}}
			}
			r.obj.(*structs.Deployment).PlanDiff = &structs.PlanDiff{Objects: []structs.DiffObject{o}}
			return r
		}()}, "plan diff nested too deep"},
		{"deployment needing too many approvals", []craftRecord{meta, func() craftRecord {
			r := dep("d1", "web", structs.StatePendingApproval)
			r.obj.(*structs.Deployment).ApprovalsRequired = 1000
			return r
		}()}, "needs 1000 approvals, at most 100"},
		{"deployment with a negative approval TTL", []craftRecord{meta, func() craftRecord {
			r := dep("d1", "web", structs.StatePendingApproval)
			r.obj.(*structs.Deployment).ApprovalTTL = -time.Hour
			return r
		}()}, "may be negative"},
		{"events out of order", []craftRecord{meta, ev(2), ev(1)}, "strictly increasing"},
		{"event twice", []craftRecord{meta, ev(1), ev(1)}, "strictly increasing"},
		{"event past the counters", []craftRecord{meta, ev(1), ev(3)}, "outside 1..2"},
		{"event without counters", []craftRecord{ev(1)}, "outside 1..0"},
		{"event with a bool for a time", []craftRecord{meta, {kind: EventSnapshot, raw: []byte{0x92, 0x01, 0xc3}}}, "decode snapshot events record"},
		{"event with a nil time", []craftRecord{meta, {kind: EventSnapshot, raw: []byte{0x94, 0x01, 0xc0, 0xa1, 'j', 0xa1, 'o'}}}, "has no time"},
		{"deployment with a nil time", []craftRecord{meta, {kind: DeploymentSnapshot, obj: map[string]any{
			"id": "d1", "namespace": "default", "job_id": "web", "state": "completed", "created_at": nil}}}, "no creation time"},
		{"nil event", []craftRecord{meta, {kind: EventSnapshot, raw: []byte{0xc0}}}, "not an array"},
		// A record of a few bytes that claims 2^31 hooks.
		{"huge slice length", []craftRecord{meta, {kind: DeploymentSnapshot, raw: append([]byte{0x81, 0xa5, 'h', 'o', 'o', 'k', 's'}, 0xdd, 0x7f, 0xff, 0xff, 0xff)}}, "decode snapshot deployments record"},
		// The same, in a deployment written as an array: 16 nils, then the
		// hooks.
		{"huge slice length in an array", []craftRecord{meta, {kind: DeploymentSnapshot, raw: append(append([]byte{0xdc, 0x00, 0x11}, bytes.Repeat([]byte{0xc0}, 16)...), 0xdd, 0x7f, 0xff, 0xff, 0xff)}}, "array of 2147483647 elements"},
		// 60,000 hooks of one byte each (empty arrays): a hook as this
		// version writes it takes 9 bytes at least, and fields are only
		// ever added, so the record cannot hold that many.
		{"hooks of a byte each", []craftRecord{meta, {kind: DeploymentSnapshot, raw: append(append([]byte{0xdc, 0x00, 0x11}, bytes.Repeat([]byte{0xc0}, 16)...), append([]byte{0xdc, 0xea, 0x60}, bytes.Repeat([]byte{0x90}, 60000)...)...)}}, "list of 60000 elements of 9 bytes or more"},
		{"deployment array with a nil time", []craftRecord{meta, {kind: DeploymentSnapshot, raw: append(append([]byte{0x9f}, fixstr(fixstr(fixstr(nil, "d1"), "default"), "web")...), bytes.Repeat([]byte{0xc0}, 12)...)}}, "no creation time"},
		{"deployment array of a time out of range", []craftRecord{meta, func() craftRecord {
			r := dep("d1", "web", structs.StateCompleted)
			r.obj.(*structs.Deployment).UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			return r
		}()}, "a time the API cannot write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			populate(t, h)
			before := dumpStore(t, h.state())
			var m runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m)
			heap := m.HeapAlloc
			snap := craft(t, tc.records...)
			_, err := ReadOnly(bytes.NewReader(snap))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read of the snapshot: %v, want an error saying %q", err, tc.want)
			}
			err = h.fsm.Restore(io.NopCloser(bytes.NewReader(snap)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v, want an error saying %q", err, tc.want)
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > heap+64<<20 {
				t.Fatalf("a %d-byte snapshot grew the heap by %d MB", len(snap), (m.HeapAlloc-heap)>>20)
			}
			if after := dumpStore(t, h.state()); after != before {
				t.Fatalf("a refused restore changed the state")
			}
		})
	}

	// The same rules let a valid state through.
	snap := craft(t, meta, dep("d1", "web", structs.StateCompleted), dep("d2", "web", structs.StateApplying),
		dep("d3", "api", structs.StatePendingApproval), ev(1), ev(2),
		craftRecord{kind: PauseSnapshot, obj: &structs.Pause{Key: "*", Global: true}},
		craftRecord{kind: PauseSnapshot, obj: &structs.Pause{Key: "default/web", Namespace: "default", JobID: "web"}})
	st, err := ReadOnly(bytes.NewReader(snap))
	if err != nil {
		t.Fatalf("a valid state was refused: %v", err)
	}
	if d, _ := st.ActiveDeployment("", "default", "web"); d == nil || d.ID != "d2" {
		t.Fatalf("active deployment of web = %v, want d2", d)
	}
	if !errors.Is(validWindow(&structs.SyncWindow{Name: "w"}), structs.ErrInvalid) {
		t.Fatalf("the window rule does not wrap ErrInvalid")
	}
}
