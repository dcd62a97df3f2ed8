package agent

import (
	"errors"
	"net/http"
	"testing"

	"github.com/hashicorp/raft"

	agenthttp "github.com/nops-dev/nops/agent/http"
	"github.com/nops-dev/nops/structs"
)

// TestProposeError_OutcomeOfRaftRefusals: an entry Raft never sent is "not
// applied" (503, and a follower may send it to the next leader); an entry
// sent before the leader was deposed may still commit, so its answer is
// 502, "may or may not have been applied". Answering 503 for it told a
// client that retried a pause or an approval it was safe to, and a write
// the client was told had not happened showed in later reads (the chaos
// test's history was not linearizable).
func TestProposeError_OutcomeOfRaftRefusals(t *testing.T) {
	for _, tc := range []struct {
		raftErr   error
		status    int
		notLeader bool
		lost      bool
	}{
		{raft.ErrNotLeader, http.StatusServiceUnavailable, true, false},
		{raft.ErrLeadershipTransferInProgress, http.StatusServiceUnavailable, true, false},
		{raft.ErrLeadershipLost, http.StatusBadGateway, true, true},
		{raft.ErrEnqueueTimeout, http.StatusInternalServerError, false, false},
	} {
		err := proposeError(structs.PauseRequestType, tc.raftErr)
		if got := agenthttp.StatusOf(err); got != tc.status {
			t.Errorf("%v: status %d, want %d (%v)", tc.raftErr, got, tc.status, err)
		}
		if got := errors.Is(err, structs.ErrNotLeader); got != tc.notLeader {
			t.Errorf("%v: errors.Is(ErrNotLeader) = %v, want %v", tc.raftErr, got, tc.notLeader)
		}
		if got := errors.Is(err, structs.ErrLeadershipLost); got != tc.lost {
			t.Errorf("%v: errors.Is(ErrLeadershipLost) = %v, want %v", tc.raftErr, got, tc.lost)
		}
		if !errors.Is(err, tc.raftErr) {
			t.Errorf("%v: the cause is lost: %v", tc.raftErr, err)
		}
	}
}
