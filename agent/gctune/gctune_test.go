package gctune

import (
	"errors"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
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

func TestCollectionRate(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name   string
		allocs uint64
		d      time.Duration
		live   uint64
		base   int
		want   float64
	}{
		{"twice the growth in a second", 64 * mib, time.Second, 32 * mib, 100, 2},
		{"over two seconds", 64 * mib, 2 * time.Second, 32 * mib, 100, 1},
		{"GOGC 50 grows half as much", 64 * mib, time.Second, 32 * mib, 50, 4},
		{"a tiny heap grows by the runtime's least goal", 8 * mib, time.Second, 1 * mib, 100, 2},
		{"no collection yet", 8 * mib, time.Second, 0, 100, 2},
		{"no time", 8 * mib, 0, 32 * mib, 100, 0},
		{"nothing allocated", 0, time.Second, 32 * mib, 100, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := collectionRate(c.allocs, c.d, c.live, c.base); got != c.want {
				t.Fatalf("collectionRate(%d, %s, %d, %d) = %v, want %v", c.allocs, c.d, c.live, c.base, got, c.want)
			}
		})
	}
}

// The tests below change the process's GOGC: none runs in parallel, and
// each gives the process its GOGC back.

// sink keeps allocations from being optimized away.
var sink []byte

// allocate allocates fast (hundreds of MB a second, far over heavyRate
// collections a second for this test binary's few MB of live heap) until
// stop is closed.
func allocate(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		for range 64 {
			sink = make([]byte, 64<<10)
		}
	}
}

func TestStart_FloorOnlyWhileAllocationIsHeavy(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// The heap allocations of the tests before this one, some of which
	// the runtime counts only when a collection flushes its per-thread
	// caches: counted now, not within the first check's 20ms.
	runtime.GC()
	// A floor far above this test binary's live heap (a few MB), a check
	// every 20ms and a quiet window of 300ms.
	tu := start(1<<30, hclog.NewNullLogger(), timings{every: 20 * time.Millisecond, quiet: 300 * time.Millisecond, release: time.Minute, minReturn: minReturn, releaser: noRelease})
	if tu == nil {
		t.Fatal("start returned no tuner")
	}
	defer tu.Stop()
	// Light allocation: the process's own GOGC, even after collections.
	for range 3 {
		runtime.GC()
	}
	time.Sleep(100 * time.Millisecond)
	if got := currentPercent(); got != 100 {
		t.Fatalf("GOGC while idle = %d, want the process's 100", got)
	}
	// Heavy allocation: the floor, re-applied after each collection when
	// another party sets GOGC back.
	stopAllocating := allocateInBackground()
	waitPercent(t, maxPercent)
	debug.SetGCPercent(100)
	waitPercent(t, maxPercent)
	stopAllocating()
	// Once the quiet window has passed without heavy allocation, the
	// process's own GOGC again.
	waitPercent(t, 100)
	tu.Stop()
	if got := currentPercent(); got != 100 {
		t.Fatalf("GOGC after Stop = %d, want the 100 it started from", got)
	}
	// A stopped tuner no longer tunes, heavy allocation or not.
	stop := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		close(stop)
	}()
	allocate(stop)
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
	tu := start(4<<20, hclog.NewNullLogger(), timings{every: 20 * time.Millisecond, quiet: time.Minute, release: time.Minute, minReturn: minReturn, releaser: noRelease})
	defer tu.Stop()
	// Heavy allocation, which turns the floor on: still GOGC, since the
	// live heap alone brings the target above the floor.
	stop := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		close(stop)
	}()
	allocate(stop)
	tu.mu.Lock()
	heavy := tu.heavy
	tu.mu.Unlock()
	if !heavy {
		t.Fatal("the tuner did not see the allocation as heavy")
	}
	for range 3 {
		runtime.GC()
	}
	time.Sleep(50 * time.Millisecond)
	if got := currentPercent(); got != 100 {
		t.Fatalf("GOGC with a live heap above the floor = %d, want 100", got)
	}
	runtime.KeepAlive(live)
}

func TestStart_ReturnsFreeHeapWhenQuiet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	// 32 MiB live through a collection, then garbage: free heap the
	// runtime keeps resident for a while.
	big := make([][]byte, 32)
	for i := range big {
		big[i] = make([]byte, 1<<20)
	}
	runtime.GC()
	runtime.KeepAlive(big)
	big = nil
	runtime.GC()
	forced := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
		metrics.Read(s)
		return readUint(s[0])
	}
	before := forced()
	// A threshold of 2 MiB: the tests before this one leave the runtime
	// holding a few MB it counts as free but does not give back.
	tu := start(1<<30, hclog.NewNullLogger(), timings{every: 20 * time.Millisecond, quiet: 200 * time.Millisecond, release: time.Minute, minReturn: 2 << 20, releaser: noRelease})
	defer tu.Stop()
	// The first quiet check returns it (debug.FreeOSMemory, a forced
	// collection); the next return waits for the quiet window.
	deadline := time.Now().Add(5 * time.Second)
	for forced() == before || freeHeap() >= 16<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("free resident heap %d bytes, %d forced collections: the free heap was not returned", freeHeap(), forced()-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Nothing more freed: no return at every quiet window, even when
	// the runtime holds pages it counts as free.
	returned, left := forced(), freeHeap()
	time.Sleep(700 * time.Millisecond)
	if n := forced() - returned; n > 1 {
		t.Fatalf("%d forced collections in three quiet windows with nothing more freed (%d bytes free after the return, %d now)", n, left, freeHeap())
	}
	tu.Stop()
	// A stopped tuner returns nothing.
	before = forced()
	time.Sleep(300 * time.Millisecond)
	if forced() != before {
		t.Fatal("a stopped tuner forced a collection")
	}
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

// allocateInBackground allocates fast until the function it returns is
// called; that function returns once the allocation has stopped.
func allocateInBackground() func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		allocate(stop)
	}()
	return func() {
		close(stop)
		<-done
	}
}

// noRelease stands for the release of the executable's pages in the tests
// that do not count it.
func noRelease() (uint64, error) { return 0, nil }

// releaseCounter counts the releases of the executable's pages, and fails
// them from the fail-th on (0: never).
type releaseCounter struct {
	mu      sync.Mutex
	n, fail int
}

func (c *releaseCounter) release() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.fail > 0 && c.n >= c.fail {
		return 0, errors.New("madvise: operation not permitted")
	}
	return 1 << 20, nil
}

func (c *releaseCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestStart_ReleasesPagesOncePerQuietPhase: a quiet process has its pages
// released once it has been quiet for the window, not again before the
// release period, and again once a heavy phase is over; a failed release is
// not tried again.
func TestStart_ReleasesPagesOncePerQuietPhase(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	c := &releaseCounter{}
	tu := start(1<<30, hclog.NewNullLogger(), timings{every: 20 * time.Millisecond, quiet: 200 * time.Millisecond, release: time.Minute, minReturn: minReturn, releaser: c.release})
	defer tu.Stop()
	time.Sleep(100 * time.Millisecond)
	if n := c.count(); n != 0 {
		t.Fatalf("%d releases before the process was quiet for the window", n)
	}
	waitFor(t, func() bool { return c.count() == 1 })
	time.Sleep(300 * time.Millisecond)
	if n := c.count(); n != 1 {
		t.Fatalf("%d releases within one quiet phase shorter than the release period, want 1", n)
	}
	// A heavy phase, then quiet again: one more release.
	stopAllocating := allocateInBackground()
	waitPercent(t, maxPercent)
	stopAllocating()
	waitFor(t, func() bool { return c.count() == 2 })
	tu.Stop()

	// Releases every period while quiet; none after one fails.
	c = &releaseCounter{fail: 2}
	tu = start(1<<30, hclog.NewNullLogger(), timings{every: 20 * time.Millisecond, quiet: 100 * time.Millisecond, release: 100 * time.Millisecond, minReturn: minReturn, releaser: c.release})
	defer tu.Stop()
	waitFor(t, func() bool { return c.count() == 2 })
	time.Sleep(400 * time.Millisecond)
	if n := c.count(); n != 2 {
		t.Fatalf("%d releases after the second failed, want 2", n)
	}
}

// waitFor waits up to 5 seconds for cond.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
