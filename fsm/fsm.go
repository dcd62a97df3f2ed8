package fsm

import (
	"fmt"
	"io"
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

// Apply applies one log entry. A malformed entry panics, as Raft cannot
// skip it safely; a request that breaks a rule returns an error as the
// response, and changes nothing.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	t := structs.MessageType(l.Data[0])
	ignoreUnknown := t&structs.IgnoreUnknownTypeFlag != 0
	t &^= structs.IgnoreUnknownTypeFlag
	buf := l.Data[1:]

	st := f.State()
	txn := st.db.Txn(true)
	defer txn.Abort()
	w := &writer{txn: txn, index: l.Index}

	var err error
	switch t {
	case structs.DeploymentCreateRequestType:
		err = applyMsg(buf, w.deploymentCreate)
	case structs.DeploymentTransitionRequestType:
		err = applyMsg(buf, w.deploymentTransition)
	case structs.DeploymentUpdateRequestType:
		err = applyMsg(buf, w.deploymentUpdate)
	case structs.DeploymentDecisionRequestType:
		err = applyMsg(buf, w.deploymentDecision)
	case structs.PauseRequestType:
		err = applyMsg(buf, w.pause)
	case structs.ResumeRequestType:
		err = applyMsg(buf, w.resume)
	case structs.WindowUpsertRequestType:
		err = applyMsg(buf, w.windowUpsert)
	case structs.WindowDeleteRequestType:
		err = applyMsg(buf, w.windowDelete)
	case structs.WindowLiftRequestType:
		err = applyMsg(buf, w.windowLift)
	case structs.JobStatusUpsertRequestType:
		err = applyMsg(buf, w.jobStatusUpsert)
	case structs.JobStatusDeleteRequestType:
		err = applyMsg(buf, w.jobStatusDelete)
	case structs.RepoStatusUpsertRequestType:
		err = applyMsg(buf, w.repoStatusUpsert)
	case structs.DetectionCycleRequestType:
		err = applyMsg(buf, w.detectionCycle)
	case structs.RetryRequestType:
		err = applyMsg(buf, w.retry)
	case structs.EventAppendRequestType:
		err = applyMsg(buf, w.eventAppend)
	default:
		if ignoreUnknown {
			f.logger.Warn("ignoring unknown message type", "type", t, "index", l.Index)
			txn.Abort()
			st.recordIndex(l.Index)
			return nil
		}
		panic(fmt.Errorf("fsm: unknown message type %d at index %d", t, l.Index))
	}
	if err != nil {
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
	return nil
}

// applyMsg decodes a request and runs its apply function. A decode failure
// panics: the log holds an entry this server cannot read, and skipping it
// would make this server's state differ from its peers'.
func applyMsg[T any](buf []byte, fn func(*T) error) error {
	req := new(T)
	if err := structs.Decode(buf, req); err != nil {
		panic(fmt.Errorf("fsm: %w", err))
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
	if err := restoreInto(st, rc); err != nil {
		return err
	}
	f.mu.Lock()
	old := f.state
	f.state = st
	f.mu.Unlock()
	old.broadcast()
	return nil
}

// ReadOnly returns a store holding the state of a snapshot, for inspection.
func ReadOnly(r io.Reader) (*StateStore, error) {
	st, err := NewStateStore()
	if err != nil {
		return nil, err
	}
	if err := restoreInto(st, r); err != nil {
		return nil, err
	}
	return st, nil
}
