package fsm

import (
	"encoding/binary"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
)

// Table names of the state store.
const (
	TableDeployments = "deployments"
	TableEvents      = "events"
	TablePauses      = "pauses"
	TableWindows     = "windows"
	TableLifts       = "lifts"
	TableBlocks      = "blocks"
	TableJobStatus   = "job_status"
	TableRepoStatus  = "repo_status"
	TableMeta        = "meta"
	TableCycle       = "cycle"
)

// tableEventObjects holds the sequence numbers of the events of each
// object. It is derived from the events: a snapshot does not hold it, and
// a restore rebuilds it.
const tableEventObjects = "event_objects"

// eventObjects lists the events of one object, by increasing sequence
// number.
type eventObjects struct {
	Object string
	Seqs   []uint64
}

// metaRow holds the store's counters. They share one row, so that an
// entry writes them once.
type metaRow struct {
	// Key is always metaKey.
	Key string
	// LatestIndex is the Raft index of the last applied entry.
	LatestIndex uint64
	// EventSeq is the sequence number of the last event.
	EventSeq uint64
	// EventMaxTime is the latest event time so far, as a timeKey.
	EventMaxTime uint64
	// EventSkew is the most an event's time has been earlier than an event
	// appended before it, in nanoseconds (see firstEventSince).
	EventSkew uint64
}

// metaKey is the key of the one row of the meta table.
const metaKey = "meta"

func schema() *memdb.DBSchema {
	s := &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		TableDeployments: {
			Name: TableDeployments,
			Indexes: map[string]*memdb.IndexSchema{
				"id":  {Name: "id", Unique: true, Indexer: stringIndex{1, deploymentID}},
				"job": {Name: "job", Indexer: stringIndex{3, deploymentJob}},
				// active indexes the non-terminal deployments by job key; the
				// FSM keeps it to at most one per job.
				"active": {Name: "active", Unique: true, AllowMissing: true, Indexer: activeIndex{}},
				// create orders deployments by creation; it is unique, as
				// one log entry creates at most one deployment (the FSM
				// refuses a second create in a batch entry), so that a
				// reverse range scan from a cursor finds the deployment
				// created just before it (a non-unique index appends the
				// ID to each key, and the scan would skip it).
				"create": {Name: "create", Unique: true, Indexer: uintIndex{deploymentCreateIndex}},
			},
		},
		TableEvents: {
			Name: TableEvents,
			Indexes: map[string]*memdb.IndexSchema{
				// Events are indexed by sequence number only. Events
				// finds the first event since a time by a search over
				// sequence numbers (see firstEventSince), and the events
				// of an object through tableEventObjects. An index of
				// events by time or by object would cost an entry per
				// event on every write, and a million entries, most of
				// them at random places in the tree, on a restore.
				"id": {Name: "id", Unique: true, Indexer: uintIndex{eventSeq}},
			},
		},
		tableEventObjects: {
			Name: tableEventObjects,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: stringIndex{1, eventObjectsKey}},
			},
		},
		TablePauses:     keyed(TablePauses, "Key"),
		TableWindows:    keyed(TableWindows, "Name"),
		TableLifts:      jobKeyed(TableLifts),
		TableBlocks:     jobKeyed(TableBlocks),
		TableJobStatus:  jobKeyed(TableJobStatus),
		TableRepoStatus: keyed(TableRepoStatus, "Name"),
		TableMeta:       keyed(TableMeta, "Key"),
		TableCycle:      keyed(TableCycle, "Key"),

		TableNotifications: notificationsTable(),
		TableMarks:         keyed(TableMarks, "Key"),
		TableAutopilot:     keyed(TableAutopilot, "Key"),

		TableWebhookDeliveries: webhookDeliveriesTable(),
	}}
	addACLTables(s.Tables)
	return s
}

func keyed(name, field string) *memdb.TableSchema {
	return &memdb.TableSchema{Name: name, Indexes: map[string]*memdb.IndexSchema{
		"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: field}},
	}}
}

func jobKeyed(name string) *memdb.TableSchema {
	return &memdb.TableSchema{Name: name, Indexes: map[string]*memdb.IndexSchema{
		"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
			&memdb.StringFieldIndex{Field: "Cluster"},
			&memdb.StringFieldIndex{Field: "Namespace"},
			&memdb.StringFieldIndex{Field: "JobID"},
		}}},
	}}
}

// uintIndex indexes a number as 8 big-endian bytes, so that keys sort in
// the order of the numbers. It reads the number through a typed getter
// rather than reflection: the state store indexes a sequence number on
// every write and a million on a restore.
type uintIndex struct {
	// get returns the number of a stored object.
	get func(obj any) (uint64, bool)
}

func (u uintIndex) FromObject(obj any) (bool, []byte, error) {
	v, ok := u.get(obj)
	if !ok {
		return false, nil, fmt.Errorf("cannot index %T", obj)
	}
	return true, encodeUint(v), nil
}

func (u uintIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("want one argument, got %d", len(args))
	}
	v, ok := args[0].(uint64)
	if !ok {
		return nil, fmt.Errorf("argument must be a uint64: %#v", args[0])
	}
	return encodeUint(v), nil
}

func encodeUint(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// timeKey orders times as numbers: Unix nanoseconds with the sign bit
// flipped, so that times before 1970 sort first.
func timeKey(t time.Time) uint64 { return uint64(t.UnixNano()) ^ 1<<63 }

func deploymentCreateIndex(obj any) (uint64, bool) {
	d, ok := obj.(*structs.Deployment)
	if !ok {
		return 0, false
	}
	return d.CreateIndex, true
}

func eventSeq(obj any) (uint64, bool) {
	e, ok := obj.(*structs.Event)
	if !ok {
		return 0, false
	}
	return e.Seq, true
}

// stringIndex indexes the strings a typed getter returns, each followed by
// a zero byte, as memdb.StringFieldIndex and CompoundIndex do, without
// their reflection. An object with an empty string has no value in the
// index.
type stringIndex struct {
	// n is the number of strings of a key.
	n   int
	get func(obj any, into []string) bool
}

func (s stringIndex) FromObject(obj any) (bool, []byte, error) {
	var parts [3]string
	if !s.get(obj, parts[:s.n]) {
		return false, nil, fmt.Errorf("cannot index %T", obj)
	}
	size := 0
	for _, p := range parts[:s.n] {
		if p == "" {
			return false, nil, nil
		}
		size += len(p) + 1
	}
	// Room for the ID memdb appends to the keys of a non-unique index (a
	// UUID, 36 bytes, and its terminator), so append does not grow b.
	b := make([]byte, 0, size+40)
	for _, p := range parts[:s.n] {
		b = append(append(b, p...), 0)
	}
	return true, b, nil
}

func (s stringIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != s.n {
		return nil, fmt.Errorf("want %d arguments, got %d", s.n, len(args))
	}
	var b []byte
	for _, a := range args {
		v, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("argument must be a string: %#v", a)
		}
		b = append(append(b, v...), 0)
	}
	return b, nil
}

// PrefixFromArgs makes "<index>_prefix" lookups match keys that start
// with the given strings, the last of them possibly partial.
func (s stringIndex) PrefixFromArgs(args ...any) ([]byte, error) {
	if len(args) == 0 || len(args) > s.n {
		return nil, fmt.Errorf("want 1 to %d arguments, got %d", s.n, len(args))
	}
	var b []byte
	for i, a := range args {
		v, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("argument must be a string: %#v", a)
		}
		b = append(b, v...)
		if i < len(args)-1 {
			b = append(b, 0)
		}
	}
	return b, nil
}

func deploymentID(obj any, into []string) bool {
	d, ok := obj.(*structs.Deployment)
	if ok {
		into[0] = d.ID
	}
	return ok
}

func deploymentJob(obj any, into []string) bool {
	d, ok := obj.(*structs.Deployment)
	if ok {
		into[0], into[1], into[2] = d.Cluster, d.Namespace, d.JobID
	}
	return ok
}

func eventObjectsKey(obj any, into []string) bool {
	r, ok := obj.(*eventObjects)
	if ok {
		into[0] = r.Object
	}
	return ok
}

// activeIndex indexes an active deployment by its job key and leaves
// terminal ones out, so the job's one active deployment is a unique lookup
// and every active deployment a prefix scan of "".
type activeIndex struct{}

func (activeIndex) FromObject(obj any) (bool, []byte, error) {
	d, ok := obj.(*structs.Deployment)
	if !ok {
		return false, nil, fmt.Errorf("not a deployment: %T", obj)
	}
	if !d.State.Active() {
		return false, nil, nil
	}
	return true, []byte(d.Key() + "\x00"), nil
}

func (activeIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("want one argument")
	}
	k, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("argument must be a job key string: %#v", args[0])
	}
	return []byte(k + "\x00"), nil
}

func (activeIndex) PrefixFromArgs(args ...any) ([]byte, error) {
	b, err := activeIndex{}.FromArgs(args...)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}
