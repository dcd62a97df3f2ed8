package testutil

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// TestClosedSchedule: an 11-hour deny window on the schedule is closed now
// and for the next 11 hours at least.
func TestClosedSchedule(t *testing.T) {
	w := &structs.SyncWindow{Name: "closed", Kind: structs.WindowDeny, Schedule: ClosedSchedule(), Duration: "11h"}
	if problems := holds.Validate(w); len(problems) > 0 {
		t.Fatalf("schedule %q: %v", w.Schedule, problems)
	}
	now := time.Now()
	for d := time.Duration(0); d <= 11*time.Hour; d += 10 * time.Minute {
		active, err := holds.Active(w, now.Add(d))
		if err != nil {
			t.Fatal(err)
		}
		if active {
			t.Fatalf("window on %q is open %s from now", w.Schedule, d)
		}
	}
}
