package agent

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// readCountingStore counts the entries read from the store underneath a
// cache.
type readCountingStore struct {
	*raft.InmemStore
	reads atomic.Int64
}

func (s *readCountingStore) GetLog(index uint64, log *raft.Log) error {
	s.reads.Add(1)
	return s.InmemStore.GetLog(index, log)
}

func testLogEntry(i uint64) *raft.Log {
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry %d", i)}
}

// get reads entry i through the cache, checks what it holds, and reports
// whether the store was read for it.
func get(t *testing.T, c *logCache, store *readCountingStore, i uint64) (fromStore bool) {
	t.Helper()
	before := store.reads.Load()
	var l raft.Log
	if err := c.GetLog(i, &l); err != nil {
		t.Fatalf("entry %d: %v", i, err)
	}
	if l.Index != i || !bytes.Equal(l.Data, testLogEntry(i).Data) {
		t.Fatalf("entry %d reads as index %d, %q", i, l.Index, l.Data)
	}
	return store.reads.Load() != before
}

// TestLogCache_EmptiedWhenIdle: the newest entries are read from memory
// while entries are written, from the store once none has been for the
// idle time, and a delete empties the cache.
func TestLogCache_EmptiedWhenIdle(t *testing.T) {
	store := &readCountingStore{InmemStore: raft.NewInmemStore()}
	c := newLogCache(4, 500*time.Millisecond, store)
	if err := c.StoreLogs([]*raft.Log{testLogEntry(1), testLogEntry(2), testLogEntry(3)}); err != nil {
		t.Fatal(err)
	}
	if get(t, c, store, 2) {
		t.Fatal("entry 2, just written, was read from the store")
	}
	// Writes that go on keep the cache, for longer than the idle time
	// in all.
	for i := uint64(4); i <= 20; i++ {
		time.Sleep(50 * time.Millisecond)
		if err := c.StoreLog(testLogEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if get(t, c, store, 18) {
		t.Fatal("entry 18 was read from the store while entries were being written")
	}
	// Beyond the ring's capacity: the store.
	if !get(t, c, store, 3) {
		t.Fatal("entry 3, older than the ring holds, was read from memory")
	}
	// Idle: every entry from the store.
	deadline := time.Now().Add(5 * time.Second)
	for !get(t, c, store, 20) {
		if time.Now().After(deadline) {
			t.Fatal("entry 20 still read from memory 5 s after the last write")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := uint64(17); i <= 20; i++ {
		if !get(t, c, store, i) {
			t.Fatalf("entry %d read from memory after the cache was emptied", i)
		}
	}
	// Written again: cached again; a delete empties it.
	if err := c.StoreLog(testLogEntry(21)); err != nil {
		t.Fatal(err)
	}
	if get(t, c, store, 21) {
		t.Fatal("entry 21, just written, was read from the store")
	}
	if err := c.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	if !get(t, c, store, 21) {
		t.Fatal("entry 21 read from memory after a delete")
	}
	if first, err := c.FirstIndex(); err != nil || first != 11 {
		t.Fatalf("first index after deleting 1-10: %d, %v", first, err)
	}
}
