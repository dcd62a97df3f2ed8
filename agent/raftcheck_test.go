package agent_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// A server whose Raft log Raft would panic on, at once and at every start,
// refuses to start instead, with an error that names the index and says
// how to recover. Each case damages the data dir of a real server that ran
// and stopped.
func TestRaftLogCheck_RefusesInconsistentLog(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, store *raftboltdb.BoltStore, last uint64)
		want   string
	}{
		{"entry past the log, as a forged AppendEntries left it", func(t *testing.T, store *raftboltdb.BoltStore, _ uint64) {
			storeLog(t, store, &raft.Log{Index: 1000000, Term: 1000, Type: raft.LogCommand})
			if err := store.SetUint64([]byte("CurrentTerm"), 1000); err != nil {
				t.Fatal(err)
			}
		}, "(the log runs from 1 to 1000000): log not found"},
		{"first entries missing", func(t *testing.T, store *raftboltdb.BoltStore, _ uint64) {
			if err := store.DeleteRange(1, 2); err != nil {
				t.Fatal(err)
			}
		}, "the log starts at index 3 and there is no snapshot: entries 1 to 2 are missing"},
		{"entry newer than the current term", func(t *testing.T, store *raftboltdb.BoltStore, last uint64) {
			storeLog(t, store, &raft.Log{Index: last + 1, Term: 1000, Type: raft.LogNoop})
		}, "is of term 1000, newer than the current term"},
		{"configuration that does not decode", func(t *testing.T, store *raftboltdb.BoltStore, last uint64) {
			storeLog(t, store, &raft.Log{Index: last + 1, Term: 1, Type: raft.LogConfiguration, Data: []byte{0xc1}})
		}, "configuration does not decode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := nopstest.Start(t, dir, nopstest.WithoutReconcilers())
			s.Shutdown()

			store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft", "raft.db")})
			if err != nil {
				t.Fatal(err)
			}
			last, err := store.LastIndex()
			if err != nil || last < 3 {
				t.Fatalf("last index %d, %v: want a log of at least 3 entries", last, err)
			}
			tc.damage(t, store, last)
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}

			srv, err := agent.New(nopstest.Config(t, dir), hclog.NewNullLogger(), agent.Options{})
			if err == nil {
				srv.Shutdown()
				t.Fatal("the server started on a damaged Raft log")
			}
			t.Log(err)
			if !errors.Is(err, agent.ErrRaftLogInconsistent) {
				t.Fatalf("error %v does not wrap ErrRaftLogInconsistent", err)
			}
			for _, want := range []string{tc.want, filepath.Join(dir, "raft"), "nops operator snapshot restore", "peers.json"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

func storeLog(t *testing.T, store *raftboltdb.BoltStore, l *raft.Log) {
	t.Helper()
	if err := store.StoreLog(l); err != nil {
		t.Fatal(err)
	}
}
