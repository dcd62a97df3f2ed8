// Package gctune gives the garbage collector of a server process a floor
// under its heap target.
//
// Go collects when the heap has grown by GOGC percent (100 by default)
// over what the last collection left live. A Nops server's live heap is
// small (tens of MB) while every write allocates afresh (memdb's tree
// nodes, the Raft log's pages, the HTTP exchange), so with GOGC alone it
// collects every few dozen MB of allocation: about ten times a second
// under a write load, at about a tenth of the process's CPU. A Tuner
// raises GOGC soon after each collection, so that the heap target (about
// live × (1 + GOGC/100)) comes up to the floor (minHeap), and it leaves
// the process's own GOGC once that GOGC alone reaches the floor: a small
// server trades some memory, up to about minHeap, for fewer collections,
// and a large one collects exactly as GOGC says.
//
// Guarantees: the Tuner never sets GOGC below the process's own (it only
// raises the target), and never raises it past maxPercent (a tiny heap is
// not allowed to grow more than sixfold). GOGC=off turns it off, and a
// memory limit (GOMEMLIMIT) still bounds the heap as the runtime does.
// Stop gives the process its GOGC back.
//
// The Tuner runs from a cleanup that the runtime queues once a collection
// has swept. When collections follow each other closely (a saturated
// machine), a cleanup may come only every second or third collection, so
// for a cycle or two after the live heap jumps the target can be what the
// last GOGC gives rather than the floor.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"

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

	mu      sync.Mutex
	stopped bool
}

// Start starts a Tuner whose heap target is at least about minHeap bytes.
// It returns nil, and changes nothing, when minHeap is 0 or GOGC is off.
func Start(minHeap uint64, logger hclog.Logger) *Tuner {
	if minHeap == 0 {
		return nil
	}
	base := currentPercent()
	if base < 0 {
		logger.Info("GOGC is off: the heap target floor is not used", "min_heap_bytes", minHeap)
		return nil
	}
	t := &Tuner{logger: logger, minHeap: minHeap, base: base}
	t.tune()
	t.arm()
	logger.Debug("heap target floor set", "min_heap_bytes", minHeap, "gogc", base)
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
	debug.SetGCPercent(t.base)
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

// tune sets GOGC for the live heap the last collection left. It reports
// whether the Tuner still runs.
func (t *Tuner) tune() bool {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	var live uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	p := targetPercent(t.minHeap, live, t.base)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
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
