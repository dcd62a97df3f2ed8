package fsm

import (
	"encoding/binary"
	"fmt"
	"reflect"
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

// metaRow holds the store's counters (the last event sequence number, the
// last detection cycle).
type metaRow struct {
	Key   string
	Value uint64
}

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		TableDeployments: {
			Name: TableDeployments,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "ID"}},
				"job": {Name: "job", Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Namespace"},
					&memdb.StringFieldIndex{Field: "JobID"},
				}}},
				"state": {Name: "state", Indexer: &memdb.StringFieldIndex{Field: "State"}},
				// active indexes the non-terminal deployments by job key; the
				// FSM keeps it to at most one per job.
				"active": {Name: "active", Unique: true, AllowMissing: true, Indexer: activeIndex{}},
				// create orders deployments by creation; it is unique, as
				// one log entry creates at most one deployment, so that a
				// reverse range scan from a cursor finds the deployment
				// created just before it (a non-unique index appends the
				// ID to each key, and the scan would skip it).
				"create": {Name: "create", Unique: true, Indexer: &memdb.UintFieldIndex{Field: "CreateIndex"}},
			},
		},
		TableEvents: {
			Name: TableEvents,
			Indexes: map[string]*memdb.IndexSchema{
				"id":     {Name: "id", Unique: true, Indexer: &memdb.UintFieldIndex{Field: "Seq"}},
				"object": {Name: "object", Indexer: &memdb.StringFieldIndex{Field: "Object"}},
				"time":   {Name: "time", Indexer: &timeIndex{Field: "Time"}},
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
	}}
}

func keyed(name, field string) *memdb.TableSchema {
	return &memdb.TableSchema{Name: name, Indexes: map[string]*memdb.IndexSchema{
		"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: field}},
	}}
}

func jobKeyed(name string) *memdb.TableSchema {
	return &memdb.TableSchema{Name: name, Indexes: map[string]*memdb.IndexSchema{
		"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
			&memdb.StringFieldIndex{Field: "Namespace"},
			&memdb.StringFieldIndex{Field: "JobID"},
		}}},
	}}
}

// timeIndex indexes a time.Time field as big-endian Unix nanoseconds, so
// that range scans run in time order.
type timeIndex struct{ Field string }

func (ti *timeIndex) FromObject(obj any) (bool, []byte, error) {
	v := reflect.Indirect(reflect.ValueOf(obj)).FieldByName(ti.Field)
	t, ok := v.Interface().(time.Time)
	if !ok {
		return false, nil, fmt.Errorf("field %s is not a time.Time", ti.Field)
	}
	return true, encodeTime(t), nil
}

func (ti *timeIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("want one argument")
	}
	t, ok := args[0].(time.Time)
	if !ok {
		return nil, fmt.Errorf("argument must be a time.Time: %#v", args[0])
	}
	return encodeTime(t), nil
}

func encodeTime(t time.Time) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(t.UnixNano()))
	return b
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
