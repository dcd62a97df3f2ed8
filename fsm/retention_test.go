package fsm

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/structs"
)

// finished creates a deployment and moves it to a terminal state.
func (h *harness) finished(id, job string, to structs.DeploymentState) {
	h.t.Helper()
	h.create(testDeployment(id, "default", job, 1, 0))
	h.mustTransition(id, to, nil)
}

// gc applies a retention pass and returns its result.
func (h *harness) gc(req structs.GCRequest) structs.GCResult {
	h.t.Helper()
	req.WriteMeta = h.meta("nops")
	if req.KeepPerJob == 0 {
		req.KeepPerJob = 1
	}
	if req.MaxDeployments == 0 {
		req.MaxDeployments = 1000
	}
	if req.MaxEvents == 0 {
		req.MaxEvents = 1000
	}
	if req.MaxScan == 0 {
		req.MaxScan = 1000
	}
	h.mustApply(structs.GCRequestType, &req)
	r, ok := h.resp.(*structs.GCResult)
	if !ok {
		h.t.Fatalf("gc answered %T, not a result", h.resp)
	}
	return *r
}

func (h *harness) ids() []string {
	h.t.Helper()
	ds, _, err := h.state().Deployments(DeploymentFilter{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return out
}

// TestGCNeverDeletes checks each rule of what retention keeps, one case
// each, and that what may go does go.
func TestGCNeverDeletes(t *testing.T) {
	far := 24 * time.Hour
	cases := []struct {
		name string
		// build makes the state; it returns the request's cut-off base
		// (the harness's clock after building).
		build func(h *harness)
		req   func(now time.Time) structs.GCRequest
		// keep lists the deployments left, sorted; specs lists those that
		// still hold a spec.
		keep, specs []string
		want        structs.GCResult
	}{
		{
			name: "old finished deployments beyond the newest go",
			build: func(h *harness) {
				h.finished("a1", "web", structs.StateCompleted)
				h.finished("a2", "web", structs.StateSuperseded)
				h.finished("a3", "web", structs.StateCompleted)
			},
			req:  func(now time.Time) structs.GCRequest { return structs.GCRequest{DeploymentsBefore: now.Add(far)} },
			keep: []string{"a3"}, specs: []string{"a3"},
			want: structs.GCResult{DeploymentsDeleted: 2},
		},
		{
			name: "never the newest deployment of a job, however old",
			build: func(h *harness) {
				h.finished("a1", "web", structs.StateCompleted)
				h.finished("b1", "api", structs.StateCompleted)
			},
			req:  func(now time.Time) structs.GCRequest { return structs.GCRequest{DeploymentsBefore: now.Add(far)} },
			keep: []string{"a1", "b1"}, specs: []string{"a1", "b1"},
		},
		{
			name: "never among the newest N",
			build: func(h *harness) {
				for _, id := range []string{"a1", "a2", "a3", "a4"} {
					h.finished(id, "web", structs.StateCompleted)
				}
			},
			req: func(now time.Time) structs.GCRequest {
				return structs.GCRequest{DeploymentsBefore: now.Add(far), KeepPerJob: 3}
			},
			keep: []string{"a2", "a3", "a4"}, specs: []string{"a2", "a3", "a4"},
			want: structs.GCResult{DeploymentsDeleted: 1},
		},
		{
			name: "never one younger than the age",
			build: func(h *harness) {
				h.finished("a1", "web", structs.StateCompleted)
				h.finished("a2", "web", structs.StateCompleted)
			},
			// a1 finished 2 s before the end of the build; the cut-off is
			// 10 s before it.
			req: func(now time.Time) structs.GCRequest {
				return structs.GCRequest{DeploymentsBefore: now.Add(-10 * time.Second)}
			},
			keep: []string{"a1", "a2"}, specs: []string{"a1", "a2"},
		},
		{
			name: "never an active deployment nor its spec",
			build: func(h *harness) {
				h.finished("a1", "web", structs.StateCompleted)
				h.create(testDeployment("a2", "default", "web", 1, 0))
				h.mustTransition("a2", structs.StatePreHook, nil)
			},
			req: func(now time.Time) structs.GCRequest {
				return structs.GCRequest{DeploymentsBefore: now.Add(far), SpecBefore: now.Add(far)}
			},
			keep: []string{"a2"}, specs: []string{"a2"},
			want: structs.GCResult{DeploymentsDeleted: 1},
		},
		{
			name: "never the deployment a block names, nor its spec",
			build: func(h *harness) {
				h.finished("a1", "web", structs.StateCompleted)
				h.finished("a2", "web", structs.StateFailed)
				h.finished("b1", "api", structs.StateCompleted)
			},
			req: func(now time.Time) structs.GCRequest {
				return structs.GCRequest{DeploymentsBefore: now.Add(far), SpecBefore: now.Add(far)}
			},
			keep: []string{"a2", "b1"}, specs: []string{"a2"},
			want: structs.GCResult{DeploymentsDeleted: 1, SpecsDropped: 1},
		},
		{
			name: "specs of finished deployments go after their age, the deployment stays",
			build: func(h *harness) {
				h.finished("a1", "web", structs.StateCompleted)
				h.finished("a2", "web", structs.StateSuperseded)
				h.finished("a3", "web", structs.StateCompleted)
			},
			req: func(now time.Time) structs.GCRequest {
				// a1 and a2 finished more than 2 s ago, a3 did not.
				return structs.GCRequest{SpecBefore: now.Add(-2 * time.Second)}
			},
			keep: []string{"a1", "a2", "a3"}, specs: []string{"a3"},
			want: structs.GCResult{SpecsDropped: 2},
		},
		{
			name: "a bound stops the pass and says there is more",
			build: func(h *harness) {
				for _, id := range []string{"a1", "a2", "a3", "a4"} {
					h.finished(id, "web", structs.StateCompleted)
				}
			},
			req: func(now time.Time) structs.GCRequest {
				return structs.GCRequest{DeploymentsBefore: now.Add(far), MaxDeployments: 2}
			},
			keep: []string{"a1", "a4"}, specs: []string{"a1", "a4"},
			want: structs.GCResult{DeploymentsDeleted: 2, More: true, NextJob: "default/web"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.build(h)
			h.mustApply(structs.WindowLiftRequestType, &structs.WindowLiftRequest{WriteMeta: h.meta("bob"), Namespace: "default", JobID: "web"})
			blocks, _ := h.state().Blocks()
			got := h.gc(tc.req(h.now))
			got.Index = 0
			if got != tc.want {
				t.Errorf("result = %+v, want %+v", got, tc.want)
			}
			if ids := h.ids(); !slices.Equal(ids, tc.keep) {
				t.Errorf("deployments left = %v, want %v", ids, tc.keep)
			}
			var specs []string
			for _, id := range h.ids() {
				d := h.deployment(id)
				if hasSpec(d) {
					specs = append(specs, id)
				} else if d.Diff == "" || len(d.Hooks) == 0 || d.Hooks[0].RevisionJobID == "" {
					t.Errorf("%s lost more than its specs: %+v", id, d)
				}
			}
			if !slices.Equal(specs, tc.specs) {
				t.Errorf("deployments with a spec = %v, want %v", specs, tc.specs)
			}
			// Blocks and deploy-now requests are never removed.
			if after, _ := h.state().Blocks(); len(after) != len(blocks) {
				t.Errorf("blocks went from %d to %d", len(blocks), len(after))
			}
			if l, _ := h.state().Lift("", "default", "web"); l == nil {
				t.Errorf("the deploy-now request is gone")
			}
		})
	}
}

// TestGCEvents_OldestFirstUpToCutOff checks that events go oldest first,
// only up to the first one at or after the cut-off, and that the events of
// an object stay readable.
func TestGCEvents_OldestFirstUpToCutOff(t *testing.T) {
	h := newHarness(t)
	h.finished("a1", "web", structs.StateCompleted) // events 1, 2
	cut := h.now.Add(500 * time.Millisecond)
	h.finished("a2", "web", structs.StateCompleted) // events 3, 4
	// An event stamped before the cut-off but appended after a newer one
	// (a leader whose clock is behind) stays: events go as a prefix.
	h.mustApply(structs.EventAppendRequestType, &structs.EventAppendRequest{
		WriteMeta: structs.WriteMeta{Time: cut.Add(-time.Hour), Actor: "engine"},
		Events:    []*structs.Event{{Kind: structs.EventKindDeployment, Object: "a1", Message: "late"}},
	})
	got := h.gc(structs.GCRequest{EventsBefore: cut})
	if got.EventsDeleted != 2 || got.More {
		t.Fatalf("result = %+v, want 2 events deleted", got)
	}
	evs := h.events()
	var seqs []uint64
	for _, e := range evs {
		seqs = append(seqs, e.Seq)
	}
	if !slices.Equal(seqs, []uint64{3, 4, 5}) {
		t.Fatalf("events left = %v, want 3, 4, 5", seqs)
	}
	a1, err := h.state().Events(EventFilter{Object: "a1"})
	if err != nil || len(a1) != 1 || a1[0].Message != "late" {
		t.Fatalf("events of a1 = %+v, %v; want the late one", a1, err)
	}
	if since, _ := h.state().Events(EventFilter{Since: cut}); len(since) != 2 {
		t.Fatalf("events since the cut-off = %d, want 2", len(since))
	}
	// A bound of one deletes one and says there is more.
	got = h.gc(structs.GCRequest{EventsBefore: h.now.Add(time.Hour), MaxEvents: 1})
	if got.EventsDeleted != 1 || !got.More {
		t.Fatalf("bounded result = %+v", got)
	}
	// The sequence goes on from where it was.
	h.finished("a3", "web", structs.StateCompleted)
	if evs := h.events(); evs[len(evs)-1].Seq != 7 {
		t.Fatalf("last event seq = %d, want 7", evs[len(evs)-1].Seq)
	}
}

// TestGCCursor_ResumesJobByJob checks that a pass bounded by the deployments
// it reads goes job by job, from the cursor of the last entry, and ends with
// every job done once.
func TestGCCursor_ResumesJobByJob(t *testing.T) {
	h := newHarness(t)
	for _, job := range []string{"a", "b", "c"} {
		h.finished(job+"1", job, structs.StateCompleted)
		h.finished(job+"2", job, structs.StateCompleted)
	}
	h.finished("c3", "c", structs.StateCompleted)
	far := h.now.Add(time.Hour)
	var cursors []string
	total := structs.GCResult{}
	from := ""
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatalf("the pass does not end: cursors %v", cursors)
		}
		// One deployment read per entry: each entry reads one whole job.
		got := h.gc(structs.GCRequest{DeploymentsBefore: far, MaxScan: 1, FromJob: from})
		total = total.Add(got)
		cursors = append(cursors, got.NextJob)
		if !got.More {
			break
		}
		from = got.NextJob
	}
	if !slices.Equal(cursors, []string{"default/b", "default/c", ""}) || total.DeploymentsDeleted != 4 {
		t.Fatalf("cursors %v, result %+v; want b, c, done and 4 deleted", cursors, total)
	}
	if ids := h.ids(); !slices.Equal(ids, []string{"a2", "b2", "c3"}) {
		t.Fatalf("deployments left = %v", ids)
	}
}

// TestGCRefusesBadRequests checks that a bad pass is refused and changes
// nothing.
func TestGCRefusesBadRequests(t *testing.T) {
	h := newHarness(t)
	h.finished("a1", "web", structs.StateCompleted)
	h.finished("a2", "web", structs.StateCompleted)
	far := h.now.Add(time.Hour)
	for _, req := range []structs.GCRequest{
		{DeploymentsBefore: far, KeepPerJob: 0, MaxDeployments: 10, MaxScan: 10, MaxEvents: 10},
		{DeploymentsBefore: far, KeepPerJob: -1, MaxDeployments: 10, MaxScan: 10, MaxEvents: 10},
		{DeploymentsBefore: far, KeepPerJob: 1, MaxDeployments: 0, MaxScan: 10, MaxEvents: 10},
		{EventsBefore: far, KeepPerJob: 1, MaxDeployments: 10, MaxScan: 10, MaxEvents: maxGCPerEntry + 1},
		{EventsBefore: far, KeepPerJob: 1, MaxDeployments: 10, MaxScan: 0, MaxEvents: 10},
		{DeploymentsBefore: far, KeepPerJob: 1, MaxDeployments: 10, MaxScan: 10, MaxEvents: 10, FromJob: "no-slash"},
	} {
		req.WriteMeta = h.meta("nops")
		h.refused(structs.ErrInvalid, []string{"retention"}, func() error { return h.apply(structs.GCRequestType, &req) })
	}
}

// TestGCDeterministic replays the log of a state with retention passes
// into a second FSM and through a snapshot: every copy holds the same
// state.
func TestGCDeterministic(t *testing.T) {
	h := newHarness(t)
	for i, job := range []string{"web", "api", "db", "web", "api", "web"} {
		h.finished(job+string(rune('a'+i)), job, structs.StateCompleted)
	}
	h.finished("wfail", "web", structs.StateFailed)
	h.gc(structs.GCRequest{SpecBefore: h.now, DeploymentsBefore: h.now, EventsBefore: h.now.Add(-5 * time.Second), KeepPerJob: 1})
	h.finished("dbz", "db", structs.StateCompleted)
	want := h.dump()

	replay, err := New(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	// Applied in one batch, as a follower may.
	replay.ApplyBatch(h.log)
	if got := dumpStore(t, replay.State(), TableMeta); got != want {
		t.Fatalf("replayed state differs:\n%s\nwant:\n%s", got, want)
	}
	restored := restore(t, persist(t, h.fsm))
	if got := dumpStore(t, restored.State(), TableMeta); got != want {
		t.Fatalf("restored state differs:\n%s\nwant:\n%s", got, want)
	}
	if len(h.ids()) != 4 {
		t.Fatalf("deployments left = %v, want the newest of each job and the blocked one", h.ids())
	}
}
