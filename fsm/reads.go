package fsm

import (
	"fmt"

	memdb "github.com/hashicorp/go-memdb"
)

// idReads answers a write transaction's lookups by primary key ("id")
// without reading through the transaction.
//
// A read through a memdb write transaction, of an index the transaction
// has changed, clones that index's radix transaction, and cloning it
// empties the transaction's cache of the tree nodes it has copied so far:
// the next insert into the index copies its whole path from the root
// again, with a fresh cache. The FSM looks a key up before nearly every insert
// (the window it replaces, the event list it appends to), so a batch of
// writes copied each path once per write instead of once per batch.
//
// idReads answers from the objects the transaction itself wrote or
// deleted, which writer.insert and writer.delete record, and for any other
// key from a read transaction of the state the write transaction started
// from: memdb admits one writer at a time, so no other change can lie
// between the two. A table the transaction changes in a way it does not
// follow (writer.deleteAll, or a write that failed part way) is read
// through the write transaction for the rest of it. So every answer is the
// one the write transaction would give. Lookups by any other index go
// through the write transaction.
type idReads struct {
	schema *memdb.DBSchema
	txn    *memdb.Txn
	// base is the read transaction of the state txn started from; nil
	// sends every read through txn.
	base *memdb.Txn
	// written holds, by table and primary key, what the transaction
	// wrote: the object, or nil once deleted.
	written map[string]map[string]any
	// direct holds the tables read through txn.
	direct map[string]bool
}

// newIDReads returns the reads of txn, a write transaction of db that has
// changed nothing yet.
func newIDReads(db *memdb.MemDB, txn *memdb.Txn) *idReads {
	return &idReads{schema: db.DBSchema(), txn: txn, base: db.Txn(false)}
}

// directReads returns reads that all go through txn. A transaction of one
// request has little to reuse (the FSM looks a key up before it changes
// it), and the overlay would cost it more allocations than it saves.
func directReads(txn *memdb.Txn) *idReads {
	return &idReads{txn: txn}
}

// lookup is what the FSM's lookups read from: a memdb transaction, or a
// writer's idReads.
type lookup interface {
	First(table, index string, args ...any) (any, error)
}

// idIndexer returns the table's primary key indexer.
func (r *idReads) idIndexer(table string) (memdb.Indexer, error) {
	t, ok := r.schema.Tables[table]
	if !ok {
		return nil, fmt.Errorf("invalid table %q", table)
	}
	idx, ok := t.Indexes["id"]
	if !ok {
		return nil, fmt.Errorf("table %q has no id index", table)
	}
	return idx.Indexer, nil
}

// First returns the first object of table whose index matches args, or
// nil, as the write transaction has it.
func (r *idReads) First(table, index string, args ...any) (any, error) {
	if index == "id" && len(args) == 0 {
		// memdb would answer the table's first object; no lookup by
		// primary key asks for that.
		return nil, fmt.Errorf("table %q: a lookup by id needs the key", table)
	}
	if r.base == nil || index != "id" || r.direct[table] {
		return r.txn.First(table, index, args...)
	}
	if byKey := r.written[table]; byKey != nil {
		indexer, err := r.idIndexer(table)
		if err != nil {
			return nil, err
		}
		key, err := indexer.FromArgs(args...)
		if err != nil {
			return nil, fmt.Errorf("index error: %w", err)
		}
		if obj, ok := byKey[string(key)]; ok {
			return obj, nil
		}
	}
	return r.base.First(table, "id", args...)
}

// wrote records obj as the table's object under its primary key, or, when
// deleted, that the key has none.
func (r *idReads) wrote(table string, obj any, deleted bool) {
	if r.base == nil || r.direct[table] {
		return
	}
	key, err := r.objectKey(table, obj)
	if err != nil {
		// Never taken: memdb has just stored obj under this key. A key
		// that cannot be followed sends the table's reads through txn.
		r.readDirect(table)
		return
	}
	if r.written == nil {
		r.written = make(map[string]map[string]any)
	}
	byKey := r.written[table]
	if byKey == nil {
		byKey = make(map[string]any)
		r.written[table] = byKey
	}
	if deleted {
		byKey[key] = nil
	} else {
		byKey[key] = obj
	}
}

func (r *idReads) objectKey(table string, obj any) (string, error) {
	indexer, err := r.idIndexer(table)
	if err != nil {
		return "", err
	}
	single, ok := indexer.(memdb.SingleIndexer)
	if !ok {
		return "", fmt.Errorf("table %q: id index is not single-valued", table)
	}
	ok, key, err := single.FromObject(obj)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("table %q: object has no id", table)
	}
	return string(key), nil
}

// readDirect sends the table's reads through the write transaction for
// the rest of it.
func (r *idReads) readDirect(table string) {
	if r.base == nil {
		return
	}
	if r.direct == nil {
		r.direct = make(map[string]bool)
	}
	r.direct[table] = true
}
