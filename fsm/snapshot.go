package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"
	"time"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
)

// SnapshotType tags each record of a snapshot. Like structs.MessageType the
// list is append-only.
type SnapshotType uint8

const (
	DeploymentSnapshot SnapshotType = iota
	EventSnapshot
	PauseSnapshot
	WindowSnapshot
	LiftSnapshot
	BlockSnapshot
	JobStatusSnapshot
	RepoStatusSnapshot
	MetaSnapshot
	CycleSnapshot
	ACLPolicySnapshot
	ACLRoleSnapshot
	ACLTokenSnapshot
	ACLAuthMethodSnapshot
	ACLBindingRuleSnapshot
	ACLMetaSnapshot
	NotificationSnapshot
	MarkSnapshot
	AutopilotSnapshot
	// New types go here, at the end.
)

// snapshotEnd tags the record that closes a snapshot; it holds the number
// of records before it.
const snapshotEnd SnapshotType = 255

// maxSnapshotRecord bounds one record of a snapshot (one stored object).
const maxSnapshotRecord = 256 << 20

// snapshotMagic opens every snapshot, with its format version.
var snapshotMagic = [8]byte{'N', 'O', 'P', 'S', 'S', 'N', 'P', 2}

// snapshotTables lists what a snapshot holds, in the order it is written.
var snapshotTables = []struct {
	table string
	kind  SnapshotType
	new   func() any
}{
	{TableMeta, MetaSnapshot, func() any { return new(metaRow) }},
	{TableCycle, CycleSnapshot, func() any { return new(cycleRow) }},
	{TableAutopilot, AutopilotSnapshot, func() any { return new(autopilotRow) }},
	{TableWindows, WindowSnapshot, func() any { return new(structs.SyncWindow) }},
	{TablePauses, PauseSnapshot, func() any { return new(structs.Pause) }},
	{TableLifts, LiftSnapshot, func() any { return new(structs.WindowLift) }},
	{TableBlocks, BlockSnapshot, func() any { return new(structs.Block) }},
	{TableRepoStatus, RepoStatusSnapshot, func() any { return new(structs.RepoStatus) }},
	{TableJobStatus, JobStatusSnapshot, func() any { return new(structs.JobStatus) }},
	{TableDeployments, DeploymentSnapshot, func() any { return new(structs.Deployment) }},
	{TableEvents, EventSnapshot, func() any { return new(structs.Event) }},
	{TableACLMeta, ACLMetaSnapshot, func() any { return new(aclMetaRow) }},
	{TableACLPolicies, ACLPolicySnapshot, func() any { return new(structs.ACLPolicy) }},
	{TableACLRoles, ACLRoleSnapshot, func() any { return new(structs.ACLRole) }},
	{TableACLTokens, ACLTokenSnapshot, func() any { return new(structs.ACLToken) }},
	{TableACLAuthMethods, ACLAuthMethodSnapshot, func() any { return new(structs.ACLAuthMethod) }},
	{TableACLBindingRules, ACLBindingRuleSnapshot, func() any { return new(structs.ACLBindingRule) }},
	{TableMarks, MarkSnapshot, func() any { return new(structs.NotifyMark) }},
	{TableNotifications, NotificationSnapshot, func() any { return new(structs.Notification) }},
}

type snapshot struct {
	txn *memdb.Txn
}

// Persist writes the header and one [type][length][msgpack] record per
// object.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(s.txn, sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

func writeSnapshot(txn *memdb.Txn, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(snapshotMagic[:]); err != nil {
		return fmt.Errorf("write snapshot header: %w", err)
	}
	// The encoder is set up once: Reset would clear its struct tag and
	// flags, and records would then be written under the Go field names.
	var body bytesBuffer
	enc := codec.NewEncoderBytes(&body.b, structs.NewMsgpackHandle())
	var (
		hdr   [5]byte
		count uint64
	)
	record := func(kind SnapshotType, b []byte) error {
		if len(b) > maxSnapshotRecord {
			return fmt.Errorf("snapshot record of type %d and %d bytes exceeds the limit of %d", kind, len(b), maxSnapshotRecord)
		}
		hdr[0] = byte(kind)
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
		if _, err := bw.Write(hdr[:]); err != nil {
			return fmt.Errorf("write snapshot: %w", err)
		}
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("write snapshot: %w", err)
		}
		return nil
	}
	for _, t := range snapshotTables {
		it, err := txn.Get(t.table, "id")
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", t.table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			body.b = body.b[:0]
			enc.ResetBytes(&body.b)
			var err error
			if e, ok := raw.(*structs.Event); ok {
				err = encodeEvent(enc, e)
			} else {
				err = enc.Encode(raw)
			}
			if err != nil {
				return fmt.Errorf("snapshot %s: %w", t.table, err)
			}
			if err := record(t.kind, body.b); err != nil {
				return err
			}
			count++
		}
	}
	// The end record carries the number of records before it, so that a
	// snapshot cut short at a record boundary is refused, not restored as a
	// smaller state.
	var end [8]byte
	binary.BigEndian.PutUint64(end[:], count)
	if err := record(snapshotEnd, end[:]); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

type bytesBuffer struct{ b []byte }

func (b *bytesBuffer) Write(p []byte) (int, error) {
	b.b = append(b.b, p...)
	return len(p), nil
}

// restoreInto reads a snapshot into an empty store, in one transaction. A
// snapshot that is cut short, holds a record of an unknown type, a record
// that does not decode, a record twice, or a state that breaks the FSM's
// rules (see validateState) is refused with an error, and the store is left
// empty.
//
// Reading and decoding the records runs on its own goroutine, ahead of the
// inserts, which run in the one write transaction: on a second core the
// two overlap. The records are inserted in the order they were written.
func restoreInto(st *StateStore, r io.Reader) (err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var magic [8]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if magic != snapshotMagic {
		return fmt.Errorf("not a Nops state snapshot (header %q)", magic[:])
	}

	batches := make(chan []restoredObject, 8)
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	var decodeErr error
	go func() {
		defer close(batches)
		// A record the decoder did not foresee refuses the snapshot; it
		// never takes the server down.
		defer func() {
			if p := recover(); p != nil {
				decodeErr = fmt.Errorf("%w: decode panicked: %v", ErrBadSnapshot, p)
			}
		}()
		decodeErr = decodeRecords(br, batches, stop)
	}()

	// A record the checks did not foresee refuses the snapshot rather than
	// take the server down: the decoder is told to stop and drained, so it
	// does not stay blocked.
	defer func() {
		if p := recover(); p != nil {
			halt()
			for range batches {
			}
			err = fmt.Errorf("%w: restore panicked: %v", ErrBadSnapshot, p)
		}
	}()
	txn := st.db.Txn(true)
	defer txn.Abort()
	objects := map[string]*eventObjects{}
	counts := map[string]int{}
	var (
		insertErr error
		lastSeq   uint64
	)
	for batch := range batches {
		if insertErr != nil {
			continue // drain until the decoder sees stop
		}
		for _, o := range batch {
			if e, ok := o.obj.(*structs.Event); ok && e.Seq <= lastSeq {
				insertErr = fmt.Errorf("%w: event %d follows event %d: events must be in strictly increasing order", ErrBadSnapshot, e.Seq, lastSeq)
				halt()
				break
			}
			if err := txn.Insert(o.table, o.obj); err != nil {
				insertErr = fmt.Errorf("restore %s: %w", o.table, err)
				halt()
				break
			}
			counts[o.table]++
			if e, ok := o.obj.(*structs.Event); ok {
				lastSeq = e.Seq
				row := objects[e.Object]
				if row == nil {
					row = &eventObjects{Object: e.Object}
					objects[e.Object] = row
				}
				row.Seqs = append(row.Seqs, e.Seq)
			}
		}
	}
	// The decoder has returned: batches is closed.
	if insertErr != nil {
		return insertErr
	}
	if decodeErr != nil {
		return decodeErr
	}
	// The lists of events by object, rebuilt. Events come in sequence
	// order; the lists go in by key, which builds the tree fastest.
	keys := make([]string, 0, len(objects))
	for k := range objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		row := objects[k]
		if !slices.IsSorted(row.Seqs) {
			return fmt.Errorf("snapshot events of %q are out of order", k)
		}
		if err := txn.Insert(tableEventObjects, row); err != nil {
			return fmt.Errorf("restore events of %q: %w", k, err)
		}
	}
	delete(counts, TableEvents) // strictly increasing: no event twice
	if err := validateState(txn, counts); err != nil {
		return err
	}
	txn.Commit()
	return nil
}

// restoredObject is one decoded record, on its way into its table.
type restoredObject struct {
	table string
	obj   any
}

// decodeRecords reads and decodes the records after the header, and sends
// them in batches until the end record, an error, or stop.
func decodeRecords(br *bufio.Reader, out chan<- []restoredObject, stop <-chan struct{}) error {
	const batchSize = 512
	kinds := map[SnapshotType]int{}
	for i, t := range snapshotTables {
		kinds[t.kind] = i
	}
	dec := codec.NewDecoderBytes(nil, structs.NewMsgpackHandle())
	var (
		hdr   [5]byte
		buf   []byte
		count uint64
		batch = make([]restoredObject, 0, batchSize)
	)
	send := func() bool {
		select {
		case out <- batch:
			batch = make([]restoredObject, 0, batchSize)
			return true
		case <-stop:
			return false
		}
	}
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("snapshot is truncated after %d records: no end record", count)
			}
			return fmt.Errorf("read snapshot record %d: %w", count+1, err)
		}
		kind, n := SnapshotType(hdr[0]), int(binary.BigEndian.Uint32(hdr[1:]))
		if n > maxSnapshotRecord {
			return fmt.Errorf("snapshot record %d (type %d) claims %d bytes, over the limit of %d", count+1, kind, n, maxSnapshotRecord)
		}
		var err error
		if buf, err = readRecord(br, buf, n); err != nil {
			return fmt.Errorf("read snapshot record %d: %w", count+1, err)
		}
		if kind == snapshotEnd {
			if n != 8 || binary.BigEndian.Uint64(buf) != count {
				return fmt.Errorf("snapshot end record does not match the %d records read", count)
			}
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				return fmt.Errorf("snapshot has data after its end record")
			}
			if len(batch) > 0 {
				send()
			}
			return nil
		}
		i, ok := kinds[kind]
		if !ok {
			return fmt.Errorf("snapshot record %d is of unknown type %d", count+1, kind)
		}
		t := snapshotTables[i]
		obj := t.new()
		dec.ResetBytes(buf)
		if e, ok := obj.(*structs.Event); ok {
			err = decodeEvent(dec, buf, e)
		} else {
			err = dec.Decode(obj)
		}
		if err != nil {
			return fmt.Errorf("decode snapshot %s record: %w", t.table, err)
		}
		if n := dec.NumBytesRead(); n != len(buf) {
			return fmt.Errorf("decode snapshot %s record: %d trailing bytes", t.table, len(buf)-n)
		}
		if err := checkTimes(reflect.ValueOf(obj)); err != nil {
			return fmt.Errorf("%w: %s record: %w", ErrBadSnapshot, t.table, err)
		}
		batch = append(batch, restoredObject{t.table, obj})
		count++
		if len(batch) == batchSize && !send() {
			return nil
		}
	}
}

// eventRecord is an event as a snapshot holds it: an array of its fields.
// Events are most of the records of a snapshot, and an array is smaller and
// reads faster than a map of field names. A field is added at the end; a
// reader skips fields it does not know, and leaves fields a shorter array
// lacks at zero.
type eventRecord struct {
	_struct   struct{} `codec:",toarray"` //nolint:unused // read by the codec
	Seq       uint64
	Time      time.Time
	Kind      string
	Object    string
	Namespace string
	JobID     string
	From      string
	To        string
	Actor     string
	Message   string
	Index     uint64
}

// encodeEvent writes an event as an array of its fields.
func encodeEvent(enc *codec.Encoder, e *structs.Event) error {
	r := eventRecord{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Object: e.Object, Namespace: e.Namespace,
		JobID: e.JobID, From: e.From, To: e.To, Actor: e.Actor, Message: e.Message, Index: e.Index}
	return enc.Encode(&r)
}

// decodeEvent reads an event written by encodeEvent. Anything but an array
// (a nil included) is an error.
func decodeEvent(dec *codec.Decoder, buf []byte, e *structs.Event) error {
	if len(buf) == 0 || !isMsgpackArray(buf[0]) {
		return errors.New("event is not an array")
	}
	var r eventRecord
	if err := dec.Decode(&r); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	*e = structs.Event{Seq: r.Seq, Time: r.Time, Kind: r.Kind, Object: r.Object, Namespace: r.Namespace,
		JobID: r.JobID, From: r.From, To: r.To, Actor: r.Actor, Message: r.Message, Index: r.Index}
	return nil
}

// isMsgpackArray reports whether b opens a msgpack array (fixarray, array
// 16 or array 32).
func isMsgpackArray(b byte) bool {
	return b&0xf0 == 0x90 || b == 0xdc || b == 0xdd
}

// readRecord reads a record body of n bytes into buf. A large record is
// read in steps, so a corrupt length cannot make it allocate more than the
// snapshot holds.
func readRecord(r io.Reader, buf []byte, n int) ([]byte, error) {
	const step = 1 << 20
	buf = buf[:0]
	for len(buf) < n {
		m := min(n-len(buf), step)
		if cap(buf)-len(buf) < m {
			buf = append(buf[:cap(buf)], make([]byte, m)...)[:len(buf)]
		}
		if _, err := io.ReadFull(r, buf[len(buf):len(buf)+m]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
		buf = buf[:len(buf)+m]
	}
	return buf, nil
}
