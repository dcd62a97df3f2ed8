package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

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
			if err := enc.Encode(raw); err != nil {
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
func restoreInto(st *StateStore, r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var magic [8]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if magic != snapshotMagic {
		return fmt.Errorf("not a Nops state snapshot (header %q)", magic[:])
	}
	kinds := map[SnapshotType]int{}
	for i, t := range snapshotTables {
		kinds[t.kind] = i
	}
	var rd bytesReader
	dec := msgpack.NewDecoder(&rd)
	dec.SetCustomStructTag("json")
	txn := st.db.Txn(true)
	defer txn.Abort()
	var (
		hdr   [5]byte
		buf   []byte
		count uint64
	)
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
			break
		}
		i, ok := kinds[kind]
		if !ok {
			return fmt.Errorf("snapshot record %d is of unknown type %d", count+1, kind)
		}
		t := snapshotTables[i]
		obj := t.new()
		rd.reset(buf)
		if err := dec.Decode(obj); err != nil {
			return fmt.Errorf("decode snapshot %s record: %w", t.table, err)
		}
		if rd.off != len(buf) {
			return fmt.Errorf("decode snapshot %s record: %d trailing bytes", t.table, len(buf)-rd.off)
		}
		if err := txn.Insert(t.table, obj); err != nil {
			return fmt.Errorf("restore %s: %w", t.table, err)
		}
		count++
	}
	txn.Commit()
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
