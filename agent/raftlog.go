package agent

import (
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
