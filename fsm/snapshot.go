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
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	var (
		body bytesBuffer
		hdr  [5]byte
	)
	for _, t := range snapshotTables {
		it, err := txn.Get(t.table, "id")
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", t.table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			body.b = body.b[:0]
			enc.Reset(&body)
			if err := enc.Encode(raw); err != nil {
				return fmt.Errorf("snapshot %s: %w", t.table, err)
			}
			hdr[0] = byte(t.kind)
			binary.BigEndian.PutUint32(hdr[1:], uint32(len(body.b)))
			if _, err := bw.Write(hdr[:]); err != nil {
				return fmt.Errorf("write snapshot: %w", err)
			}
			if _, err := bw.Write(body.b); err != nil {
				return fmt.Errorf("write snapshot: %w", err)
			}
		}
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

// restoreInto reads a snapshot into an empty store, in one transaction.
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
	dec := msgpack.NewDecoder(nil)
	dec.SetCustomStructTag("json")
	txn := st.db.Txn(true)
	defer txn.Abort()
	var (
		hdr [5]byte
		buf []byte
		rd  bytesReader
	)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("read snapshot record: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return fmt.Errorf("read snapshot record: %w", err)
		}
		i, ok := kinds[SnapshotType(hdr[0])]
		if !ok {
			return fmt.Errorf("snapshot record of unknown type %d", hdr[0])
		}
		t := snapshotTables[i]
		obj := t.new()
		rd.reset(buf)
		dec.Reset(&rd)
		dec.SetCustomStructTag("json")
		if err := dec.Decode(obj); err != nil {
			return fmt.Errorf("decode snapshot %s record: %w", t.table, err)
		}
		if err := txn.Insert(t.table, obj); err != nil {
			return fmt.Errorf("restore %s: %w", t.table, err)
		}
	}
	txn.Commit()
	return nil
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
