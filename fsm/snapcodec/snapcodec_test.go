package snapcodec

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/structs"
)

// TestEventRecordForwardCompatible checks that an event record with
// fields this version does not know is read, and one with fewer fields
// leaves the rest at zero.
func TestEventRecordForwardCompatible(t *testing.T) {
	at := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	e := &structs.Event{Seq: 7, Time: at, Kind: "job", Object: "default/web", Namespace: "default", JobID: "web",
		From: "a", To: "b", Actor: "alice", Message: "m", Index: 9}
	h := structs.NewMsgpackHandle()
	body, err := AppendEvent(nil, e)
	if err != nil {
		t.Fatal(err)
	}
	longer := append([]byte{0x9d}, body[1:]...) // an array of 13
	longer = append(longer, 0xa3, 'n', 'e', 'w', 0x2a)
	var tb []byte
	if err := codec.NewEncoderBytes(&tb, h).Encode(at); err != nil {
		t.Fatal(err)
	}
	shorter := append([]byte{0x92, 0x07}, tb...) // [seq, time]

	for _, tc := range []struct {
		name string
		body []byte
		want structs.Event
	}{
		{"same", body, *e},
		{"longer", longer, *e},
		{"shorter", shorter, structs.Event{Seq: 7, Time: at}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got structs.Event
			if err := DecodeEvent(&Reader{b: tc.body}, &got); err != nil {
				t.Fatal(err)
			}
			got.Time = got.Time.UTC()
			if got != tc.want {
				t.Fatalf("decoded %+v, want %+v", got, tc.want)
			}
		})
	}
	for name, b := range map[string][]byte{
		"nil":        {0xc0},
		"empty":      {},
		"string seq": {0x92, 0xa1, 'x'},
		"nil time":   {0x92, 0x07, 0xc0 + 0x04}, // a bool where the time goes
	} {
		if err := DecodeEvent(&Reader{b: b}, &structs.Event{}); err == nil {
			t.Errorf("%s: an event that does not decode was read", name)
		}
	}
}

// TestSnapshotCodecCoversEveryField fails when a field is added to a struct
// that AppendDeployment or AppendEvent writes by hand: the field must be
// added there, at the end, and to populate, which shows it round-trips. A
// field the codec never writes (codec:"-", a view for the API) is not
// stored, so not counted.
func TestSnapshotCodecCoversEveryField(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{
		{structs.Deployment{}, deploymentFields},
		{structs.FrozenHook{}, frozenHookFields},
		{structs.HookRun{}, hookRunFields},
		{structs.Decision{}, decisionFields},
		{structs.Event{}, eventFields},
		{structs.PlanDiff{}, planDiffFields},
		{structs.GroupDiff{}, groupDiffFields},
		{structs.TaskDiff{}, taskDiffFields},
		{structs.DiffObject{}, diffObjectFields},
		{structs.DiffField{}, diffFieldFields},
	} {
		typ := reflect.TypeOf(c.v)
		n := 0
		for i := range typ.NumField() {
			if typ.Field(i).Tag.Get("codec") != "-" {
				n++
			}
		}
		if n != c.want {
			t.Errorf("%s has %d fields, and the snapshot writes %d: add the new ones to fsm/snapcodec/snapcodec.go", typ, n, c.want)
		}
	}
	// Each array holds as many values as its struct has fields.
	d := &structs.Deployment{Hooks: []structs.FrozenHook{{}}, HookRuns: []structs.HookRun{{}}, Decisions: []structs.Decision{{}}}
	b, err := AppendDeployment(nil, d)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reader{b: b}
	if n, _ := r.arrayLen(); n != deploymentFields {
		t.Errorf("deployment array of %d", n)
	}
	for i := 0; i < 16; i++ {
		if err := r.skip(0); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{frozenHookFields, hookRunFields, decisionFields} {
		if n, _ := r.arrayLen(); n != 1 {
			t.Fatalf("list of %d", n)
		}
		if n, _ := r.arrayLen(); n != want {
			t.Errorf("element array of %d, want %d", n, want)
		}
		for i := 0; i < want; i++ {
			if err := r.skip(0); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, _ = AppendEvent(nil, &structs.Event{})
	if n, _ := (&Reader{b: b}).arrayLen(); n != eventFields {
		t.Errorf("event array of %d", n)
	}
}

// TestDeploymentRecordWithoutCommitContext reads a deployment written
// before the commit context was recorded (an array of the 32 fields it
// had then): it restores with the new fields empty. Written again, it
// round-trips with them.
func TestDeploymentRecordWithoutCommitContext(t *testing.T) {
	at := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	d := &structs.Deployment{ID: "d1", Namespace: "default", JobID: "web", Commit: "abc", State: structs.StateCompleted,
		CreatedAt: at, UpdatedAt: at, StateEnteredAt: at, CreateIndex: 3, ModifyIndex: 4,
		CommitMessage: "Bump web to v2\n\nbody", CommitAuthor: "Ops <ops@example.com>", CommitTime: at.Add(-time.Hour),
		CommitURL: "https://git.example.com/ops/jobs/commit/abc", FileDiff: "@@ -1 +1 @@\n-a\n+b\n"}
	full, err := AppendDeployment(nil, d)
	if err != nil {
		t.Fatal(err)
	}
	read := func(b []byte) structs.Deployment {
		t.Helper()
		var got structs.Deployment
		r := NewReader()
		r.Reset(b)
		if err := DecodeDeployment(r, &got); err != nil {
			t.Fatal(err)
		}
		r.Done()
		return got
	}
	got := read(full)
	if got.CommitMessage != d.CommitMessage || got.CommitAuthor != d.CommitAuthor || !got.CommitTime.Equal(d.CommitTime) ||
		got.CommitURL != d.CommitURL || got.FileDiff != d.FileDiff {
		t.Fatalf("round trip: %+v", got)
	}
	// The same record as the version before wrote it: the first 32
	// fields, in an array of 32.
	r := &Reader{b: full}
	if _, err := r.arrayLen(); err != nil {
		t.Fatal(err)
	}
	start := r.i
	for i := 0; i < 32; i++ {
		if err := r.skip(0); err != nil {
			t.Fatal(err)
		}
	}
	old := append([]byte{0xdc, 0x00, 32}, full[start:r.i]...)
	got = read(old)
	if got.CommitMessage != "" || got.CommitAuthor != "" || !got.CommitTime.IsZero() || got.CommitURL != "" || got.FileDiff != "" {
		t.Fatalf("an old record has a commit context: %+v", got)
	}
	if got.ID != "d1" || got.ModifyIndex != 4 || !got.CreatedAt.Equal(at) {
		t.Fatalf("an old record lost its fields: %+v", got)
	}
}

// TestPlanDiffRoundTrip writes a deployment's plan diff tree and reads it
// back equal, nil slices and empty ones kept apart; a tree nested deeper
// than structs.MaxDiffDepth is refused, and a nil tree stays nil.
func TestPlanDiffRoundTrip(t *testing.T) {
	field := structs.DiffField{Type: structs.DiffEdited, Name: "Env[LEVEL]", Old: "info", New: "debug", Annotations: []string{"forces in-place update"}}
	p := &structs.PlanDiff{Type: structs.DiffEdited, ID: "web", Fields: []structs.DiffField{field}, Objects: []structs.DiffObject{},
		Groups: []structs.GroupDiff{{Type: structs.DiffEdited, Name: "web", Updates: []string{"1 create/destroy update"},
			Objects: []structs.DiffObject{{Type: structs.DiffAdded, Name: "Update", Fields: []structs.DiffField{{Type: structs.DiffAdded, Name: "Canary", New: "1"}},
				Objects: []structs.DiffObject{{Type: structs.DiffAdded, Name: "Inner"}}}},
			Tasks: []structs.TaskDiff{{Type: structs.DiffEdited, Name: "web", Annotations: []string{"forces create/destroy update"},
				Fields: []structs.DiffField{field}}, {Type: structs.DiffAdded, Name: "sidecar"}}}}}
	for name, in := range map[string]*structs.PlanDiff{"tree": p, "nil": nil, "empty": {}} {
		b, err := AppendDeployment(nil, &structs.Deployment{ID: "d", PlanDiff: in})
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader()
		r.Reset(b)
		var got structs.Deployment
		if err := DecodeDeployment(r, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r.Done()
		if !reflect.DeepEqual(got.PlanDiff, in) {
			t.Errorf("%s: read back %+v, want %+v", name, got.PlanDiff, in)
		}
		again, _ := AppendDeployment(nil, &got)
		if string(again) != string(b) {
			t.Errorf("%s: the value read back writes other bytes", name)
		}
	}

	// The deepest tree allowed, as nomadx cuts one (nil below its last
	// blocks), reads back.
	deepest := structs.DiffObject{Name: "leaf"}
	for range structs.MaxDiffDepth - 1 {
		deepest = structs.DiffObject{Name: "block", Objects: []structs.DiffObject{deepest}}
	}
	tree := &structs.PlanDiff{Objects: []structs.DiffObject{deepest}}
	if n := tree.Depth(); n != structs.MaxDiffDepth {
		t.Fatalf("the deepest tree is %d deep, want %d", n, structs.MaxDiffDepth)
	}
	b, _ := AppendDeployment(nil, &structs.Deployment{ID: "d", PlanDiff: tree})
	var got structs.Deployment
	if err := DecodeDeployment(&Reader{b: b}, &got); err != nil || !reflect.DeepEqual(got.PlanDiff, tree) {
		t.Errorf("a tree %d deep did not read back: %v", structs.MaxDiffDepth, err)
	}

	deep := deepest
	deep = structs.DiffObject{Name: "block", Objects: []structs.DiffObject{deep}}
	b, _ = AppendDeployment(nil, &structs.Deployment{ID: "d", PlanDiff: &structs.PlanDiff{Objects: []structs.DiffObject{deep}}})
	if err := DecodeDeployment(&Reader{b: b}, &structs.Deployment{}); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Errorf("a tree nested %d deep was read: %v", structs.MaxDiffDepth+1, err)
	}
}
