package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// checkRPC passes what a leader sends and refuses, naming the index, the
// AppendEntries that would leave a gap in the log or make Raft panic as it
// stores an entry.
func TestCheckRPC(t *testing.T) {
	entries := func(first uint64, n int) []*raft.Log {
		var out []*raft.Log
		for i := range n {
			out = append(out, &raft.Log{Index: first + uint64(i), Term: 2, Type: raft.LogCommand})
		}
		return out
	}
	conf := func(index uint64, data []byte) *raft.Log {
		return &raft.Log{Index: index, Term: 2, Type: raft.LogConfiguration, Data: data}
	}
	good := raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "127.0.0.1:1"}}})
	cases := []struct {
		name string
		cmd  any
		want string // empty: passes
	}{
		{"heartbeat", &raft.AppendEntriesRequest{Term: 2}, ""},
		{"first entries", &raft.AppendEntriesRequest{Term: 2, Entries: entries(1, 3)}, ""},
		{"next entries", &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 7, Entries: entries(8, 2)}, ""},
		{"commit only", &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 7, LeaderCommitIndex: 1000000}, ""},
		{"configuration", &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 3, Entries: []*raft.Log{conf(4, good)}}, ""},
		{"vote", &raft.RequestVoteRequest{Term: 1000, LastLogIndex: 1000000}, ""},
		{"entry past the log", &raft.AppendEntriesRequest{Term: 1000, Entries: entries(1000000, 1), LeaderCommitIndex: 1000000},
			"entry at index 1000000 where index 1 follows the previous entry 0"},
		{"gap inside", &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 4, Entries: append(entries(5, 1), entries(9, 1)...)},
			"entry at index 9 where index 6 follows the previous entry 4"},
		{"behind the previous entry", &raft.AppendEntriesRequest{Term: 2, PrevLogEntry: 4, Entries: entries(3, 1)},
			"entry at index 3 where index 5 follows"},
		{"nil entry", &raft.AppendEntriesRequest{Term: 2, Entries: []*raft.Log{nil}}, "entry 0 of the request is empty"},
		{"bad configuration", &raft.AppendEntriesRequest{Term: 2, Entries: []*raft.Log{conf(1, []byte{0xc1})}},
			"entry at index 1: configuration does not decode"},
		{"old peer change", &raft.AppendEntriesRequest{Term: 2, Entries: []*raft.Log{{Index: 1, Type: raft.LogAddPeerDeprecated}}},
			"entry at index 1: peer change of a Raft protocol before 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRPC(tc.cmd)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errRefusedAppend) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want errRefusedAppend saying %q", err, tc.want)
			}
		})
	}
}
