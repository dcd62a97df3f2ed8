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
const (
	snapshotVersion       = 3
	oldestSnapshotVersion = 2
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
	// The encoder is set up once: Reset would clear its struct tag and
	// flags, and records would then be written under the Go field names.
	var body []byte
	// Canonical sorts map keys (an auth method's claim mappings), so that
	// equal states give equal bytes.
	h := structs.NewMsgpackHandle()
	h.Canonical = true
	enc := codec.NewEncoderBytes(&body, h)
	// Records are gathered in buf and handed to the compressor in large
	// writes.
	const flushAt = 256 << 10
	buf := make([]byte, 0, 2*flushAt)
	flush := func() error {
		if _, err := zw.Write(buf); err != nil {
			return fmt.Errorf("write snapshot: %w", err)
		}
		buf = buf[:0]
		return nil
	}
	var count uint64
	// record closes the record opened at start: its length goes in its
	// header.
	record := func(kind SnapshotType, start int) error {
		n := len(buf) - start - 5
		if n > maxSnapshotRecord {
			return fmt.Errorf("snapshot record of type %d and %d bytes exceeds the limit of %d", kind, n, maxSnapshotRecord)
		}
		binary.BigEndian.PutUint32(buf[start+1:], uint32(n))
		if len(buf) >= flushAt {
			return flush()
		}
		return nil
	}
	for _, t := range snapshotTables {
		it, err := txn.Get(t.table, "id")
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", t.table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			start := len(buf)
			buf = append(buf, byte(t.kind), 0, 0, 0, 0)
			switch o := raw.(type) {
			case *structs.Deployment:
				buf, err = snapcodec.AppendDeployment(buf, o)
			case *structs.Event:
				buf, err = snapcodec.AppendEvent(buf, o)
			default:
				body = body[:0]
				enc.ResetBytes(&body)
				err = enc.Encode(raw)
				buf = append(buf, body...)
			}
			if err != nil {
				return fmt.Errorf("snapshot %s: %w", t.table, err)
			}
			if err := record(t.kind, start); err != nil {
				return err
			}
			count++
		}
	}
	// The end record carries the number of records before it, so that a
	// snapshot cut short at a record boundary is refused, not restored as a
	// smaller state.
	start := len(buf)
	buf = binary.BigEndian.AppendUint64(append(buf, byte(snapshotEnd), 0, 0, 0, 0), count)
	if err := record(snapshotEnd, start); err != nil {
		return err
	}
	if err := flush(); err != nil {
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
	br := bufio.NewReaderSize(r, 256<<10)
	var magic [8]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return fmt.Errorf("read snapshot header: %w", err)
	}
	if !bytes.Equal(magic[:7], snapshotMagic[:7]) {
		return fmt.Errorf("not a Nops state snapshot (header %q)", magic[:])
	}
	var src io.Reader = br
	switch v := magic[7]; {
	case v == snapshotVersion:
		dec, err := getDecoder(br)
		if err != nil {
			return err
		}
		defer putDecoder(dec)
		src = dec
	case v < oldestSnapshotVersion || v > snapshotVersion:
		return fmt.Errorf("not a Nops state snapshot this server can read: format version %d, and it reads versions %d to %d",
			v, oldestSnapshotVersion, snapshotVersion)
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
		decodeErr = d.run()
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
	// The decoder has returned: batches is closed.
	if insertErr != nil {
		return insertErr
	}
	if decodeErr != nil {
		return decodeErr
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

	// lastSeq is the sequence number of the last event read.
	lastSeq uint64
	// events is the rest of the slab events are decoded into.
	events []structs.Event
	// limit, when over 0, bounds the whole state: the records' bytes
	// together, and their number at one per restoreRecordCost bytes;
	// bytesLeft and recordsLeft are what is left of it.
	limit, bytesLeft, recordsLeft int64
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
	kinds := map[SnapshotType]int{}
	for i, t := range snapshotTables {
		kinds[t.kind] = i
	}
	dec := codec.NewDecoderBytes(nil, structs.NewMsgpackHandle())
	mp := snapcodec.NewReader()
	objects := map[string]*eventObjects{}
	var (
		hdr   [5]byte
		buf   []byte
		count uint64
		batch = make([]restoredObject, 0, restoreBatch)
	)
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
		if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("snapshot is truncated after %d records: no end record", count)
			}
			return fmt.Errorf("read snapshot record %d: %w", count+1, err)
		}
		kind, n := SnapshotType(hdr[0]), int(binary.BigEndian.Uint32(hdr[1:]))
		if n > maxSnapshotRecord {
			return fmt.Errorf("snapshot record %d (type %d) claims %d bytes, over the limit of %d", count+1, kind, n, maxSnapshotRecord)
		}
		if err := d.charge(count, kind, n); err != nil {
			return err
		}
		// A record that fits the reader's buffer is decoded where it lies
		// (whatever is kept of it is copied out); a larger one is read in
		// steps.
		var (
			rec []byte
			err error
		)
		peeked := n <= d.r.Size()
		if peeked {
			if rec, err = d.r.Peek(n); errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
		} else {
			buf, err = readRecord(d.r, buf, n)
			rec = buf
		}
		if err != nil {
			return fmt.Errorf("read snapshot record %d: %w", count+1, err)
		}
		if kind == snapshotEnd {
			if n != 8 || binary.BigEndian.Uint64(rec) != count {
				return fmt.Errorf("snapshot end record does not match the %d records read", count)
			}
			if peeked {
				_, _ = d.r.Discard(n)
			}
			if err := d.atEnd(); err != nil {
				return err
			}
			d.sendObjects(batch, objects)
			return nil
		}
		i, ok := kinds[kind]
		if !ok {
			return fmt.Errorf("snapshot record %d is of unknown type %d", count+1, kind)
		}
		t := snapshotTables[i]
		var obj any
		switch kind {
		case DeploymentSnapshot:
			obj, err = decodeDeploymentRecord(mp, dec, rec)
		case EventSnapshot:
			obj, err = d.decodeEventRecord(mp, rec, objects)
		default:
			obj = t.new()
			dec.ResetBytes(rec)
			if err = dec.Decode(obj); err == nil {
				if n := dec.NumBytesRead(); n != len(rec) {
					err = fmt.Errorf("%d trailing bytes", len(rec)-n)
				}
			}
			if err == nil {
				if err := checkTimes(reflect.ValueOf(obj)); err != nil {
					return fmt.Errorf("%w: %s record: %w", ErrBadSnapshot, t.table, err)
				}
			}
		}
		if err != nil {
			if errors.Is(err, ErrBadSnapshot) {
				return err
			}
			return fmt.Errorf("decode snapshot %s record: %w", t.table, err)
		}
		if peeked {
			_, _ = d.r.Discard(n)
		}
		batch = append(batch, restoredObject{t.table, obj})
		count++
		if len(batch) == restoreBatch && !send() {
			return nil
		}
	}
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
