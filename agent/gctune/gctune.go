// Package gctune gives the garbage collector of a server process a floor
// under its heap target while the process allocates heavily.
//
// Go collects when the heap has grown by GOGC percent (100 by default)
// over what the last collection left live. A Nops server's live heap is
// small (tens of MB) while every write allocates afresh (memdb's tree
// nodes, the Raft log's pages, the HTTP exchange), so with GOGC alone it
// collects every few dozen MB of allocation: about ten times a second
// under a write load, at about a tenth of the process's CPU. While the
// process allocates fast enough that GOGC alone would collect at least
// heavyRate times a second, a Tuner raises GOGC soon after each
// collection, so that the heap target (about live × (1 + GOGC/100)) comes
// up to the floor (minHeap); it leaves the process's own GOGC once that
// GOGC alone reaches the floor. A small server under load trades some
// memory, up to about minHeap, for fewer collections, and a large one
// collects exactly as GOGC says.
//
// An idle server allocates little, and a floor would only keep the heap
// (and the memory the process holds) high for no CPU saved. Once the
// allocation has stayed under that rate for quietWindow, the Tuner gives
// the process its own GOGC back. While it stays under, the Tuner returns
// the free heap to the system (debug.FreeOSMemory, which collects first)
// when there is at least minReturn more of it than the last return left,
// at most once every quietWindow: the runtime's scavenger keeps about the
// heap target (twice the live heap with GOGC 100), which an idle server
// may take minutes to grow to again, so its resident set stays near what
// its live heap needs.
//
// Once the process has been quiet for quietWindow (since it started, or
// since its last heavy phase), and every releaseEvery while it stays
// quiet, the Tuner also unmaps the pages of the process's executable that
// the kernel mapped read-only (code and read-only data): start-up and a
// heavy phase touch much code an idle server does not run again, and the
// kernel maps 64 KiB around each page first touched, so that tens of MB
// of the resident set are the binary's. They stay in the page cache, and
// what the server still runs is mapped again at its next use (a minor
// fault). Only mappings with no page of the process's own are released,
// so the bytes mapped again are the file's.
//
// Guarantees: the Tuner never sets GOGC below the process's own (it only
// raises the target), and never raises it past maxPercent (a tiny heap is
// not allowed to grow more than sixfold). GOGC=off turns it off, and a
// memory limit (GOMEMLIMIT) still bounds the heap as the runtime does.
// Stop gives the process its GOGC back.
//
// The Tuner sets GOGC from a cleanup that the runtime queues once a
// collection has swept, and when the load changes. When collections
// follow each other closely (a saturated machine), a cleanup may come
// only every second or third collection, so for a cycle or two after the
// live heap jumps the target can be what the last GOGC gives rather than
// the floor.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	// maxPercent bounds the GOGC a Tuner sets: a live heap of a few MB
	// grows at most sixfold before a collection.
	maxPercent = 500
	// liveMetric is the heap the last collection marked live.
	liveMetric = "/gc/heap/live:bytes"
	// gogcMetric is the process's GOGC as set now.
	gogcMetric = "/gc/gogc:percent"
	// allocsMetric is the bytes allocated on the heap since the start.
	allocsMetric = "/gc/heap/allocs:bytes"
	// freeMetric is the heap memory that is free, and resident: not yet
	// given back to the system.
	freeMetric = "/memory/classes/heap/free:bytes"
	// minReturn is the least free heap a quiet Tuner gives back.
	minReturn = 2 << 20

	// heavyRate is the collections a second, with the process's GOGC
	// alone, from which the floor applies: below it the collector takes
	// a few percent of a CPU at most.
	heavyRate = 2
	// minGoal is the least heap target the runtime uses (4 MiB), so the
	// least growth between two collections a heap of a few MB gets.
	minGoal = 4 << 20
	// checkEvery is how often a Tuner measures the allocation rate, and
	// quietWindow how long the rate stays under heavyRate before the
	// floor is dropped.
	checkEvery  = time.Second
	quietWindow = 30 * time.Second
	// releaseEvery is how often a quiet Tuner unmaps the executable's
	// pages again, after the first time a quiet phase begins.
	releaseEvery = 10 * time.Minute
)

// Tuner sets GOGC soon after each collection from the live heap it left. GOGC
// is the process's, not a server's: a process must run one Tuner at a
// time (a second one would take the first one's GOGC as its own).
type Tuner struct {
	logger  hclog.Logger
	minHeap uint64
	// base is the process's GOGC when the Tuner started: the least it
	// sets, and what Stop restores.
	base int

	timings
	done chan struct{}

	mu      sync.Mutex
	stopped bool
	// heavy says the allocation rate was at least heavyRate within the
	// last quiet window: the floor applies.
	heavy bool
}

// Start starts a Tuner whose heap target is at least about minHeap bytes.
// It returns nil, and changes nothing, when minHeap is 0 or GOGC is off.
func Start(minHeap uint64, logger hclog.Logger) *Tuner {
	return start(minHeap, logger, timings{every: checkEvery, quiet: quietWindow, release: releaseEvery, minReturn: minReturn, releaser: releaseExecutablePages})
}

// timings are a Tuner's periods, the least free heap it returns, and how
// it releases the executable's pages: the package's constants and
// releaseExecutablePages, shorter periods, less heap and a counter in
// tests.
type timings struct {
	every, quiet, release time.Duration
	minReturn             uint64
	releaser              func() (uint64, error)
}

func start(minHeap uint64, logger hclog.Logger, tm timings) *Tuner {
	if minHeap == 0 {
		return nil
	}
	base := currentPercent()
	if base < 0 {
		logger.Info("GOGC is off: the heap target floor is not used", "min_heap_bytes", minHeap)
		return nil
	}
	t := &Tuner{logger: logger, minHeap: minHeap, base: base, timings: tm, done: make(chan struct{})}
	t.arm()
	go t.watch()
	logger.Debug("heap target floor set for heavy allocation", "min_heap_bytes", minHeap, "gogc", base)
	return t
}

// Stop stops the Tuner and sets GOGC back to what it was at Start. It is
// safe on a nil Tuner and more than once.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	close(t.done)
	debug.SetGCPercent(t.base)
}

// watch measures the allocation rate every t.every and turns the floor on
// when it is heavy, off once it has stayed light for t.quiet. While it is
// light, at most once every t.quiet, it gives the free heap back to the
// system when there is at least t.minReturn more of it than the last
// return left (the heap a heavy phase or the last cycle of GOGC let
// grow); and it unmaps the executable's pages once the process has been
// quiet for t.quiet (since it started or since its last heavy phase),
// then every t.release while it stays quiet.
func (t *Tuner) watch() {
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	s := []metrics.Sample{{Name: allocsMetric}, {Name: liveMetric}, {Name: freeMetric}}
	metrics.Read(s)
	last, lastAt := readUint(s[0]), time.Now()
	var heavyAt, returnedAt time.Time
	// busyAt is when the process last allocated heavily (its start at
	// first), releasedAt when the executable's pages were last unmapped
	// in this quiet phase (zero: not yet).
	busyAt, releasedAt := lastAt, time.Time{}
	// kept is the free heap the last return left: pages the runtime
	// counts as free but does not give back (a few MB of them after a
	// heavy phase), not to be returned again at every quiet window.
	var kept uint64
	releasing := true
	for {
		select {
		case <-t.done:
			return
		case now := <-tick.C:
			metrics.Read(s)
			allocs := readUint(s[0])
			rate := collectionRate(allocs-last, now.Sub(lastAt), readUint(s[1]), t.base)
			last, lastAt = allocs, now
			if rate >= heavyRate {
				heavyAt, busyAt, releasedAt = now, now, time.Time{}
			}
			heavy := !heavyAt.IsZero() && now.Sub(heavyAt) < t.quiet
			t.setHeavy(heavy)
			if heavy {
				continue
			}
			if now.Sub(returnedAt) >= t.quiet && readUint(s[2]) >= kept+t.minReturn {
				// Rather than wait for the scavenger, which keeps
				// about the heap target: an idle server allocates
				// little, and may not grow to the target again
				// before its next collection.
				debug.FreeOSMemory()
				returnedAt = time.Now()
				kept = freeHeap()
			}
			due := now.Sub(busyAt) >= t.quiet && (releasedAt.IsZero() || now.Sub(releasedAt) >= t.release)
			if releasing && due {
				releasing = t.releasePages()
				releasedAt = time.Now()
			}
		}
	}
}

// releasePages unmaps the executable's pages the process has mapped, and
// reports whether to go on doing it (not after a failure). Start-up and a
// heavy phase touch code and tables an idle server does not run again, and
// the kernel maps the pages around each one touched first (64 KiB at a
// time): tens of MB of a resident set that an idle server does not use.
// What it still runs is mapped again from the page cache at its next use.
func (t *Tuner) releasePages() bool {
	n, err := t.releaser()
	if err != nil {
		t.logger.Debug("cannot release the executable's pages", "error", err)
		return false
	}
	t.logger.Trace("released the executable's pages", "bytes", n)
	return true
}

// setHeavy records whether the allocation is heavy and tunes GOGC when
// that changed.
func (t *Tuner) setHeavy(heavy bool) {
	t.mu.Lock()
	changed := t.heavy != heavy && !t.stopped
	t.heavy = heavy
	t.mu.Unlock()
	if changed {
		t.logger.Debug("allocation rate changed", "heavy", heavy)
		t.tune()
	}
}

// collectionRate returns the collections a second that GOGC base alone
// would make for allocs bytes allocated over d with a live heap of live
// bytes.
func collectionRate(allocs uint64, d time.Duration, live uint64, base int) float64 {
	if d <= 0 {
		return 0
	}
	growth := max(live*uint64(base)/100, minGoal)
	return float64(allocs) / float64(growth) / d.Seconds()
}

// freeHeap returns the free heap the process holds resident.
func freeHeap() uint64 {
	s := []metrics.Sample{{Name: freeMetric}}
	metrics.Read(s)
	return readUint(s[0])
}

func readUint(s metrics.Sample) uint64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return s.Value.Uint64()
	}
	return 0
}

// sentinel is an object that only the next collection finds unreachable.
// It holds a pointer, so it is not one of the tiny objects that share a
// block (whose cleanups may never run).
type sentinel struct{ t *Tuner }

// arm has the Tuner run again once the next collection has swept.
func (t *Tuner) arm() {
	runtime.AddCleanup(&sentinel{t: t}, func(t *Tuner) {
		if t.tune() {
			t.arm()
		}
	}, t)
}

// tune sets GOGC for the live heap the last collection left: the floor's
// while the allocation is heavy, the process's own otherwise. It reports
// whether the Tuner still runs.
func (t *Tuner) tune() bool {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	live := readUint(s[0])
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	p := t.base
	if t.heavy {
		p = targetPercent(t.minHeap, live, t.base)
	}
	// GOGC as it is now, not as the Tuner left it: whoever set it since
	// is overruled, since a process runs one Tuner.
	if p != currentPercent() {
		debug.SetGCPercent(p)
	}
	return true
}

// targetPercent returns the GOGC that brings the heap target (live × (1 +
// GOGC/100)) up to minHeap, rounded down, and at most maxPercent; never
// less than base (the process's own GOGC, returned as is when it is above
// maxPercent or already brings the target to minHeap).
func targetPercent(minHeap, live uint64, base int) int {
	if live == 0 {
		return max(base, maxPercent)
	}
	if live >= minHeap {
		return base
	}
	// minHeap/live - 1, in percent, rounded down.
	p := int(min(minHeap*100/live, uint64(maxPercent)+100)) - 100
	return max(p, base)
}

// currentPercent returns the process's GOGC, -1 when it is off (or cannot
// be read, so that nothing is changed).
func currentPercent() int {
	s := []metrics.Sample{{Name: gogcMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	// The runtime holds GOGC as an int32, -1 when off, and reports it
	// converted to a uint64.
	v := int64(s[0].Value.Uint64())
	if v < 0 {
		return -1
	}
	return int(v)
}
