package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

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
	// New types go here, at the end.
)

// snapshotEnd tags the record that closes a snapshot; it holds the number
// of records before it.
const snapshotEnd SnapshotType = 255

// maxSnapshotRecord bounds one record of a snapshot (one stored object).
const maxSnapshotRecord = 256 << 20

// snapshotMagic opens every snapshot, with its format version.
var snapshotMagic = [8]byte{'N', 'O', 'P', 'S', 'S', 'N', 'P', 1}

// snapshotTables lists what a snapshot holds, in the order it is written.
var snapshotTables = []struct {
	table string
	kind  SnapshotType
	new   func() any
}{
	{TableMeta, MetaSnapshot, func() any { return new(metaRow) }},
	{TableCycle, CycleSnapshot, func() any { return new(cycleRow) }},
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
	enc := msgpack.NewEncoder(&body)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
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
// snapshot that is cut short, holds a record of an unknown type or a record
// that does not decode is refused with an error, and the store is left
// empty.
//
// Reading and decoding the records runs on its own goroutine, ahead of the
// inserts, which run in the one write transaction: on a second core the
// two overlap. The records are inserted in the order they were written.
func restoreInto(st *StateStore, r io.Reader) error {
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
	var decodeErr error
	go func() {
		defer close(batches)
		decodeErr = decodeRecords(br, batches, stop)
	}()

	txn := st.db.Txn(true)
	defer txn.Abort()
	objects := map[string]*eventObjects{}
	var insertErr error
	for batch := range batches {
		if insertErr != nil {
			continue // drain until the decoder sees stop
		}
		for _, o := range batch {
			if err := txn.Insert(o.table, o.obj); err != nil {
				insertErr = fmt.Errorf("restore %s: %w", o.table, err)
				close(stop)
				break
			}
			if e, ok := o.obj.(*structs.Event); ok {
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
	var rd bytesReader
	dec := msgpack.NewDecoder(&rd)
	dec.SetCustomStructTag("json")
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
		rd.reset(buf)
		if e, ok := obj.(*structs.Event); ok {
			err = decodeEvent(dec, e)
		} else {
			err = dec.Decode(obj)
		}
		if err != nil {
			return fmt.Errorf("decode snapshot %s record: %w", t.table, err)
		}
		if rd.off != len(buf) {
			return fmt.Errorf("decode snapshot %s record: %d trailing bytes", t.table, len(buf)-rd.off)
		}
		batch = append(batch, restoredObject{t.table, obj})
		count++
		if len(batch) == batchSize && !send() {
			return nil
		}
	}
}

// encodeEvent writes an event as an array of its fields, in the order of
// decodeEvent. Events are most of the records of a snapshot, and an array
// is smaller and reads faster than a map of field names. A field is added
// at the end; a reader skips fields it does not know, and leaves fields a
// shorter array lacks at zero.
func encodeEvent(enc *msgpack.Encoder, e *structs.Event) error {
	err := enc.EncodeArrayLen(11)
	for i := 0; err == nil && i < 11; i++ {
		switch i {
		case 0:
			err = enc.EncodeUint(e.Seq)
		case 1:
			err = enc.EncodeTime(e.Time)
		case 2:
			err = enc.EncodeString(e.Kind)
		case 3:
			err = enc.EncodeString(e.Object)
		case 4:
			err = enc.EncodeString(e.Namespace)
		case 5:
			err = enc.EncodeString(e.JobID)
		case 6:
			err = enc.EncodeString(e.From)
		case 7:
			err = enc.EncodeString(e.To)
		case 8:
			err = enc.EncodeString(e.Actor)
		case 9:
			err = enc.EncodeString(e.Message)
		case 10:
			err = enc.EncodeUint(e.Index)
		}
	}
	return err
}

// decodeEvent reads an event written by encodeEvent.
func decodeEvent(dec *msgpack.Decoder, e *structs.Event) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	if n < 0 {
		return errors.New("event is nil")
	}
	for i := 0; i < n; i++ {
		switch i {
		case 0:
			e.Seq, err = dec.DecodeUint64()
		case 1:
			e.Time, err = dec.DecodeTime()
		case 2:
			e.Kind, err = dec.DecodeString()
		case 3:
			e.Object, err = dec.DecodeString()
		case 4:
			e.Namespace, err = dec.DecodeString()
		case 5:
			e.JobID, err = dec.DecodeString()
		case 6:
			e.From, err = dec.DecodeString()
		case 7:
			e.To, err = dec.DecodeString()
		case 8:
			e.Actor, err = dec.DecodeString()
		case 9:
			e.Message, err = dec.DecodeString()
		case 10:
			e.Index, err = dec.DecodeUint64()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return fmt.Errorf("event field %d: %w", i, err)
		}
	}
	return nil
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

type bytesReader struct {
	b   []byte
	off int
}

func (r *bytesReader) reset(b []byte) { r.b, r.off = b, 0 }

func (r *bytesReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (r *bytesReader) ReadByte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *bytesReader) UnreadByte() error {
	if r.off == 0 {
		return errors.New("unread at start")
	}
	r.off--
	return nil
}
