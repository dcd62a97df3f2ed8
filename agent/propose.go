package agent

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
)

// Group commit of proposals.
//
// Raft's leader writes (and syncs) whatever its apply queue holds the moment
// it looks, and it looks as soon as a first entry arrives: with writes
// arriving one by one, each sync carries a handful of entries, and every
// server pays a log sync, a replication round and an FSM transaction for
// each handful. The proposer sends the proposals to Raft in groups instead:
// while one group is being committed, the next gathers, and it goes to Raft
// whole once the first is committed, that is as this server's FSM starts
// to apply it (committed), so that the leader writes the next group to its
// log while it applies the last; at most two groups are in Raft. A
// proposal that finds no group in flight goes at once, so a lone write
// waits for nothing more.
//
// A group of several goes to Raft as one batch entry (structs.EncodeBatch)
// once every server can apply one: Raft encodes, stores, replicates and
// answers one entry for the group, instead of one per write, and the FSM
// applies each write of it in order with its own answer.
//
// Each caller still waits for its own write: a write is acknowledged only
// once Raft committed its entry and this server's FSM applied it.

const (
	// proposeQueue bounds the proposals waiting for the next group.
	proposeQueue = 1024
	// maxGroup bounds a group: Raft's apply queue holds as many
	// (MaxAppendEntries), and takes as many into one log write.
	maxGroup = 64
	// groupWait is how long, at most, a group waits for the one before it
	// (a commit takes milliseconds; a lost leadership fails it within
	// Raft's leader lease).
	groupWait = time.Second
	// maxBatchBytes bounds a batch entry; a write as large goes alone.
	maxBatchBytes = 512 << 10
)

// proposer sends encoded entries to Raft a group at a time.
type proposer struct {
	apply    func(buf []byte, timeout time.Duration) raft.ApplyFuture
	queue    chan *proposal
	shutdown <-chan struct{}
	closed   error
	// groupWait bounds the wait for a group before the next one goes.
	groupWait time.Duration
	// canBatch reports whether every server applies batch entries; nil
	// sends each write as an entry of its own.
	canBatch func() bool
	// writes counts the writes sent to Raft.
	writes prometheus.Counter
	// commitTime observes how long each entry took from its hand-over to
	// Raft until it was applied.
	commitTime prometheus.Histogram
	// applying receives a signal as the FSM starts to apply a batch of
	// committed entries (committed): the group in flight is committed, or
	// an entry from before it is (a former leader's), which lets the next
	// group go a little early and is harmless.
	applying chan struct{}
}

// entry is one log entry the proposer sends: one write, or a batch of them.
type entry struct {
	buf []byte
	// props are the entry's writes: several in a batch entry.
	props []*proposal
}

type proposal struct {
	buf []byte
	// sent is set once the proposer hands the entry to Raft.
	sent atomic.Bool
	// res receives the entry's outcome once it is applied (or failed).
	res chan applyResult
}

// applyResult is the outcome of one entry.
type applyResult struct {
	index uint64
	resp  any
	err   error
}

func newProposer(apply func([]byte, time.Duration) raft.ApplyFuture, shutdown <-chan struct{}, closed error) *proposer {
	return &proposer{apply: apply, queue: make(chan *proposal, proposeQueue), shutdown: shutdown, closed: closed, groupWait: groupWait,
		applying: make(chan struct{}, 1),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_raft_proposed_writes_total",
			Help: "Writes this server proposed to Raft as leader; a batch entry holds several.",
		}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nops_raft_commit_duration_seconds",
			Help: "Time from handing a log entry to Raft on this server, as leader, until a quorum stored it and the state applied it; entries Raft refused are not observed.",
			// 1 ms to about 16 s.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		})}
}

// run sends the groups until shutdown.
func (p *proposer) run(wg *sync.WaitGroup) {
	defer wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	// prev is answered once the group before the one in flight is.
	var prev <-chan struct{}
	for {
		var group []*proposal
		select {
		case first := <-p.queue:
			group = append(make([]*proposal, 0, 8), first)
		case <-p.shutdown:
			return
		}
	gather:
		for len(group) < maxGroup {
			select {
			case next := <-p.queue:
				group = append(group, next)
			default:
				break gather
			}
		}
		// A signal from before this group says nothing of it.
		select {
		case <-p.applying:
		default:
		}
		entries := p.pack(group)
		sent := time.Now()
		futures := make([]raft.ApplyFuture, len(entries))
		for i, e := range entries {
			for _, g := range e.props {
				g.sent.Store(true)
			}
			futures[i] = p.apply(e.buf, config.RaftApplyTimeout)
		}
		p.writes.Add(float64(len(group)))
		done := make(chan struct{})
		// The reader is not counted in wg: Raft leaves some futures
		// unanswered when it shuts down (those still in its queues), and a
		// reader blocked on one must not hold up the server's shutdown.
		// Their callers hear of the shutdown from propose.
		go deliver(entries, futures, done, func() { p.commitTime.Observe(time.Since(sent).Seconds()) })
		// The next group waits for this one to be committed, and for the
		// one before it to be answered, so that at most two are in Raft
		// (a signal may come from an earlier group's entry); but not for
		// ever: Raft answers every future in the end, yet one it kept
		// waiting must not hold up the writes behind it.
		timer.Reset(p.groupWait)
		expired := false
		if prev != nil {
			select {
			case <-prev:
			case <-timer.C:
				expired = true
			case <-p.shutdown:
				return
			}
		}
		if !expired {
			select {
			case <-p.applying:
			case <-done:
			case <-timer.C:
			case <-p.shutdown:
				return
			}
		}
		prev = done
	}
}

// committed tells the proposer that the FSM starts to apply committed
// entries. It never blocks: Raft's FSM goroutine calls it.
func (p *proposer) committed() {
	select {
	case p.applying <- struct{}{}:
	default:
	}
}

// pack turns a group into log entries: the writes together in batch
// entries of up to maxBatchBytes when every server applies them, else one
// entry each. A write too large to share goes alone, and so does a
// deployment create: the FSM takes one per entry (the create index orders
// deployments and is unique).
func (p *proposer) pack(group []*proposal) []entry {
	if len(group) == 1 || p.canBatch == nil || !p.canBatch() {
		out := make([]entry, len(group))
		for i, g := range group {
			out[i] = entry{buf: g.buf, props: group[i : i+1]}
		}
		return out
	}
	var out []entry
	var open []*proposal
	size := 0
	flush := func() {
		switch len(open) {
		case 0:
		case 1:
			out = append(out, entry{buf: open[0].buf, props: open})
		default:
			parts := make([][]byte, len(open))
			for i, g := range open {
				parts[i] = g.buf
			}
			out = append(out, entry{buf: structs.EncodeBatch(parts), props: open})
		}
		open, size = nil, 0
	}
	for _, g := range group {
		if structs.MessageType(g.buf[0]) == structs.DeploymentCreateRequestType {
			flush()
			out = append(out, entry{buf: g.buf, props: []*proposal{g}})
			continue
		}
		if size+len(g.buf) > maxBatchBytes {
			flush()
		}
		open = append(open, g)
		size += len(g.buf)
	}
	flush()
	return out
}

// deliver reads a group's futures, in log order, and hands each caller its
// outcome. It alone reads them: a Raft future hands its error to one reader
// only, and a second one reading at the same time would see success. It
// calls applied as each entry is found applied, to time it.
func deliver(entries []entry, futures []raft.ApplyFuture, done chan<- struct{}, applied func()) {
	for i, f := range futures {
		e := entries[i]
		err := f.Error()
		if err != nil {
			for _, g := range e.props {
				g.res <- applyResult{err: err}
			}
			continue
		}
		applied()
		index, resp := f.Index(), f.Response()
		if len(e.props) == 1 {
			e.props[0].res <- applyResult{index: index, resp: resp}
			continue
		}
		// A batch entry answers with its writes' answers, in order; one
		// refused whole answers with its error.
		list, isList := resp.([]any)
		refusal, isErr := resp.(error)
		for k, g := range e.props {
			r := applyResult{index: index}
			switch {
			case isList && len(list) == len(e.props):
				r.resp = list[k]
			case isErr:
				r.resp = refusal
			default:
				// Cannot happen; what the FSM did is not known.
				r.err = fmt.Errorf("the batch entry at index %d answered %T for %d writes: the write may or may not have been applied", index, resp, len(e.props))
			}
			g.res <- r
		}
	}
	close(done)
}

// propose hands an encoded entry to the proposer and waits for its
// outcome.
func (p *proposer) propose(buf []byte) applyResult {
	prop := &proposal{buf: buf, res: make(chan applyResult, 1)}
	select {
	case p.queue <- prop:
	case <-p.shutdown:
		return applyResult{err: p.closed}
	}
	select {
	case r := <-prop.res:
		return r
	case <-p.shutdown:
		// The proposer stops once Raft has shut down: an outcome Raft
		// gave is here by now, and one it did not give never comes.
		select {
		case r := <-prop.res:
			return r
		default:
		}
		if prop.sent.Load() {
			// Raft had it: it may have been committed.
			return applyResult{err: errOutcomeUnknown}
		}
		return applyResult{err: p.closed}
	}
}

// errOutcomeUnknown answers a proposal Raft took but did not answer
// before it shut down.
var errOutcomeUnknown = errors.New("the server shut down before the write's outcome was known: it may or may not have been applied")
