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

// State returns the current state store. After a Restore it is a new store,
// so callers should not keep it across calls.
func (f *FSM) State() *StateStore {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state
}

var _ raft.BatchingFSM = (*FSM)(nil)

// Apply applies one log entry. A request that breaks a rule, and an entry
// that cannot be decoded or is of an unknown type, return an error as the
// response and change nothing: every server reads the same bytes the same
// way, so every server refuses the same entry and the states stay equal.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	st := f.State()
	txn := st.db.Txn(true)
	defer txn.Abort()
	w := &writer{txn: txn, index: l.Index}
	if err := f.safeDispatch(w, l); err != nil {
		// The refused request changes nothing, but the entry is applied:
		// the latest index moves on, so that a reader waiting for it does
		// not wait forever.
		txn.Abort()
		st.recordIndex(l.Index)
		return err
	}
	if err := w.finish(); err != nil {
		return err
	}
	txn.Commit()
	st.broadcast()
	return w.resp
}

// ApplyBatch applies the entries Raft commits together in one write
// transaction, which is several times cheaper than one transaction each.
// Each entry keeps its own answer and its atomicity: a refused entry that
// changed nothing is answered with its error and the batch goes on; if a
// refused entry had already changed something, the whole batch is thrown
// away and applied again one entry at a time.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	st := f.State()
	txn := st.db.Txn(true)
	defer txn.Abort()
	// The counters are shared by the batch and written once at its end.
	counters := readMeta(txn)
	applied := false
	for i, l := range logs {
		if l.Type != raft.LogCommand || len(l.Data) == 0 {
			continue
		}
		saved := counters
		w := &writer{txn: txn, index: l.Index, meta: &counters}
		err := f.safeDispatch(w, l)
		if err != nil && w.mutated {
			txn.Abort()
			return f.applyEach(logs)
		}
		if err != nil {
			resps[i] = err
			counters = saved
		} else {
			resps[i] = w.resp
		}
		// The latest index moves to every applied entry, refused or not.
		counters.LatestIndex = l.Index
		applied = true
	}
	if !applied {
		return resps
	}
	if err := txn.Insert(TableMeta, &counters); err != nil {
		txn.Abort()
		return f.applyEach(logs)
	}
	txn.Commit()
	st.broadcast()
	return resps
}

func (f *FSM) applyEach(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	for i, l := range logs {
		resps[i] = f.Apply(l)
	}
	return resps
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
	switch t {
	case structs.DeploymentCreateRequestType:
		return applyMsg(buf, w.deploymentCreate)
	case structs.DeploymentTransitionRequestType:
		return applyMsg(buf, w.deploymentTransition)
	case structs.DeploymentUpdateRequestType:
		return applyMsg(buf, w.deploymentUpdate)
	case structs.DeploymentDecisionRequestType:
		return applyMsg(buf, w.deploymentDecision)
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
	case structs.ACLPolicyUpsertRequestType:
		return applyMsg(buf, w.aclPolicyUpsert)
	case structs.ACLPolicyDeleteRequestType:
		return applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLPolicies, "policy") })
	case structs.ACLRoleUpsertRequestType:
		return applyMsg(buf, w.aclRoleUpsert)
	case structs.ACLRoleDeleteRequestType:
		return applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLRoles, "role") })
	case structs.ACLTokenUpsertRequestType:
		return applyMsg(buf, w.aclTokenUpsert)
	case structs.ACLTokenDeleteRequestType:
		return applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLTokens, "token") })
	case structs.ACLTokenBootstrapRequestType:
		return applyMsg(buf, w.aclTokenBootstrap)
	case structs.ACLAuthMethodUpsertRequestType:
		return applyMsg(buf, w.aclAuthMethodUpsert)
	case structs.ACLAuthMethodDeleteRequestType:
		return applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLAuthMethods, "auth-method") })
	case structs.ACLBindingRuleUpsertRequestType:
		return applyMsg(buf, w.aclBindingRuleUpsert)
	case structs.ACLBindingRuleDeleteRequestType:
		return applyMsg(buf, func(r *structs.ACLDeleteRequest) error { return w.aclDelete(r, TableACLBindingRules, "binding-rule") })
	case structs.NotificationResultRequestType:
		return applyMsg(buf, w.notificationResult)
	case structs.NotificationPruneRequestType:
		return applyMsg(buf, w.notificationPrune)
	case structs.NotifyMarkRequestType:
		return applyMsg(buf, w.notifyMark)
	case structs.AutopilotSetConfigRequestType:
		return applyMsg(buf, w.autopilotSetConfig)
	case structs.GCRequestType:
		return applyMsg(buf, w.gc)
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
