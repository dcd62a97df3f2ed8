package gctune

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestTargetPercent(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name          string
		minHeap, live uint64
		base, want    int
	}{
		{"small heap reaches the floor", 128 * mib, 32 * mib, 100, 300},
		{"rounded down", 128 * mib, 30 * mib, 100, 326},
		{"half the floor collects as GOGC says", 128 * mib, 64 * mib, 100, 100},
		{"between half and the floor", 128 * mib, 100 * mib, 100, 100},
		{"above the floor", 128 * mib, 1 << 30, 100, 100},
		{"tiny heap stops at the bound", 128 * mib, 1 * mib, 100, maxPercent},
		{"no collection yet", 128 * mib, 0, 100, maxPercent},
		{"a higher GOGC is kept", 128 * mib, 60 * mib, 200, 200},
		{"a higher GOGC above the bound is kept", 128 * mib, 1 * mib, 800, 800},
		{"a lower GOGC is raised to the floor", 128 * mib, 64 * mib, 50, 100},
		{"a lower GOGC stays on a large heap", 128 * mib, 1 << 30, 50, 50},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := targetPercent(c.minHeap, c.live, c.base); got != c.want {
				t.Fatalf("targetPercent(%d, %d, %d) = %d, want %d", c.minHeap, c.live, c.base, got, c.want)
			}
		})
	}
}

// The tests below change the process's GOGC: none runs in parallel, and
// each gives the process its GOGC back.

func TestStart_RaisesGOGCAfterEachCollectionAndStopRestores(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// A floor far above this test binary's live heap (a few MB).
	tu := Start(1<<30, hclog.NewNullLogger())
	if tu == nil {
		t.Fatal("Start returned no tuner")
	}
	defer tu.Stop()
	if got := currentPercent(); got != maxPercent {
		t.Fatalf("GOGC after Start = %d, want %d (a small live heap)", got, maxPercent)
	}
	// Another party sets GOGC back; a later collection tunes it again,
	// and again: the tuner arms itself anew each time it runs.
	for range 3 {
		debug.SetGCPercent(100)
		waitPercent(t, maxPercent)
	}
	tu.Stop()
	if got := currentPercent(); got != 100 {
		t.Fatalf("GOGC after Stop = %d, want the 100 it started from", got)
	}
	// A stopped tuner no longer tunes.
	for range 3 {
		runtime.GC()
	}
	time.Sleep(50 * time.Millisecond)
	if got := currentPercent(); got != 100 {
		t.Fatalf("GOGC after collections of a stopped tuner = %d, want 100", got)
	}
	tu.Stop() // a second Stop is harmless
}

func TestStart_LargeLiveHeapKeepsGOGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// A live heap of at least 8 MiB, above a 4 MiB floor.
	live := make([][]byte, 8)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	tu := Start(4<<20, hclog.NewNullLogger())
	defer tu.Stop()
	for range 3 {
		runtime.GC()
	}
	time.Sleep(50 * time.Millisecond)
	if got := currentPercent(); got != 100 {
		t.Fatalf("GOGC with a live heap above the floor = %d, want 100", got)
	}
	runtime.KeepAlive(live)
}

func TestStart_OffOrZeroChangesNothing(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if tu := Start(0, hclog.NewNullLogger()); tu != nil {
		t.Fatal("Start(0) returned a tuner")
	}
	if got := currentPercent(); got != 100 {
		t.Fatalf("GOGC after Start(0) = %d, want 100", got)
	}
	debug.SetGCPercent(-1)
	if got := currentPercent(); got != -1 {
		t.Fatalf("currentPercent() with GOGC off = %d, want -1", got)
	}
	if tu := Start(1<<30, hclog.NewNullLogger()); tu != nil {
		t.Fatal("Start with GOGC off returned a tuner")
	}
	if got := currentPercent(); got != -1 {
		t.Fatalf("GOGC off became %d", got)
	}
	var nilTuner *Tuner
	nilTuner.Stop() // safe on the nil Start returns
}

// waitPercent runs collections until GOGC is want (the tuner runs just
// after a collection, on the cleanup goroutine).
func waitPercent(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for currentPercent() != want {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC = %d after collections, want %d", currentPercent(), want)
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}
