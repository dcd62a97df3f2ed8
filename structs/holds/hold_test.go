package holds

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

func jobPause(ns, job, actor, reason string) *structs.Pause {
	return &structs.Pause{Key: structs.JobKey("", ns, job), Namespace: ns, JobID: job, Actor: actor, Reason: reason}
}

func globalPause(actor, reason string) *structs.Pause {
	return &structs.Pause{Key: structs.GlobalPauseKey, Global: true, Actor: actor, Reason: reason}
}

func TestPaused(t *testing.T) {
	web := jobPause("default", "web", "ann", "db maintenance")
	webProd := jobPause("prod", "web", "ann", "prod freeze")
	all := globalPause("bob", "change freeze")
	cases := []struct {
		name    string
		pauses  []*structs.Pause
		ns, job string
		want    *structs.Pause
	}{
		{"no pauses", nil, "default", "web", nil},
		{"the job's own pause holds it", []*structs.Pause{web}, "default", "web", web},
		{"another job's pause does not", []*structs.Pause{web}, "default", "api", nil},
		{"a pause of the same job ID in another namespace does not", []*structs.Pause{webProd}, "default", "web", nil},
		{"the pause of every job holds any job", []*structs.Pause{all}, "other", "batch", all},
		{"the pause of every job wins over the job's own, listed after it", []*structs.Pause{web, all}, "default", "web", all},
		{"the pause of every job wins over the job's own, listed before it", []*structs.Pause{all, web}, "default", "web", all},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Paused(tc.pauses, "", tc.ns, tc.job); got != tc.want {
				t.Fatalf("Paused = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEvaluate(t *testing.T) {
	now := utc("2024-06-03T12:00:00Z") // Monday noon
	denyNow := window("lunch", structs.WindowDeny, "0 12 * * *", "1h", "")
	allowLater := window("nights", structs.WindowAllow, "0 22 * * *", "2h", "")
	allowNow := window("office", structs.WindowAllow, "0 9 * * 1-5", "8h", "")
	web := jobPause("default", "web", "ann", "db maintenance")
	all := globalPause("bob", "change freeze")

	cases := []struct {
		name       string
		pauses     []*structs.Pause
		windows    []*structs.SyncWindow
		lifted     bool
		wantHeld   bool
		wantPaused bool
		wantReason string
	}{
		{"nothing holds a job", nil, nil, false, false, false, ""},
		{"a job pause holds", []*structs.Pause{web}, nil, false, true, true, "paused by ann: db maintenance"},
		{"a global pause holds", []*structs.Pause{all}, nil, false, true, true, "paused (every job) by bob: change freeze"},
		{"an active deny window holds", nil, []*structs.SyncWindow{denyNow}, false, true, false, "sync window: deny window lunch is active"},
		{"an allow window not active holds", nil, []*structs.SyncWindow{allowLater}, false, true, false, "sync window: outside allow window nights"},
		{"an active allow window does not hold", nil, []*structs.SyncWindow{allowNow}, false, false, false, ""},
		{"deploy now lifts a closed window", nil, []*structs.SyncWindow{denyNow}, true, false, false,
			"sync window: deny window lunch is active (deploy now requested)"},
		{"deploy now does not lift a pause", []*structs.Pause{web}, nil, true, true, true, "paused by ann: db maintenance"},
		{"deploy now does not lift a pause in a closed window", []*structs.Pause{all}, []*structs.SyncWindow{denyNow}, true, true, true,
			"paused (every job) by bob: change freeze"},
		{"a pause is shown before a closed window", []*structs.Pause{web}, []*structs.SyncWindow{denyNow}, false, true, true,
			"paused by ann: db maintenance"},
		{"a lift with no closed window changes nothing", nil, []*structs.SyncWindow{allowNow}, true, false, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := Evaluate(tc.pauses, At(tc.windows, now), tc.lifted, "", "default", "web")
			if h.Held() != tc.wantHeld || h.Paused() != tc.wantPaused || h.Reason() != tc.wantReason {
				t.Fatalf("held %v paused %v reason %q, want held %v paused %v reason %q",
					h.Held(), h.Paused(), h.Reason(), tc.wantHeld, tc.wantPaused, tc.wantReason)
			}
		})
	}
}

func TestHoldWithLift(t *testing.T) {
	now := utc("2024-06-03T12:00:00Z")
	h := Evaluate(nil, At([]*structs.SyncWindow{window("lunch", structs.WindowDeny, "0 12 * * *", "1h", "")}, now), true, "", "default", "web")
	if h.Held() {
		t.Fatalf("a lifted closed window holds the job: %+v", h)
	}
	unlifted := h.WithLift(false)
	if !unlifted.Held() || unlifted.Reason() != "sync window: deny window lunch is active" {
		t.Fatalf("without the lift: held %v reason %q, want held with the window's reason", unlifted.Held(), unlifted.Reason())
	}
	if !h.Lifted {
		t.Fatalf("WithLift changed the hold it was called on")
	}
}

// benchWindows are five windows of the shapes operators write, in a zone
// with daylight saving time.
func benchWindows() []*structs.SyncWindow {
	var ws []*structs.SyncWindow
	for i, spec := range []string{"0 12 * * *", "0 22 * * *", "0 9 * * 1-5", "*/15 * * * *", "30 2 * * 0"} {
		ws = append(ws, &structs.SyncWindow{Name: string(rune('a' + i)), Kind: structs.WindowDeny, Schedule: spec,
			Duration: "1h", Timezone: "Europe/Paris"})
	}
	return ws
}

// BenchmarkHold_EvaluatePerWindowsEachTime is the cost of a job's hold
// when the windows are evaluated for each job, as before a cycle shared
// one Schedule.
func BenchmarkHold_EvaluatePerWindowsEachTime(b *testing.B) {
	ws, now := benchWindows(), time.Date(2024, time.June, 3, 12, 30, 0, 0, time.UTC)
	for b.Loop() {
		Evaluate(nil, At(ws, now), false, "", "default", "web")
	}
}

// BenchmarkHold_EvaluateWithSharedSchedule is the cost per job of a cycle:
// one Schedule for every job, then each job's hold and next boundary.
func BenchmarkHold_EvaluateWithSharedSchedule(b *testing.B) {
	ws, now := benchWindows(), time.Date(2024, time.June, 3, 12, 30, 0, 0, time.UTC)
	s := At(ws, now)
	for b.Loop() {
		Evaluate(nil, s, false, "", "default", "web")
		s.NextBoundaryFor("", "default", "web")
	}
}
