package agent

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// ErrRaftLogInconsistent is the error of a server whose Raft log Raft
// cannot run on: it would panic, and panic again at every start.
var ErrRaftLogInconsistent = errors.New("the Raft log is inconsistent")

// keyCurrentTerm is the stable store key of hashicorp/raft's current term.
var keyCurrentTerm = []byte("CurrentTerm")

// raftLogRecovery tells the operator how to bring back a server whose Raft
// log is inconsistent.
const raftLogRecovery = "to recover, stop this server, move %s aside and start it again: it rejoins the cluster " +
	"and takes the leader's snapshot; if no healthy server is left, start a new cluster and restore a snapshot " +
	"(nops operator snapshot restore), or recover the survivors with peers.json (docs/production.md)"

// checkRaftLog checks, before Raft starts, what Raft takes on trust and
// panics on when it is wrong: the log continues the newest snapshot without
// a gap, every entry after the snapshot (those Raft reads at start and
// applies) is readable, holds its own index and, for a configuration,
// decodes, and no entry is of a term newer than the current term. An error
// wraps ErrRaftLogInconsistent, names the index and says how to recover.
func checkRaftLog(raftDir string, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
	if err := checkLogStore(logs, stable, snaps); err != nil {
		return fmt.Errorf("%w in %s: %w; "+raftLogRecovery, ErrRaftLogInconsistent, raftDir, err, raftDir)
	}
	return nil
}

func checkLogStore(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("reading the first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("reading the last index: %w", err)
	}
	if last == 0 {
		return nil
	}
	if first == 0 || first > last {
		return fmt.Errorf("first index %d and last index %d do not make a log", first, last)
	}
	snapIndex, err := newestSnapshotIndex(snaps)
	if err != nil {
		return err
	}
	if first > snapIndex+1 {
		snapshot := fmt.Sprintf("the newest snapshot ends at index %d", snapIndex)
		if snapIndex == 0 {
			snapshot = "there is no snapshot"
		}
		return fmt.Errorf("the log starts at index %d and %s: entries %d to %d are missing", first, snapshot, snapIndex+1, first-1)
	}
	lastEntry, err := walkLog(logs, min(max(first, snapIndex+1), last), first, last)
	if err != nil {
		return err
	}
	return checkTerm(stable, lastEntry)
}

// newestSnapshotIndex returns the last index of the newest snapshot, 0
// without one.
func newestSnapshotIndex(snaps raft.SnapshotStore) (uint64, error) {
	metas, err := snaps.List()
	if err != nil {
		return 0, fmt.Errorf("listing the snapshots: %w", err)
	}
	if len(metas) == 0 {
		return 0, nil
	}
	return metas[0].Index, nil
}

// walkLog reads the entries from..last, as Raft does at start, and
// returns the last.
func walkLog(logs raft.LogStore, from, first, last uint64) (*raft.Log, error) {
	var l raft.Log
	for idx := from; idx <= last; idx++ {
		if err := logs.GetLog(idx, &l); err != nil {
			return nil, fmt.Errorf("entry at index %d (the log runs from %d to %d): %w", idx, first, last, err)
		}
		if l.Index != idx {
			return nil, fmt.Errorf("entry at index %d holds index %d", idx, l.Index)
		}
		if err := checkEntry(&l); err != nil {
			return nil, fmt.Errorf("entry at index %d: %w", idx, err)
		}
	}
	return &l, nil
}

// checkTerm refuses a last entry of a term newer than the current term,
// which Raft always raises first.
func checkTerm(stable raft.StableStore, last *raft.Log) error {
	term, err := stable.GetUint64(keyCurrentTerm)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return fmt.Errorf("reading the current term: %w", err)
	}
	if last.Term > term {
		return fmt.Errorf("entry at index %d is of term %d, newer than the current term %d", last.Index, last.Term, term)
	}
	return nil
}
