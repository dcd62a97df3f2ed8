package nopstest_test

import (
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

func TestStateRank(t *testing.T) {
	t.Parallel()
	want := map[structs.DeploymentState]int{
		structs.StateDetected:        0,
		structs.StatePendingApproval: 1,
		structs.StatePreHook:         2,
		structs.StateApplying:        3,
		structs.StatePostHook:        4,
		structs.StateCompleted:       5,
		structs.StateFailed:          5,
		structs.StateRejected:        5,
		structs.StateSuperseded:      5,
		"no-such-state":              5,
	}
	for state, rank := range want {
		if got := nopstest.StateRank(state); got != rank {
			t.Errorf("StateRank(%q) = %d, want %d", state, got, rank)
		}
	}
	for _, tr := range structs.Transitions {
		if from, to := nopstest.StateRank(tr.From), nopstest.StateRank(tr.To); to <= from {
			t.Errorf("transition %s -> %s goes from rank %d to %d, want higher", tr.From, tr.To, from, to)
		}
	}
}
