package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// countingLogStore counts the batches Raft writes to its log store and the
// entries they hold. Each batch is one disk sync, so entries per batch is
// how well concurrent writes share a sync (group commit): on the leader a
// batch is what Raft took from its apply queue at once, on a follower what
// one AppendEntries carried.
type countingLogStore struct {
	raft.LogStore
	batches prometheus.Counter
	entries prometheus.Counter
}

func newCountingLogStore(store raft.LogStore) *countingLogStore {
	return &countingLogStore{
		LogStore: store,
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_raft_log_store_batches_total",
			Help: "Batches of entries written (and synced) to the Raft log.",
		}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_raft_log_store_entries_total",
			Help: "Entries written to the Raft log.",
		}),
	}
}

func (c *countingLogStore) StoreLog(l *raft.Log) error {
	return c.StoreLogs([]*raft.Log{l})
}

func (c *countingLogStore) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	c.batches.Inc()
	c.entries.Add(float64(len(logs)))
	return nil
}

func (c *countingLogStore) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.batches, c.entries}
}

// logCache keeps the newest entries of the Raft log in memory, as
// raft.LogCache does (a ring of the last capacity entries written), so that
// the leader replicates and applies them without reading them back from
// disk; and empties itself once no entry has been written for idle. The
// entries of a busy phase (the first detection of thousands of jobs writes
// megabytes of them) are otherwise held until as many new ones replace
// them, which on an idle server is never. A follower that lags by more
// than idle reads its entries from the store, as one that lags by more
// than capacity does.
type logCache struct {
	store raft.LogStore
	idle  time.Duration

	mu   sync.RWMutex
	ring []*raft.Log
	// drop empties the ring after idle without writes; nil until the
	// first write.
	drop *time.Timer
}

func newLogCache(capacity int, idle time.Duration, store raft.LogStore) *logCache {
	return &logCache{store: store, idle: idle, ring: make([]*raft.Log, capacity)}
}

// IsMonotonic is the store's (raft.MonotonicLogStore).
func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *logCache) GetLog(index uint64, log *raft.Log) error {
	c.mu.RLock()
	cached := c.ring[index%uint64(len(c.ring))]
	c.mu.RUnlock()
	if cached != nil && cached.Index == index {
		*log = *cached
		return nil
	}
	return c.store.GetLog(index, log)
}

func (c *logCache) StoreLog(log *raft.Log) error {
	return c.StoreLogs([]*raft.Log{log})
}

// StoreLogs writes logs to the store and, once they are written, keeps
// them.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return fmt.Errorf("store raft log entries: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		c.ring[l.Index%uint64(len(c.ring))] = l
	}
	if c.drop == nil {
		c.drop = time.AfterFunc(c.idle, c.empty)
	} else {
		c.drop.Reset(c.idle)
	}
	return nil
}

// empty drops every cached entry.
func (c *logCache) empty() {
	c.mu.Lock()
	clear(c.ring)
	c.mu.Unlock()
}

func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange empties the cache (as raft.LogCache does) and deletes the
// range from the store.
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.empty()
	return c.store.DeleteRange(lo, hi)
}
