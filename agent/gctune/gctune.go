// Package gctune gives the garbage collector of a server process a floor
// under its heap target.
//
// Go collects when the heap has grown by GOGC percent (100 by default)
// over what the last collection left live. A Nops server's live heap is
// small (tens of MB) while every write allocates afresh (memdb's tree
// nodes, the Raft log's pages, the HTTP exchange), so with GOGC alone it
// collects every few dozen MB of allocation: about ten times a second
// under a write load, at about a tenth of the process's CPU. A Tuner
// raises GOGC after each collection, so that the next one waits until the
// heap reaches the floor (MinHeap), and sets it back to the process's own
// GOGC once the live heap is half the floor or more: a small server
// trades at most MinHeap of memory for fewer collections, and a large one
// collects exactly as GOGC says.
//
// Guarantees: the heap target is never below what GOGC gives (the Tuner
// only raises it), never above MinHeap while GOGC gives less, and GOGC is
// never raised past maxPercent (a tiny heap is not allowed to grow a
// hundredfold). GOGC=off turns the Tuner off, and a memory limit
// (GOMEMLIMIT) still bounds the heap as the runtime does. Stop gives the
// process its GOGC back.
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

// Tuner sets GOGC after each collection from the live heap it left. A
// process runs one: GOGC is the process's, not a server's.
type Tuner struct {
	logger  hclog.Logger
	minHeap uint64
	// base is the process's GOGC when the Tuner started: the least it
	// sets, and what Stop restores.
	base int

	mu      sync.Mutex
	stopped bool
	// percent is the GOGC the Tuner set last.
	percent int
}

// Start starts a Tuner whose heap target is at least minHeap bytes. It
// returns nil, and changes nothing, when minHeap is 0 or GOGC is off.
func Start(minHeap uint64, logger hclog.Logger) *Tuner {
	base := currentPercent()
	if minHeap == 0 || base < 0 {
		return nil
	}
	t := &Tuner{logger: logger, minHeap: minHeap, base: base, percent: base}
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

// Percent returns the GOGC the Tuner set last.
func (t *Tuner) Percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// sentinel is an object that only the next collection finds unreachable:
// its cleanup runs once that collection is done. It holds a pointer, so it
// is not one of the tiny objects that share a block (whose cleanups may
// never run).
type sentinel struct {
	t   *Tuner
	pad [8]byte
}

// arm has the Tuner run again after the next collection.
func (t *Tuner) arm() {
	s := &sentinel{t: t}
	runtime.AddCleanup(s, func(t *Tuner) {
		t.mu.Lock()
		stopped := t.stopped
		t.mu.Unlock()
		if stopped {
			return
		}
		t.tune()
		t.arm()
	}, t)
}

// tune sets GOGC for the live heap the last collection left.
func (t *Tuner) tune() {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	var live uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	p := Percent(t.minHeap, live, t.base)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.percent = p
	// GOGC as it is now, not as the Tuner left it: whoever set it since
	// is overruled, since a process runs one Tuner.
	if p != currentPercent() {
		debug.SetGCPercent(p)
	}
}

// Percent returns the GOGC that puts the heap target (live × (1 +
// GOGC/100)) at minHeap, within [base, maxPercent]: base when the live
// heap is half of minHeap or more.
func Percent(minHeap, live uint64, base int) int {
	if live == 0 {
		return max(base, maxPercent)
	}
	if live >= minHeap {
		return base
	}
	// minHeap/live - 1, in percent, rounded down.
	p := int(min(minHeap*100/live, uint64(maxPercent)+100)) - 100
	return min(max(p, base), max(base, maxPercent))
}

// currentPercent returns the process's GOGC (-1 when off).
func currentPercent() int {
	s := []metrics.Sample{{Name: gogcMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	// The runtime reports GOGC=off as the largest value it holds.
	v := s[0].Value.Uint64()
	if v > 1<<31 {
		return -1
	}
	return int(v)
}
