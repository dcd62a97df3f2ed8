package agent

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Group commit of proposals.
//
// Raft's leader writes (and syncs) whatever its apply queue holds the moment
// it looks, and it looks as soon as a first entry arrives: with writes
// arriving one by one, each sync carries a handful of entries, and every
// server pays a log sync, a replication round and an FSM transaction for
// each handful. The proposer sends the proposals to Raft in groups instead:
// while one group is being committed and applied, the next gathers, and it
// goes to Raft whole once the first is applied. A proposal that finds no
// group in flight goes at once, so a lone write waits for nothing more.
//
// Each caller still waits for its own entry: a write is acknowledged only
// once Raft committed it and this server's FSM applied it.

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
)

// proposer sends encoded entries to Raft a group at a time.
type proposer struct {
	apply    func(buf []byte, timeout time.Duration) raft.ApplyFuture
	queue    chan *proposal
	shutdown <-chan struct{}
	closed   error
	// groupWait bounds the wait for a group before the next one goes.
	groupWait time.Duration
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
	return &proposer{apply: apply, queue: make(chan *proposal, proposeQueue), shutdown: shutdown, closed: closed, groupWait: groupWait}
}

// run sends the groups until shutdown.
func (p *proposer) run(wg *sync.WaitGroup) {
	defer wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
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
		futures := make([]raft.ApplyFuture, len(group))
		for i, g := range group {
			g.sent.Store(true)
			futures[i] = p.apply(g.buf, raftApplyTimeout)
		}
		done := make(chan struct{})
		// The reader is not counted in wg: Raft leaves some futures
		// unanswered when it shuts down (those still in its queues), and a
		// reader blocked on one must not hold up the server's shutdown.
		// Their callers hear of the shutdown from propose.
		go deliver(group, futures, done)
		// The next group waits for this one, but not for ever: Raft
		// answers every future in the end, yet one it kept waiting must
		// not hold up the writes behind it.
		timer.Reset(p.groupWait)
		select {
		case <-done:
		case <-timer.C:
		case <-p.shutdown:
			return
		}
	}
}

// deliver reads a group's futures, in log order, and hands each caller its
// outcome. It alone reads them: a Raft future hands its error to one reader
// only, and a second one reading at the same time would see success.
func deliver(group []*proposal, futures []raft.ApplyFuture, done chan<- struct{}) {
	for i, f := range futures {
		r := applyResult{err: f.Error()}
		if r.err == nil {
			r.index, r.resp = f.Index(), f.Response()
		}
		group[i].res <- r
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
