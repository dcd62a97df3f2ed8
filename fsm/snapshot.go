package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"

	memdb "github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/klauspost/compress/zstd"

	"github.com/nops-dev/nops/fsm/snapcodec"
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
	WebhookDeliverySnapshot
	// New types go here, at the end.
)

// snapshotEnd tags the record that closes a snapshot; it holds the number
// of records before it.
const snapshotEnd SnapshotType = 255

// maxSnapshotRecord bounds one record of a snapshot (one stored object).
const maxSnapshotRecord = 256 << 20

// restoreRecordCost bounds the number of records of a limited restore: a
// limit of L bytes admits at most L/restoreRecordCost records. A record
// decodes to an object and entries in the store's indexes that cost far
// more memory than a record of a few bytes shows, so the bytes alone do
// not bound a restore's memory; the states Nops writes average several
// times this per record (their smallest, events, 40 to 200 bytes).
const restoreRecordCost = 64

// snapshotVersion is the format this server writes; it reads
// oldestSnapshotVersion to snapshotVersion.
//
// Format 4 records the Nomad cluster of every job-keyed object (SPEC
// section 16); a snapshot of an older format holds none, and its objects
// restore as of the default cluster (withCluster). Format 3 compressed the
// records; format 2 did not.
const (
	snapshotVersion       = 4
	oldestSnapshotVersion = 2
	firstCompressedFormat = 3
)

// snapshotMagic opens every snapshot, with its format version.
var snapshotMagic = [8]byte{'N', 'O', 'P', 'S', 'S', 'N', 'P', snapshotVersion}

// DefaultMaxStateSize bounds the state ReadOnly reads from a snapshot,
// decompressed: as much as snapshot archives hold by default.
const DefaultMaxStateSize = 1 << 30

// snapshotWindow is the zstd window the records are compressed with: a
// few hundred deployments, whose job specs look alike. A reader refuses a
// stream that claims more than maxSnapshotWindow, so that a hostile one
// cannot make it allocate a large window.
const (
	snapshotWindow    = 4 << 20
	maxSnapshotWindow = 8 << 20
)

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
	{TableWebhookDeliveries, WebhookDeliverySnapshot, func() any { return new(structs.WebhookDelivery) }},
}

// snapshot is a point-in-time view of the state: a read transaction,
// which costs nothing to take and does not hold up the FSM. Persist does
// all the work, while the FSM goes on applying.
type snapshot struct {
	txn *memdb.Txn
}

// Persist writes the snapshot: see writeSnapshot.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(s.txn, sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// Encoders and decoders are reused: each holds a window of some
// megabytes.
var (
	zstdEncoders sync.Pool
	zstdDecoders sync.Pool
)

func getEncoder(w io.Writer) (*zstd.Encoder, error) {
	if e, ok := zstdEncoders.Get().(*zstd.Encoder); ok {
		e.Reset(w)
		return e, nil
	}
	// One block is compressed while the next is encoded: on a second
	// core, the two overlap.
	e, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(snapshotWindow),
		zstd.WithEncoderConcurrency(2), zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, fmt.Errorf("snapshot compressor: %w", err)
	}
	return e, nil
}

func putEncoder(e *zstd.Encoder) {
	e.Reset(nil)
	zstdEncoders.Put(e)
}

func getDecoder(r io.Reader) (*zstd.Decoder, error) {
	if d, ok := zstdDecoders.Get().(*zstd.Decoder); ok {
		if err := d.Reset(r); err != nil {
			return nil, fmt.Errorf("snapshot decompressor: %w", err)
		}
		return d, nil
	}
	// Decompression runs on the goroutine that decodes the records: the
	// inserts keep the other core busy.
	d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxSnapshotWindow),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, fmt.Errorf("snapshot decompressor: %w", err)
	}
	return d, nil
}

func putDecoder(d *zstd.Decoder) {
	if d.Reset(nil) == nil {
		zstdDecoders.Put(d)
	}
}

// writeSnapshot writes the header, then a zstd stream of one
// [type][length][msgpack] record per object and the end record. Equal
// states give equal bytes.
func writeSnapshot(txn *memdb.Txn, w io.Writer) (err error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	if _, err := bw.Write(snapshotMagic[:]); err != nil {
		return fmt.Errorf("write snapshot header: %w", err)
	}
	zw, err := getEncoder(bw)
	if err != nil {
		return err
	}
	defer putEncoder(zw)
	rw := newRecordWriter(zw)
	for _, t := range snapshotTables {
		if err := rw.table(txn, t.table, t.kind); err != nil {
			return err
		}
	}
	if err := rw.end(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return nil
}

// flushAt is how many bytes of records a recordWriter gathers before it
// hands them to the compressor.
const flushAt = 256 << 10

// recordWriter writes the records of a snapshot: it gathers them in buf
// and hands them to the compressor in large writes, and counts them.
type recordWriter struct {
	zw *zstd.Encoder
	// enc writes the kinds that go through the codec into body. It is set
	// up once: Reset would clear its struct tag and flags, and records
	// would then be written under the Go field names.
	enc   *codec.Encoder
	body  []byte
	buf   []byte
	count uint64
}

func newRecordWriter(zw *zstd.Encoder) *recordWriter {
	rw := &recordWriter{zw: zw, buf: make([]byte, 0, 2*flushAt)}
	// Canonical sorts map keys (an auth method's claim mappings), so that
	// equal states give equal bytes.
	h := structs.NewMsgpackHandle()
	h.Canonical = true
	rw.enc = codec.NewEncoderBytes(&rw.body, h)
	return rw
}

func (rw *recordWriter) flush() error {
	if _, err := rw.zw.Write(rw.buf); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	rw.buf = rw.buf[:0]
	return nil
}

// record closes the record opened at start: its length goes in its
// header.
func (rw *recordWriter) record(kind SnapshotType, start int) error {
	n := len(rw.buf) - start - 5
	if n > maxSnapshotRecord {
		return fmt.Errorf("snapshot record of type %d and %d bytes exceeds the limit of %d", kind, n, maxSnapshotRecord)
	}
	binary.BigEndian.PutUint32(rw.buf[start+1:], uint32(n))
	if len(rw.buf) >= flushAt {
		return rw.flush()
	}
	return nil
}

// table writes a record of kind for each object of table.
func (rw *recordWriter) table(txn *memdb.Txn, table string, kind SnapshotType) error {
	it, err := txn.Get(table, "id")
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", table, err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		start := len(rw.buf)
		rw.buf = append(rw.buf, byte(kind), 0, 0, 0, 0)
		switch o := raw.(type) {
		case *structs.Deployment:
			rw.buf, err = snapcodec.AppendDeployment(rw.buf, o)
		case *structs.Event:
			rw.buf, err = snapcodec.AppendEvent(rw.buf, o)
		default:
			rw.body = rw.body[:0]
			rw.enc.ResetBytes(&rw.body)
			err = rw.enc.Encode(raw)
			rw.buf = append(rw.buf, rw.body...)
		}
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", table, err)
		}
		if err := rw.record(kind, start); err != nil {
			return err
		}
		rw.count++
	}
	return nil
}

// end writes the end record, which carries the number of records before
// it, so that a snapshot cut short at a record boundary is refused, not
// restored as a smaller state; and hands the rest to the compressor.
func (rw *recordWriter) end() error {
	start := len(rw.buf)
	rw.buf = binary.BigEndian.AppendUint64(append(rw.buf, byte(snapshotEnd), 0, 0, 0, 0), rw.count)
	if err := rw.record(snapshotEnd, start); err != nil {
		return err
	}
	return rw.flush()
}

// restoreInto reads a snapshot into an empty store, in one transaction. A
// snapshot that is cut short or corrupt, expands past limit bytes (0 for no
// limit), holds a record of an unknown type, a record that does not decode,
// a record twice, or a state that breaks the FSM's rules (see
// validateState) is refused with an error, and the store is left empty.
//
// Decompressing, reading, decoding and checking the records runs on its own
// goroutine, ahead of the inserts, which run in the one write transaction:
// on a second core the two overlap. The records are inserted in the order
// they were written.
func restoreInto(st *StateStore, r io.Reader, limit int64) (err error) {
	src, zr, err := openSnapshot(bufio.NewReaderSize(r, 256<<10))
	if err != nil {
		return err
	}
	if zr != nil {
		defer putDecoder(zr)
	}
	if limit > 0 {
		src = &stateLimit{r: src, n: limit, limit: limit}
	}

	batches := make(chan []restoredObject, 8)
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	d := &recordDecoder{r: bufio.NewReaderSize(src, 1<<20), out: batches, stop: stop,
		limit: limit, bytesLeft: limit, recordsLeft: limit / restoreRecordCost}
	go d.decode()

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
	counts, err := insertBatches(txn, batches, halt)
	// The decoder has returned: batches is closed.
	if err != nil {
		return err
	}
	if d.err != nil {
		return d.err
	}
	// The decoder checked that events come in strictly increasing order,
	// so none is there twice, and built the lists of events by object.
	delete(counts, TableEvents)
	delete(counts, tableEventObjects)
	if err := validateState(txn, counts, d.lastSeq); err != nil {
		return err
	}
	latest := readMeta(txn).LatestIndex
	txn.Commit()
	st.committed(latest)
	return nil
}

// openSnapshot reads the header and returns the reader of the records
// that follow it, and the decompressor it reads through, to be given back
// once they are read (nil for format 2, which is not compressed).
func openSnapshot(br *bufio.Reader) (io.Reader, *zstd.Decoder, error) {
	var magic [8]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return nil, nil, fmt.Errorf("read snapshot header: %w", err)
	}
	if !bytes.Equal(magic[:7], snapshotMagic[:7]) {
		return nil, nil, fmt.Errorf("not a Nops state snapshot (header %q)", magic[:])
	}
	switch v := magic[7]; {
	case v >= firstCompressedFormat && v <= snapshotVersion:
		dec, err := getDecoder(br)
		if err != nil {
			return nil, nil, err
		}
		return dec, dec, nil
	case v < oldestSnapshotVersion || v > snapshotVersion:
		return nil, nil, fmt.Errorf("not a Nops state snapshot this server can read: format version %d, and it reads versions %d to %d",
			v, oldestSnapshotVersion, snapshotVersion)
	}
	return br, nil, nil
}

// insertBatches inserts the decoded objects into txn in the order they
// come, until batches is closed, and counts them by table. After a failed
// insert it halts the decoder and drains what it still sends.
func insertBatches(txn *memdb.Txn, batches <-chan []restoredObject, halt func()) (map[string]int, error) {
	counts := map[string]int{}
	var insertErr error
	for batch := range batches {
		if insertErr != nil {
			continue // drain until the decoder sees stop
		}
		for _, o := range batch {
			if err := txn.Insert(o.table, o.obj); err != nil {
				insertErr = fmt.Errorf("restore %s: %w", o.table, err)
				halt()
				break
			}
			counts[o.table]++
		}
	}
	return counts, insertErr
}

// stateLimit reads up to a limit, and reports going past it as an error.
type stateLimit struct {
	r        io.Reader
	n, limit int64
}

func (l *stateLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// At the limit, a state that ends there is within it.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n == 0 && err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("snapshot state expands past the limit of %d bytes", l.limit)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// restoredObject is one decoded record, on its way into its table.
type restoredObject struct {
	table string
	obj   any
}

// recordDecoder reads, decodes and checks the records after the header,
// and sends them in batches, followed by the lists of events by object.
type recordDecoder struct {
	r    *bufio.Reader
	out  chan<- []restoredObject
	stop <-chan struct{}
	// err is the error the decoder ended with, once out is closed.
	err error

	// lastSeq is the sequence number of the last event read.
	lastSeq uint64
	// events is the rest of the slab events are decoded into.
	events []structs.Event
	// limit, when over 0, bounds the whole state: the records' bytes
	// together, and their number at one per restoreRecordCost bytes;
	// bytesLeft and recordsLeft are what is left of it.
	limit, bytesLeft, recordsLeft int64

	// What run reads with: the index of each kind in snapshotTables, the
	// decoders, the lists of events by object it builds, the header of
	// the record read and the buffer of a record too large to peek.
	kinds   map[SnapshotType]int
	dec     *codec.Decoder
	mp      *snapcodec.Reader
	objects map[string]*eventObjects
	hdr     [5]byte
	buf     []byte
}

// decode runs the decoder, and closes its output when it returns; d.err
// is then its error. A record the decoder did not foresee refuses the
// snapshot; it never takes the server down.
func (d *recordDecoder) decode() {
	defer close(d.out)
	defer func() {
		if p := recover(); p != nil {
			d.err = fmt.Errorf("%w: decode panicked: %v", ErrBadSnapshot, p)
		}
	}()
	d.err = d.run()
}

// charge counts record number count, of n bytes, against the whole
// state's limit, before the record is read: a record that claims more
// than is left is refused from its header.
func (d *recordDecoder) charge(count uint64, kind SnapshotType, n int) error {
	if d.limit <= 0 {
		return nil
	}
	if int64(n) > d.bytesLeft {
		return fmt.Errorf("snapshot record %d (type %d) claims %d bytes, more than the %d left of the limit of %d bytes for the whole state",
			count+1, kind, n, d.bytesLeft, d.limit)
	}
	if d.recordsLeft <= 0 {
		return fmt.Errorf("snapshot holds more than %d records, past the limit of %d bytes for the whole state (one record per %d bytes)",
			d.limit/restoreRecordCost, d.limit, restoreRecordCost)
	}
	d.bytesLeft -= int64(n)
	d.recordsLeft--
	return nil
}

// eventSlab is how many events are allocated together.
const eventSlab = 256

const restoreBatch = 512

// run decodes until the end record, an error, or stop.
func (d *recordDecoder) run() error {
	d.kinds = map[SnapshotType]int{}
	for i, t := range snapshotTables {
		d.kinds[t.kind] = i
	}
	d.dec = codec.NewDecoderBytes(nil, structs.NewMsgpackHandle())
	d.mp = snapcodec.NewReader()
	d.objects = map[string]*eventObjects{}
	var count uint64
	batch := make([]restoredObject, 0, restoreBatch)
	send := func() bool {
		select {
		case d.out <- batch:
			batch = make([]restoredObject, 0, restoreBatch)
			return true
		case <-d.stop:
			return false
		}
	}
	for {
		kind, rec, peeked, err := d.next(count)
		if err != nil {
			return err
		}
		if kind == snapshotEnd {
			return d.end(count, rec, peeked, batch)
		}
		o, err := d.decodeRecord(count, kind, rec)
		if err != nil {
			return err
		}
		if peeked {
			_, _ = d.r.Discard(len(rec))
		}
		batch = append(batch, o)
		count++
		if len(batch) == restoreBatch && !send() {
			return nil
		}
	}
}

// next reads the header and the body of record number count+1, once
// charged against the limit. A record that fits the reader's buffer is
// decoded where it lies (peeked: whatever is kept of it is copied out, and
// the caller discards it once decoded); a larger one is read in steps.
func (d *recordDecoder) next(count uint64) (kind SnapshotType, rec []byte, peeked bool, err error) {
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, false, fmt.Errorf("snapshot is truncated after %d records: no end record", count)
		}
		return 0, nil, false, fmt.Errorf("read snapshot record %d: %w", count+1, err)
	}
	kind, n := SnapshotType(d.hdr[0]), int(binary.BigEndian.Uint32(d.hdr[1:]))
	if n > maxSnapshotRecord {
		return 0, nil, false, fmt.Errorf("snapshot record %d (type %d) claims %d bytes, over the limit of %d", count+1, kind, n, maxSnapshotRecord)
	}
	if err := d.charge(count, kind, n); err != nil {
		return 0, nil, false, err
	}
	peeked = n <= d.r.Size()
	if peeked {
		if rec, err = d.r.Peek(n); errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	} else {
		d.buf, err = readRecord(d.r, d.buf, n)
		rec = d.buf
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("read snapshot record %d: %w", count+1, err)
	}
	return kind, rec, peeked, nil
}

// end checks the end record rec, which closes the count records read, and
// that nothing follows it, and sends the last batch and the lists of
// events by object.
func (d *recordDecoder) end(count uint64, rec []byte, peeked bool, batch []restoredObject) error {
	if len(rec) != 8 || binary.BigEndian.Uint64(rec) != count {
		return fmt.Errorf("snapshot end record does not match the %d records read", count)
	}
	if peeked {
		_, _ = d.r.Discard(len(rec))
	}
	if err := d.atEnd(); err != nil {
		return err
	}
	d.sendObjects(batch, d.objects)
	return nil
}

// decodeRecord decodes and checks record number count+1, of kind.
func (d *recordDecoder) decodeRecord(count uint64, kind SnapshotType, rec []byte) (restoredObject, error) {
	i, ok := d.kinds[kind]
	if !ok {
		return restoredObject{}, fmt.Errorf("snapshot record %d is of unknown type %d", count+1, kind)
	}
	t := snapshotTables[i]
	var (
		obj any
		err error
	)
	switch kind {
	case DeploymentSnapshot:
		obj, err = decodeDeploymentRecord(d.mp, d.dec, rec)
	case EventSnapshot:
		obj, err = d.decodeEventRecord(d.mp, rec, d.objects)
	default:
		obj = t.new()
		err = decodeCodecRecord(d.dec, rec, obj, t.table)
	}
	if err != nil {
		if errors.Is(err, ErrBadSnapshot) {
			return restoredObject{}, err
		}
		return restoredObject{}, fmt.Errorf("decode snapshot %s record: %w", t.table, err)
	}
	withCluster(obj)
	return restoredObject{t.table, obj}, nil
}

// withCluster gives a job-keyed object restored without a cluster (one of
// a snapshot written before clusters) the default cluster, as the FSM
// gives one of an entry written before them: the store's indexes key such
// objects by cluster, namespace and job. Events and notifications, which
// no index keys by job, keep what they recorded: no cluster reads as the
// default cluster (structs.ClusterName).
func withCluster(obj any) {
	switch o := obj.(type) {
	case *structs.Deployment:
		o.Cluster = structs.ClusterName(o.Cluster)
	case *structs.Block:
		o.Cluster = structs.ClusterName(o.Cluster)
	case *structs.WindowLift:
		o.Cluster = structs.ClusterName(o.Cluster)
	case *structs.JobStatus:
		o.Cluster = structs.ClusterName(o.Cluster)
	case *structs.Pause:
		if !o.Global {
			o.Cluster = structs.ClusterName(o.Cluster)
		}
	}
}

// decodeCodecRecord decodes a record the codec wrote into obj, and checks
// its times.
func decodeCodecRecord(dec *codec.Decoder, rec []byte, obj any, table string) error {
	dec.ResetBytes(rec)
	if err := dec.Decode(obj); err != nil {
		return err
	}
	if n := dec.NumBytesRead(); n != len(rec) {
		return fmt.Errorf("%d trailing bytes", len(rec)-n)
	}
	if err := checkTimes(reflect.ValueOf(obj)); err != nil {
		return fmt.Errorf("%w: %s record: %w", ErrBadSnapshot, table, err)
	}
	return nil
}

// atEnd checks that the snapshot ends after its end record: no more data,
// and, compressed, a stream whose checksum matches.
func (d *recordDecoder) atEnd() error {
	_, err := d.r.ReadByte()
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		return errors.New("snapshot has data after its end record")
	case errors.Is(err, zstd.ErrCRCMismatch):
		return fmt.Errorf("snapshot is corrupt: %w", err)
	}
	return fmt.Errorf("snapshot has data after its end record that does not read: %w", err)
}

// sendObjects sends the last batch and the lists of events by object, in
// key order, which builds the tree fastest.
func (d *recordDecoder) sendObjects(batch []restoredObject, objects map[string]*eventObjects) {
	keys := make([]string, 0, len(objects))
	for k := range objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := batch
	for _, k := range keys {
		out = append(out, restoredObject{tableEventObjects, objects[k]})
	}
	if len(out) > 0 {
		// One batch: the inserter takes it whole.
		select {
		case d.out <- out:
		case <-d.stop:
		}
	}
}

// decodeDeploymentRecord reads a deployment: an array of its fields, as
// snapcodec.AppendDeployment writes it, or a map of them, as the codec
// writes it (and as snapshots of format 2 hold it).
func decodeDeploymentRecord(mp *snapcodec.Reader, dec *codec.Decoder, buf []byte) (*structs.Deployment, error) {
	dep := new(structs.Deployment)
	if len(buf) > 0 && snapcodec.IsArray(buf[0]) {
		mp.Reset(buf)
		if err := snapcodec.DecodeDeployment(mp, dep); err != nil {
			return nil, err
		}
		if mp.Rest() != 0 {
			return nil, fmt.Errorf("%d trailing bytes", mp.Rest())
		}
		mp.Done()
		if err := checkDeploymentTimes(dep); err != nil {
			return nil, fmt.Errorf("%w: %s record: %w", ErrBadSnapshot, TableDeployments, err)
		}
		return dep, nil
	}
	dec.ResetBytes(buf)
	if err := dec.Decode(dep); err != nil {
		return nil, err
	}
	if n := dec.NumBytesRead(); n != len(buf) {
		return nil, fmt.Errorf("%d trailing bytes", len(buf)-n)
	}
	if err := checkTimes(reflect.ValueOf(dep)); err != nil {
		return nil, fmt.Errorf("%w: %s record: %w", ErrBadSnapshot, TableDeployments, err)
	}
	return dep, nil
}

// decodeEventRecord reads an event and checks it as the FSM checks the
// events it appends: a kind, an object and a time, and a sequence number
// above the last one's. (That it is not past the counters' is checked once
// the counters are in: see validateState.) It adds the event to the list
// of its object's.
func (d *recordDecoder) decodeEventRecord(mp *snapcodec.Reader, buf []byte, objects map[string]*eventObjects) (*structs.Event, error) {
	// Events are allocated in slabs: a million of them would otherwise
	// be a million allocations.
	if len(d.events) == 0 {
		d.events = make([]structs.Event, eventSlab)
	}
	e := &d.events[0]
	mp.Reset(buf)
	if err := snapcodec.DecodeEvent(mp, e); err != nil {
		return nil, err
	}
	if mp.Rest() != 0 {
		return nil, fmt.Errorf("%d trailing bytes", mp.Rest())
	}
	mp.Done()
	d.events = d.events[1:]
	bad := func(err error) error { return fmt.Errorf("%w: %s: %w", ErrBadSnapshot, TableEvents, err) }
	if err := checkTime(e.Time); err != nil {
		return nil, bad(err)
	}
	if e.Seq <= d.lastSeq {
		return nil, fmt.Errorf("%w: event %d follows event %d: events must be in strictly increasing order", ErrBadSnapshot, e.Seq, d.lastSeq)
	}
	if e.Kind == "" || e.Object == "" {
		return nil, bad(invalid("event %d: an event needs a kind and an object", e.Seq))
	}
	if e.Time.IsZero() {
		return nil, bad(invalid("event %d has no time: the leader stamps every event", e.Seq))
	}
	d.lastSeq = e.Seq
	row := objects[e.Object]
	if row == nil {
		row = &eventObjects{Object: e.Object}
		objects[e.Object] = row
	}
	row.Seqs = append(row.Seqs, e.Seq)
	return e, nil
}

// readRecord reads a record body of n bytes into buf. A record larger
// than buf is read in steps, and only once it is all there is it put
// together, so that a corrupt or hostile length cannot make it allocate
// more than the snapshot holds, nor leave garbage of several times that.
func readRecord(r io.Reader, buf []byte, n int) ([]byte, error) {
	const step = 1 << 20
	if n <= cap(buf) {
		buf = buf[:n]
		_, err := io.ReadFull(r, buf)
		return buf, noEOF(err)
	}
	var chunks [][]byte
	for got := 0; got < n; {
		c := make([]byte, min(step, n-got))
		if _, err := io.ReadFull(r, c); err != nil {
			return buf[:0], noEOF(err)
		}
		chunks = append(chunks, c)
		got += len(c)
	}
	buf = make([]byte, 0, n)
	for _, c := range chunks {
		buf = append(buf, c...)
	}
	return buf, nil
}

// noEOF turns the end of the snapshot inside a record into an error.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
