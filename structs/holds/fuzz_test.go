package holds

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

// FuzzWindowSpec validates arbitrary window specs: never a panic; a window
// that validates compiles, answers Active at any time and gives a next
// boundary after now (or none), in bounded time.
func FuzzWindowSpec(f *testing.F) {
	f.Add("nights", "deny", "0 22 * * *", "8h", "Europe/Berlin", "default", "web-*", int64(1700000000))
	f.Add("weekdays", "allow", "0 9 * * 1-5", "8h", "", "*", "*", int64(0))
	f.Add("x", "deny", "*/1 * * * *", "1m", "America/New_York", "[", "", int64(-62135596800))
	f.Add("leap", "allow", "0 0 29 2 *", "24h", "UTC", "", "", int64(253402300799))
	f.Add("bad", "maybe", "@every 1h", "-1h", "Local", "", "", int64(1))
	f.Fuzz(func(t *testing.T, name, kind, schedule, duration, tz, ns, job string, unix int64) {
		w := &structs.SyncWindow{Name: name, Kind: structs.WindowKind(kind), Schedule: schedule, Duration: duration, Timezone: tz}
		if ns != "" {
			w.Namespaces = []string{ns}
		}
		if job != "" {
			w.Jobs = []string{job}
		}
		problems := Validate(w)
		// Keep the instant within the years Go and cron handle.
		now := time.Unix(unix%(1<<35), 0).UTC()
		start := time.Now()
		active, err := Active(w, now)
		if len(problems) == 0 && err != nil {
			t.Fatalf("a window that validates does not compile: %v", err)
		}
		_ = active
		_ = Matches(w, "", "default", "web-1")
		closed, reason := Closed([]*structs.SyncWindow{w}, "default", "web-1", now)
		if closed && reason == "" {
			t.Fatalf("closed without a reason")
		}
		if next := NextBoundary([]*structs.SyncWindow{w}, now); !next.IsZero() && !next.After(now) {
			t.Fatalf("next boundary %s is not after %s", next, now)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a window took %s to evaluate", d)
		}
	})
}
