package fsm

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
)

// FSM applies committed Raft log entries to the state store. It is the only
// writer of the state.
type FSM struct {
	logger hclog.Logger
	// onApply, when set, is called as each batch of committed entries
	// starts to apply (SetOnApply).
	onApply func()

	// mu guards state, which Restore swaps for a new store.
	mu    sync.RWMutex
	state *StateStore
}

var _ raft.FSM = (*FSM)(nil)

// New returns an FSM over an empty state store.
func New(logger hclog.Logger) (*FSM, error) {
	st, err := NewStateStore()
	if err != nil {
		return nil, err
	}
	return &FSM{logger: logger.Named("fsm"), state: st}, nil
}

// SetOnApply sets a function that ApplyBatch calls, on Raft's FSM
// goroutine, as each batch of committed entries starts to apply: on the
// leader, the moment its entries are known committed. It must not block,
// and it must be set before the FSM is handed to Raft.
func (f *FSM) SetOnApply(fn func()) { f.onApply = fn }

// State returns the current state store. After a Restore it is a new store,
// so callers should not keep it across calls.
func (f *FSM) State() *StateStore {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state
}

var _ raft.BatchingFSM = (*FSM)(nil)

// Apply applies one log entry in a write transaction of its own. A request
// that breaks a rule, and an entry that cannot be decoded or is of an
// unknown type, return an error as the response and change nothing: every
// server reads the same bytes the same way, so every server refuses the same
// entry and the states stay equal. A batch entry's response is the list of
// its requests' responses, in order.
func (f *FSM) Apply(l *raft.Log) any {
	reqs, resps := expand([]*raft.Log{l})
	f.applyEntries(reqs, resps)
	return resps[0]
}

// ApplyBatch applies the entries Raft commits together in one write
// transaction, which is several times cheaper than one transaction each.
// Each request keeps its own answer and its atomicity: a refused request
// that changed nothing is answered with its error and the batch goes on; if
// a refused request had already changed something, the whole batch is
// thrown away and applied again one entry at a time.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	if f.onApply != nil {
		f.onApply()
	}
	reqs, resps := expand(logs)
	if len(reqs) > 0 && f.applyTxn(reqs, resps, nil) >= 0 {
		f.applyEntries(reqs, resps)
	}
	return resps
}

// applyEntries applies each log entry in a write transaction of its own.
// A request refused after it changed something is left out and its entry
// applied again without it, so that a reader sees an entry whole or not at
// all, never a part of it at the entry's index.
func (f *FSM) applyEntries(reqs []request, resps []any) {
	for start := 0; start < len(reqs); {
		end := start + 1
		for end < len(reqs) && reqs[end].entry == reqs[start].entry {
			end++
		}
		entry := reqs[start:end]
		var skip []bool
		for {
			pos := f.applyTxn(entry, resps, skip)
			if pos < 0 {
				break
			}
			if skip == nil {
				skip = make([]bool, len(entry))
			}
			skip[pos] = true
		}
		start = end
	}
}

// applyTxn applies reqs, but those skip marks (refused already, their
// answers recorded), in one write transaction, and commits it. If a request
// is refused after it changed something, it throws the transaction away
// and returns the request's position, its answer recorded; else -1.
func (f *FSM) applyTxn(reqs []request, resps []any, skip []bool) int {
	st := f.State()
	txn := st.db.Txn(true)
	defer txn.Abort()
	// The counters are shared by the transaction and written once at its
	// end.
	counters := readMeta(txn)
	reads := directReads(txn)
	if len(reqs) > 1 {
		reads = newIDReads(st.db, txn)
	}
	var num numbering
	for i, r := range reqs {
		notified := num.start(r)
		if skip == nil || !skip[i] {
			saved := counters
			w := &writer{txn: txn, reads: reads, index: r.log.Index, meta: &counters, notified: notified}
			err := f.dispatchRequest(w, r)
			switch {
			case err != nil && w.mutated:
				r.answer(resps, err)
				return i
			case err != nil:
				r.answer(resps, err)
				counters = saved
			default:
				r.answer(resps, w.resp)
				num.next = w.notified
			}
		}
		// The latest index moves to every applied entry, refused or not.
		counters.LatestIndex = r.log.Index
	}
	if err := txn.Insert(TableMeta, &counters); err != nil {
		err = fmt.Errorf("update counters: %w", err)
		for i, r := range reqs {
			if skip == nil || !skip[i] {
				r.answer(resps, err)
			}
		}
		return -1
	}
	txn.Commit()
	st.committed(counters.LatestIndex)
	st.broadcast()
	return -1
}

// request is one request to apply: a log entry of its own, or one of the
// requests of a batch entry (structs.EncodeBatch), which share its index.
type request struct {
	// log is the request's entry, its Data the request alone.
	log *raft.Log
	// entry is the position of the log entry among those applied together;
	// sub the request's position in a batch entry, or -1.
	entry, sub int
	// bad, when set, refuses the entry: a batch entry that does not read.
	bad error
}

// answer records the request's response: the entry's, or its place in the
// list of its batch entry's.
func (r request) answer(resps []any, resp any) {
	if r.sub < 0 {
		resps[r.entry] = resp
		return
	}
	resps[r.entry].([]any)[r.sub] = resp
}

// expand lists the requests of the log entries, in log order, with a
// response slot for each entry (nil for an entry that is not a command).
func expand(logs []*raft.Log) ([]request, []any) {
	resps := make([]any, len(logs))
	reqs := make([]request, 0, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand || len(l.Data) == 0 {
			continue
		}
		if structs.MessageType(l.Data[0])&^structs.IgnoreUnknownTypeFlag != structs.BatchRequestType {
			reqs = append(reqs, request{log: l, entry: i, sub: -1})
			continue
		}
		parts, err := structs.SplitBatch(l.Data[1:])
		if err != nil {
			reqs = append(reqs, request{log: l, entry: i, sub: -1,
				bad: fmt.Errorf("%w: %w at index %d", ErrBadEntry, err, l.Index)})
			continue
		}
		resps[i] = make([]any, len(parts))
		for k, p := range parts {
			c := *l
			c.Data = p
			reqs = append(reqs, request{log: &c, entry: i, sub: k})
		}
	}
	return reqs, resps
}

// numbering carries the count of notifications from one request of a
// batch entry to the next: they share the entry's index, which numbers
// them (structs.NotificationID), so the count goes on rather than starting
// again. next is set by the caller after each applied request.
type numbering struct{ next int }

// start returns the number of r's first notification.
func (n *numbering) start(r request) int {
	if r.sub <= 0 {
		n.next = 0
	}
	return n.next
}

// dispatchRequest applies one request through w.
func (f *FSM) dispatchRequest(w *writer, r request) error {
	if r.bad != nil {
		f.logger.Error("refused a log entry", "index", r.log.Index, "error", r.bad)
		return r.bad
	}
	return f.safeDispatch(w, r.log)
}

// ErrBadEntry is the answer to a log entry the FSM cannot apply: its body
// does not decode, or its type is unknown. The entry changes nothing.
var ErrBadEntry = errors.New("log entry cannot be applied")

// safeDispatch is dispatch with a recover: a panic while applying an entry
// (a request the rules did not foresee) becomes the entry's error, so that no
// entry can stop this server, at apply or again at every restart. The
// panic may have come after a change, so the entry counts as mutating: the
// caller throws its transaction away.
func (f *FSM) safeDispatch(w *writer, l *raft.Log) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.mutated = true
			err = fmt.Errorf("%w: %s at index %d: panic: %v", ErrBadEntry, entryType(l.Data[0]), l.Index, p)
			f.logger.Error("refused a log entry", "index", l.Index, "error", err)
		}
	}()
	err = f.dispatch(w, l)
	if errors.Is(err, ErrBadEntry) {
		f.logger.Error("refused a log entry", "index", l.Index, "error", err)
	}
	return err
}

func entryType(b byte) structs.MessageType { return structs.MessageType(b) }

// dispatch decodes one entry and applies it through w. An unknown type
// flagged IgnoreUnknownTypeFlag is skipped; any other unknown type, and a
// body that does not decode, is refused with ErrBadEntry.
func (f *FSM) dispatch(w *writer, l *raft.Log) error {
	t := structs.MessageType(l.Data[0])
	ignoreUnknown := t&structs.IgnoreUnknownTypeFlag != 0
	t &^= structs.IgnoreUnknownTypeFlag
	buf := l.Data[1:]
	if ok, err := (aclWriter{w}).apply(t, buf); ok {
		return err
	}
	switch t {
	case structs.DeploymentCreateRequestType:
		return applyMsg(buf, w.deploymentCreate)
	case structs.DeploymentTransitionRequestType:
		return applyMsg(buf, w.deploymentTransition)
	case structs.DeploymentUpdateRequestType:
		return applyMsg(buf, w.deploymentUpdate)
	case structs.DeploymentDecisionRequestType:
		return applyMsg(buf, w.deploymentDecision)
	case structs.DeploymentSkipRequirementsRequestType:
		return applyMsg(buf, w.deploymentSkipRequirements)
	case structs.PauseRequestType:
		return applyMsg(buf, w.pause)
	case structs.ResumeRequestType:
		return applyMsg(buf, w.resume)
	case structs.WindowUpsertRequestType:
		return applyMsg(buf, w.windowUpsert)
	case structs.WindowDeleteRequestType:
		return applyMsg(buf, w.windowDelete)
	case structs.WindowLiftRequestType:
		return applyMsg(buf, w.windowLift)
	case structs.JobStatusUpsertRequestType:
		return applyMsg(buf, w.jobStatusUpsert)
	case structs.JobStatusDeleteRequestType:
		return applyMsg(buf, w.jobStatusDelete)
	case structs.RepoStatusUpsertRequestType:
		return applyMsg(buf, w.repoStatusUpsert)
	case structs.DetectionCycleRequestType:
		return applyMsg(buf, w.detectionCycle)
	case structs.RetryRequestType:
		return applyMsg(buf, w.retry)
	case structs.EventAppendRequestType:
		return applyMsg(buf, w.eventAppend)
	case structs.NotificationResultRequestType:
		return applyMsg(buf, w.notificationResult)
	case structs.NotificationPruneRequestType:
		return applyMsg(buf, w.notificationPrune)
	case structs.NotifyMarkRequestType:
		return applyMsg(buf, w.notifyMark)
	case structs.AutopilotSetConfigRequestType:
		return applyMsg(buf, w.autopilotSetConfig)
	case structs.GCRequestType:
		return applyMsg(buf, gcWriter{w}.gc)
	case structs.WebhookDeliveryRequestType:
		return applyMsg(buf, webhookWriter{w}.webhookDelivery)
	case structs.BatchRequestType:
		// A batch entry's requests are split from it before dispatch
		// (expand): a batch inside one is not a request.
		return fmt.Errorf("%w: a batch entry inside a batch entry at index %d", ErrBadEntry, l.Index)
	}
	if ignoreUnknown {
		f.logger.Warn("ignoring unknown message type", "type", t, "index", l.Index)
		return nil
	}
	return fmt.Errorf("%w: unknown message type %d at index %d", ErrBadEntry, uint8(t), l.Index)
}

// applyMsg decodes a request and runs its apply function. A body that does
// not decode is refused with ErrBadEntry: the decoder is deterministic, so
// every server refuses it alike and the states stay equal.
func applyMsg[T any](buf []byte, fn func(*T) error) error {
	req := new(T)
	if err := structs.Decode(buf, req); err != nil {
		return fmt.Errorf("%w: %w", ErrBadEntry, err)
	}
	if err := checkTimes(reflect.ValueOf(req)); err != nil {
		return err
	}
	return fn(req)
}

// Snapshot returns a point-in-time view of the state, written out by
// Persist while the FSM goes on applying.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{txn: f.State().db.Txn(false)}, nil
}

// Restore replaces the state with the one in a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := NewStateStore()
	if err != nil {
		return err
	}
	if err := restoreInto(st, rc, 0); err != nil {
		return err
	}
	f.mu.Lock()
	old := f.state
	f.state = st
	f.mu.Unlock()
	old.broadcast()
	return nil
}

// ReadOnly returns a store holding the state of a snapshot, for inspection,
// within DefaultMaxStateSize.
func ReadOnly(r io.Reader) (*StateStore, error) {
	return ReadOnlyLimited(r, DefaultMaxStateSize)
}

// ReadOnlyLimited is ReadOnly for a state of at most maxSize bytes,
// decompressed: it stops reading there and refuses the snapshot. A limit
// of 0 or less is DefaultMaxStateSize.
func ReadOnlyLimited(r io.Reader, maxSize int64) (*StateStore, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxStateSize
	}
	st, err := NewStateStore()
	if err != nil {
		return nil, err
	}
	if err := restoreInto(st, r, maxSize); err != nil {
		return nil, err
	}
	return st, nil
}
