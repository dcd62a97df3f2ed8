package fsm

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

const cycleKey = "cycle"

// cycleRowKey is the key of the last detection cycle of a cluster: the
// default cluster's keeps the key it had before clusters.
func cycleRowKey(cluster string) string {
	if c := structs.ClusterName(cluster); c != structs.DefaultCluster {
		return cycleKey + "/" + c
	}
	return cycleKey
}

// cycleRow stores the last detection cycle of one cluster.
type cycleRow struct {
	Key   string
	Cycle *structs.DetectionCycle
}

// StateStore is the replicated state: a go-memdb database written only by
// the FSM and read by everyone else. Readers get copies, never the stored
// objects. Its memdb tracks no mutations (see NewStateStore): a watch
// channel of it is never closed, and a reader waits for a change on
// Changed instead.
type StateStore struct {
	db *memdb.MemDB
	// latest is the LatestIndex of the counters, stored once each write
	// transaction has committed: every answer reads it (X-Nops-Index), and
	// a read transaction for it cost about 2% of the CPU of a write.
	latest atomic.Uint64

	mu     sync.Mutex
	notify chan struct{}
}

// NewStateStore returns an empty state store.
//
// The store's memdb tracks no mutations: nothing reads through memdb's
// watch channels (a change is announced by Changed, once per transaction),
// and a tracking database closes, on every commit, the channel of every tree
// node the transaction copied, after recording each in a map. A MemDB's
// Snapshot is the same database without the tracking; the store writes to
// it as memdb's own snapshots are written to.
func NewStateStore() (*StateStore, error) {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("create state store: %w", err)
	}
	return &StateStore{db: db.Snapshot(), notify: make(chan struct{})}, nil
}

// Changed returns a channel that is closed at the next change of the state.
func (s *StateStore) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

func (s *StateStore) broadcast() {
	s.mu.Lock()
	close(s.notify)
	s.notify = make(chan struct{})
	s.mu.Unlock()
}

// LatestIndex returns the Raft index of the last applied entry.
//
// It is stored after the transaction commits, so a reader may see the state
// of an index a moment before LatestIndex does, never the other way round:
// an index a blocking query waits past is in the state it then reads.
func (s *StateStore) LatestIndex() uint64 {
	return s.latest.Load()
}

// committed records the latest index of a write transaction that has just
// committed.
func (s *StateStore) committed(index uint64) {
	s.latest.Store(index)
}

// readMeta returns a copy of the store's counters.
func readMeta(txn *memdb.Txn) metaRow {
	raw, err := txn.First(TableMeta, "id", metaKey)
	if err != nil || raw == nil {
		return metaRow{Key: metaKey}
	}
	return *raw.(*metaRow)
}

// Deployment returns one deployment, or nil.
func (s *StateStore) Deployment(id string) (*structs.Deployment, error) {
	raw, err := s.db.Txn(false).First(TableDeployments, "id", id)
	if err != nil {
		return nil, fmt.Errorf("deployment lookup: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.Deployment).Copy(), nil
}

// ActiveDeployment returns the job's active deployment, or nil.
func (s *StateStore) ActiveDeployment(cluster, namespace, jobID string) (*structs.Deployment, error) {
	raw, err := s.db.Txn(false).First(TableDeployments, "active", structs.JobKey(cluster, namespace, jobID))
	if err != nil {
		return nil, fmt.Errorf("active deployment lookup: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.Deployment).Copy(), nil
}

// ActiveDeployments returns every active deployment.
func (s *StateStore) ActiveDeployments() ([]*structs.Deployment, error) {
	it, err := s.db.Txn(false).Get(TableDeployments, "active_prefix", "")
	if err != nil {
		return nil, fmt.Errorf("active deployments: %w", err)
	}
	var out []*structs.Deployment
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*structs.Deployment).Copy())
	}
	return out, nil
}

// DeploymentFilter selects deployments; empty fields match all.
type DeploymentFilter struct {
	Cluster   string
	Namespace string
	JobID     string
	State     structs.DeploymentState
	// Before, when set, returns only deployments created before that Raft
	// index (the pagination cursor).
	Before uint64
	Limit  int
}

// Deployments returns deployments newest first, and the cursor of the next
// page (0 when there is none).
func (s *StateStore) Deployments(f DeploymentFilter) ([]*structs.Deployment, uint64, error) {
	txn := s.db.Txn(false)
	var (
		it  memdb.ResultIterator
		err error
	)
	if f.Before > 0 {
		it, err = txn.ReverseLowerBound(TableDeployments, "create", f.Before-1)
	} else {
		it, err = txn.GetReverse(TableDeployments, "create")
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list deployments: %w", err)
	}
	var out []*structs.Deployment
	for raw := it.Next(); raw != nil; raw = it.Next() {
		d := raw.(*structs.Deployment)
		if (f.Cluster != "" && d.Cluster != f.Cluster) ||
			(f.Namespace != "" && d.Namespace != f.Namespace) ||
			(f.JobID != "" && d.JobID != f.JobID) ||
			(f.State != "" && d.State != f.State) {
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			return out, out[len(out)-1].CreateIndex, nil
		}
		out = append(out, d.Copy())
	}
	return out, 0, nil
}

// LastDeployment returns the job's most recent deployment, or nil.
func (s *StateStore) LastDeployment(cluster, namespace, jobID string) (*structs.Deployment, error) {
	return s.lastDeployment(cluster, namespace, jobID, func(*structs.Deployment) bool { return true })
}

// LastCompletedDeployment returns the job's most recent completed
// deployment, or nil: what a new deployment's file diff starts from.
func (s *StateStore) LastCompletedDeployment(cluster, namespace, jobID string) (*structs.Deployment, error) {
	return s.lastDeployment(cluster, namespace, jobID, func(d *structs.Deployment) bool {
		return d.State == structs.StateCompleted
	})
}

// lastDeployment returns a copy of the job's most recent deployment that
// keep accepts, or nil.
func (s *StateStore) lastDeployment(cluster, namespace, jobID string, keep func(*structs.Deployment) bool) (*structs.Deployment, error) {
	it, err := s.db.Txn(false).Get(TableDeployments, "job", structs.ClusterName(cluster), namespace, jobID)
	if err != nil {
		return nil, fmt.Errorf("job deployments: %w", err)
	}
	var last *structs.Deployment
	for raw := it.Next(); raw != nil; raw = it.Next() {
		d := raw.(*structs.Deployment)
		if keep(d) && (last == nil || d.CreateIndex > last.CreateIndex) {
			last = d
		}
	}
	return last.Copy(), nil
}

// EventFilter selects events; empty fields match all.
type EventFilter struct {
	// AfterSeq returns events with a greater sequence number.
	AfterSeq uint64
	// Since returns events at or after that time.
	Since  time.Time
	Kind   string
	Object string
	Limit  int
}

// Events returns events oldest first.
func (s *StateStore) Events(f EventFilter) ([]*structs.Event, error) {
	txn := s.db.Txn(false)
	from := f.AfterSeq + 1
	if !f.Since.IsZero() {
		first, err := firstEventSince(txn, f.Since)
		if err != nil {
			return nil, err
		}
		from = max(from, first)
	}
	var next func() (any, error)
	if f.Object != "" {
		raw, err := txn.First(tableEventObjects, "id", f.Object)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		var seqs []uint64
		if raw != nil {
			seqs = raw.(*eventObjects).Seqs
		}
		i := sort.Search(len(seqs), func(i int) bool { return seqs[i] >= from })
		next = func() (any, error) {
			if i == len(seqs) {
				return nil, nil
			}
			i++
			return txn.First(TableEvents, "id", seqs[i-1])
		}
	} else {
		it, err := txn.LowerBound(TableEvents, "id", from)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		next = func() (any, error) { return it.Next(), nil }
	}
	var out []*structs.Event
	for {
		raw, err := next()
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		if raw == nil {
			return out, nil
		}
		e := raw.(*structs.Event)
		if (!f.Since.IsZero() && e.Time.Before(f.Since)) || (f.Kind != "" && e.Kind != f.Kind) {
			continue
		}
		c := *e
		out = append(out, &c)
		if f.Limit > 0 && len(out) == f.Limit {
			return out, nil
		}
	}
}

// firstEventSince returns a sequence number before which no event is at or
// after since.
//
// Event times are stamped by the leader and may go back a little when
// leadership moves to a server whose clock is behind; the state keeps skew,
// the most any event's time has been earlier than one appended before it.
// Let M(s) be the latest time among the events up to seq s: it never
// decreases, and M(s) <= time(s) + skew. The predicate "the event at or
// after s is at or after since-skew" is therefore false wherever
// M(s) < since-skew and true wherever M(s) >= since. A bisection keeps it
// false at lo and true at hi, and ends with hi = lo+1: M(lo) < since, so
// no event up to lo is at or after since, and the scan may start at hi.
// With no skew it starts at exactly the first event at or after since.
func firstEventSince(txn *memdb.Txn, since time.Time) (uint64, error) {
	m := readMeta(txn)
	threshold, skew := timeKey(since), m.EventSkew
	if skew >= threshold {
		return 1, nil
	}
	threshold -= skew
	lo, hi := uint64(0), m.EventSeq+1
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		it, err := txn.LowerBound(TableEvents, "id", mid)
		if err != nil {
			return 0, fmt.Errorf("list events: %w", err)
		}
		if raw := it.Next(); raw == nil || timeKey(raw.(*structs.Event).Time) >= threshold {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// Pauses returns every pause.
func (s *StateStore) Pauses() ([]*structs.Pause, error) {
	return list[structs.Pause](s.db.Txn(false), TablePauses)
}

// Paused returns the pause that holds the job, or nil; holds.Paused owns
// the rule (the pause of every job first).
func (s *StateStore) Paused(cluster, namespace, jobID string) (*structs.Pause, error) {
	return pausedTxn(s.db.Txn(false), cluster, namespace, jobID)
}

// pausedTxn looks up the only pauses that can hold the job (the pause of
// every job and the job's own) and lets holds.Paused choose among them.
func pausedTxn(txn lookup, cluster, namespace, jobID string) (*structs.Pause, error) {
	candidates, err := jobPausesTxn(txn, cluster, namespace, jobID)
	if err != nil {
		return nil, err
	}
	return holds.Paused(candidates, cluster, namespace, jobID), nil
}

// jobPausesTxn returns the pauses that can hold the job: the pause of
// every job, that of its cluster and the job's own, those that exist.
func jobPausesTxn(txn lookup, cluster, namespace, jobID string) ([]*structs.Pause, error) {
	var candidates []*structs.Pause
	cluster = structs.ClusterName(cluster)
	for _, key := range []string{structs.GlobalPauseKey, structs.ClusterPauseKey(cluster), structs.JobKey(cluster, namespace, jobID)} {
		raw, err := txn.First(TablePauses, "id", key)
		if err != nil {
			return nil, fmt.Errorf("pause lookup: %w", err)
		}
		if raw != nil {
			c := *raw.(*structs.Pause)
			candidates = append(candidates, &c)
		}
	}
	return candidates, nil
}

// JobHolds returns, read at one index, what besides the sync windows
// decides whether the job's next deployment may start: the pauses that can
// hold it (the pause of every job and its own) and its stored deploy now,
// or nil. Read together, a deploy now never shows without a pause that was
// committed before it: deploy now lifts a window, never a pause.
func (s *StateStore) JobHolds(cluster, namespace, jobID string) ([]*structs.Pause, *structs.WindowLift, error) {
	txn := s.db.Txn(false)
	pauses, err := jobPausesTxn(txn, cluster, namespace, jobID)
	if err != nil {
		return nil, nil, err
	}
	lift, err := first[structs.WindowLift](txn, TableLifts, structs.ClusterName(cluster), namespace, jobID)
	if err != nil {
		return nil, nil, err
	}
	return pauses, lift, nil
}

// Windows returns every sync window, by name.
func (s *StateStore) Windows() ([]*structs.SyncWindow, error) {
	out, err := list[structs.SyncWindow](s.db.Txn(false), TableWindows)
	for _, w := range out {
		copyWindowSlices(w)
	}
	return out, err
}

// WindowsSince returns the sync windows written after index (their modify
// index is greater), and the greatest modify index of all the windows. It
// copies only the windows it returns: a poll for changes costs a walk of
// the table, not a copy of it.
func (s *StateStore) WindowsSince(index uint64) ([]*structs.SyncWindow, uint64, error) {
	it, err := s.db.Txn(false).Get(TableWindows, "id")
	if err != nil {
		return nil, index, fmt.Errorf("list %s: %w", TableWindows, err)
	}
	var out []*structs.SyncWindow
	newest := index
	for raw := it.Next(); raw != nil; raw = it.Next() {
		w := raw.(*structs.SyncWindow)
		newest = max(newest, w.ModifyIndex)
		if w.ModifyIndex <= index {
			continue
		}
		c := *w
		copyWindowSlices(&c)
		out = append(out, &c)
	}
	return out, newest, nil
}

// Window returns one sync window, or nil.
func (s *StateStore) Window(name string) (*structs.SyncWindow, error) {
	w, err := first[structs.SyncWindow](s.db.Txn(false), TableWindows, name)
	if w != nil {
		copyWindowSlices(w)
	}
	return w, err
}

// copyWindowSlices keeps a window handed to a reader from sharing its
// selectors with the stored one.
func copyWindowSlices(w *structs.SyncWindow) {
	w.Namespaces = append([]string(nil), w.Namespaces...)
	w.Jobs = append([]string(nil), w.Jobs...)
	w.Clusters = append([]string(nil), w.Clusters...)
}

// Lift returns the job's pending deploy-now request, or nil.
func (s *StateStore) Lift(cluster, namespace, jobID string) (*structs.WindowLift, error) {
	return first[structs.WindowLift](s.db.Txn(false), TableLifts, structs.ClusterName(cluster), namespace, jobID)
}

// Lifts returns every pending deploy-now request.
func (s *StateStore) Lifts() ([]*structs.WindowLift, error) {
	return list[structs.WindowLift](s.db.Txn(false), TableLifts)
}

// Block returns the job's block, or nil.
func (s *StateStore) Block(cluster, namespace, jobID string) (*structs.Block, error) {
	return first[structs.Block](s.db.Txn(false), TableBlocks, structs.ClusterName(cluster), namespace, jobID)
}

// Blocks returns every block.
func (s *StateStore) Blocks() ([]*structs.Block, error) {
	return list[structs.Block](s.db.Txn(false), TableBlocks)
}

// JobStatus returns the observed status of one job, or nil.
func (s *StateStore) JobStatus(cluster, namespace, jobID string) (*structs.JobStatus, error) {
	st, err := first[structs.JobStatus](s.db.Txn(false), TableJobStatus, structs.ClusterName(cluster), namespace, jobID)
	if st != nil {
		st.Errors = append([]string(nil), st.Errors...)
	}
	return st, err
}

// JobStatuses returns the observed status of every job, by namespace and ID.
func (s *StateStore) JobStatuses() ([]*structs.JobStatus, error) {
	out, err := list[structs.JobStatus](s.db.Txn(false), TableJobStatus)
	for _, st := range out {
		st.Errors = append([]string(nil), st.Errors...)
	}
	return out, err
}

// RepoStatuses returns the observed status of every repository.
func (s *StateStore) RepoStatuses() ([]*structs.RepoStatus, error) {
	out, err := list[structs.RepoStatus](s.db.Txn(false), TableRepoStatus)
	for _, r := range out {
		r.ParseErrors = append([]string(nil), r.ParseErrors...)
	}
	return out, err
}

// DetectionCycle returns the last completed detection cycle of any
// cluster (the one that finished last), or nil.
func (s *StateStore) DetectionCycle() (*structs.DetectionCycle, error) {
	rows, err := list[cycleRow](s.db.Txn(false), TableCycle)
	if err != nil {
		return nil, fmt.Errorf("detection cycle lookup: %w", err)
	}
	var last *structs.DetectionCycle
	for _, r := range rows {
		if r.Cycle != nil && (last == nil || r.Cycle.FinishedAt.After(last.FinishedAt)) {
			last = r.Cycle
		}
	}
	if last == nil {
		return nil, nil
	}
	c := *last
	return &c, nil
}

// ClusterDetectionCycle returns the last completed detection cycle of one
// cluster, or nil.
func (s *StateStore) ClusterDetectionCycle(cluster string) (*structs.DetectionCycle, error) {
	raw, err := s.db.Txn(false).First(TableCycle, "id", cycleRowKey(cluster))
	if err != nil {
		return nil, fmt.Errorf("detection cycle lookup: %w", err)
	}
	if raw == nil || raw.(*cycleRow).Cycle == nil {
		return nil, nil
	}
	c := *raw.(*cycleRow).Cycle
	return &c, nil
}

// Counts returns the number of objects of each table, for snapshot
// inspection and metrics.
func (s *StateStore) Counts() (map[string]int, error) {
	txn := s.db.Txn(false)
	out := map[string]int{}
	for _, t := range []string{TableDeployments, TableEvents, TablePauses, TableWindows, TableLifts,
		TableBlocks, TableJobStatus, TableRepoStatus, TableNotifications} {
		it, err := txn.Get(t, "id")
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", t, err)
		}
		n := 0
		for raw := it.Next(); raw != nil; raw = it.Next() {
			n++
		}
		out[t] = n
	}
	return out, nil
}

func first[T any](txn lookup, table string, args ...any) (*T, error) {
	raw, err := txn.First(table, "id", args...)
	if err != nil {
		return nil, fmt.Errorf("%s lookup: %w", table, err)
	}
	if raw == nil {
		return nil, nil
	}
	c := *raw.(*T)
	return &c, nil
}

func list[T any](txn *memdb.Txn, table string) ([]*T, error) {
	it, err := txn.Get(table, "id")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", table, err)
	}
	var out []*T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		c := *raw.(*T)
		out = append(out, &c)
	}
	return out, nil
}
