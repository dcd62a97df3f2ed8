package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

var triggers = []structs.Trigger{structs.TriggerSystem, structs.TriggerApprove, structs.TriggerReject}

// testApprovalTTL is the approval TTL of the deployments driveTo makes:
// long enough for every request of a test, so that only a test that moves
// the clock past it sees one expire.
const testApprovalTTL = time.Hour

// driveTo creates a deployment with one pre- and one post-hook for its own
// job and brings it to state s through allowed moves only.
func driveTo(h *harness, id string, s structs.DeploymentState) *structs.Deployment {
	h.t.Helper()
	d := testDeployment(id, "default", "job-"+id, 1, 1)
	d.Policy = structs.PolicyApproval
	d.ApprovalTTL = testApprovalTTL
	h.create(d)
	switch s {
	case structs.StateDetected:
	case structs.StatePendingApproval, structs.StatePreHook, structs.StateApplying,
		structs.StateCompleted, structs.StateFailed, structs.StateSuperseded:
		h.mustTransition(id, s, nil)
	case structs.StatePostHook:
		h.mustTransition(id, structs.StateApplying, nil)
		h.mustTransition(id, structs.StatePostHook, nil)
	case structs.StateRejected:
		h.mustTransition(id, structs.StatePendingApproval, nil)
		if err := h.decide(id, structs.DecisionReject, "alice"); err != nil {
			h.t.Fatalf("reject %s: %v", id, err)
		}
	case structs.StateExpired:
		h.mustTransition(id, structs.StatePendingApproval, nil)
		h.now = h.now.Add(testApprovalTTL)
		h.mustTransition(id, structs.StateExpired, nil)
	default:
		h.t.Fatalf("no path to state %s", s)
	}
	got := h.deployment(id)
	if got.State != s {
		h.t.Fatalf("deployment %s is %s, want %s", id, got.State, s)
	}
	return got
}

// TestForbiddenTransitions tries, through FSM.Apply, every move that
// structs.Transitions does not list, from every state reached by allowed
// moves, and checks that each is refused with a conflict that names it,
// changes nothing and appends no event.
func TestForbiddenTransitions(t *testing.T) {
	for _, from := range structs.AllStates {
		for _, to := range structs.AllStates {
			if structs.CanTransition(from, to, structs.TriggerSystem) {
				continue
			}
			t.Run(fmt.Sprintf("%s to %s by system", from, to), func(t *testing.T) {
				h := newHarness(t)
				driveTo(h, "d1", from)
				want := []string{"deployment d1 cannot move from " + string(from) + " to " + string(to) + " by system"}
				if from.Terminal() {
					want = []string{"deployment d1 is " + string(from) + ", which is terminal"}
				}
				h.refused(structs.ErrConflict, want, func() error { return h.transition("d1", to, nil) })
				// A patch riding on a refused move is not recorded either.
				h.refused(structs.ErrConflict, nil, func() error {
					return h.transition("d1", to, &structs.DeploymentPatch{NomadEvalID: ptr("eval-9"), Registered: ptr(true)})
				})
			})
		}
		if from == structs.StatePendingApproval {
			continue
		}
		for _, decision := range []string{structs.DecisionApprove, structs.DecisionReject} {
			t.Run(fmt.Sprintf("%s from %s", decision, from), func(t *testing.T) {
				h := newHarness(t)
				driveTo(h, "d1", from)
				h.refused(structs.ErrConflict, []string{"deployment d1 is " + string(from) + ", not pending approval: cannot " + decision},
					func() error { return h.decide("d1", decision, "alice") })
			})
		}
	}
}

// TestAllowedTransitions makes every system move of structs.Transitions
// through FSM.Apply and checks the state and the event.
func TestAllowedTransitions(t *testing.T) {
	for _, tr := range structs.Transitions {
		if tr.By != structs.TriggerSystem {
			continue
		}
		t.Run(fmt.Sprintf("%s to %s", tr.From, tr.To), func(t *testing.T) {
			h := newHarness(t)
			driveTo(h, "d1", tr.From)
			if tr.To == structs.StateExpired {
				h.now = h.now.Add(testApprovalTTL)
			}
			n := len(h.events())
			if err := h.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
				WriteMeta: h.meta("engine"), ID: "d1", From: tr.From, To: tr.To, Message: "step",
			}); err != nil {
				t.Fatalf("allowed move refused: %v", err)
			}
			d := h.deployment("d1")
			if d.State != tr.To || !d.StateEnteredAt.Equal(h.now) || d.ModifyIndex != h.index {
				t.Fatalf("after the move: state %s entered %v at index %d", d.State, d.StateEnteredAt, d.ModifyIndex)
			}
			wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: string(tr.From), To: string(tr.To), Actor: "engine", Message: "step"})
		})
	}
}

// TestMoveMatrix checks the lifecycle rule at its one enforcement point,
// for every (from, to, trigger): allowed moves are made, all others are
// refused with a conflict. Approve and reject choose their own target
// through the API, so this is the only place their other targets can be
// tried.
func TestMoveMatrix(t *testing.T) {
	h := newHarness(t)
	ds := map[structs.DeploymentState]*structs.Deployment{}
	for i, s := range structs.AllStates {
		ds[s] = driveTo(h, fmt.Sprintf("d%d", i), s)
	}
	allowed := 0
	for _, from := range structs.AllStates {
		for _, to := range structs.AllStates {
			for _, by := range triggers {
				db := h.state().db
				txn := db.Txn(true)
				meta := readMeta(txn)
				w := &writer{txn: txn, reads: newIDReads(db, txn), index: 1000, meta: &meta}
				err := w.move(structs.WriteMeta{Time: time.Unix(1, 0), Actor: "x"}, ds[from].Copy(), to, by, "m")
				txn.Abort()
				if structs.CanTransition(from, to, by) {
					allowed++
					if err != nil {
						t.Errorf("%s to %s by %s: %v", from, to, by, err)
					}
					continue
				}
				if !errors.Is(err, structs.ErrConflict) {
					t.Errorf("%s to %s by %s: error %v, want a conflict", from, to, by, err)
				} else if !strings.Contains(err.Error(), string(from)) {
					t.Errorf("%s to %s by %s: error %q does not name the state", from, to, by, err)
				}
			}
		}
	}
	if allowed != len(structs.Transitions) {
		t.Fatalf("%d allowed moves, want %d", allowed, len(structs.Transitions))
	}
}

// TestTerminalNeverChanges checks that no request changes a terminal
// deployment.
func TestTerminalNeverChanges(t *testing.T) {
	for _, s := range structs.AllStates {
		if !s.Terminal() {
			continue
		}
		t.Run(string(s), func(t *testing.T) {
			h := newHarness(t)
			driveTo(h, "d1", s)
			for _, to := range structs.AllStates {
				h.refused(structs.ErrConflict, []string{"deployment d1 is " + string(s) + ", which is terminal"}, func() error { return h.transition("d1", to, nil) })
			}
			at := h.now
			for _, p := range []*structs.DeploymentPatch{
				{Registered: ptr(true)},
				{RegisterStartedAt: &at},
				{HookRun: hookRun(h.deployment("d1"), structs.PhasePost, 0, structs.HookRunDispatching, at)},
				{Message: "note"},
			} {
				h.refused(structs.ErrConflict, []string{"deployment d1 is " + string(s) + ", which is terminal"}, func() error { return h.update("d1", p) })
			}
			for _, decision := range []string{structs.DecisionApprove, structs.DecisionReject} {
				h.refused(structs.ErrConflict, []string{"deployment d1 is " + string(s) + ", not pending approval"}, func() error { return h.decide("d1", decision, "alice") })
			}
		})
	}
}

// TestOnlyDecisionsLeavePendingApproval checks that the system cannot
// start a deployment waiting for approval, and that approve and reject
// are refused anywhere else.
func TestOnlyDecisionsLeavePendingApproval(t *testing.T) {
	h := newHarness(t)
	driveTo(h, "d1", structs.StatePendingApproval)
	for _, to := range []structs.DeploymentState{structs.StatePreHook, structs.StateApplying, structs.StateRejected, structs.StateFailed} {
		h.refused(structs.ErrConflict, []string{"cannot move from pending_approval to " + string(to) + " by system"}, func() error {
			return h.transition("d1", to, nil)
		})
	}
	// The system may still supersede it or complete it.
	driveTo(h, "d2", structs.StatePendingApproval)
	h.mustTransition("d1", structs.StateSuperseded, nil)
	h.mustTransition("d2", structs.StateCompleted, nil)

	driveTo(h, "d3", structs.StateDetected)
	h.refused(structs.ErrConflict, []string{"deployment d3 is detected, not pending approval: cannot approve it"}, func() error {
		return h.decide("d3", structs.DecisionApprove, "alice")
	})
	h.refused(structs.ErrConflict, []string{"deployment d3 is detected, not pending approval: cannot reject it"}, func() error {
		return h.decide("d3", structs.DecisionReject, "alice")
	})
}

// TestTransitionCompareAndSet checks the From compare-and-set of a
// transition.
func TestTransitionCompareAndSet(t *testing.T) {
	h := newHarness(t)
	driveTo(h, "d1", structs.StatePendingApproval)
	stale := func() error {
		return h.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
			WriteMeta: h.meta("engine"), ID: "d1", From: structs.StateDetected, To: structs.StateSuperseded,
		})
	}
	// The move itself is allowed from pending_approval, but the request
	// was decided on a state that is gone.
	h.refused(structs.ErrConflict, []string{"deployment d1 is pending_approval, not detected"}, stale)
	if err := h.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: h.meta("engine"), ID: "d1", From: structs.StatePendingApproval, To: structs.StateSuperseded,
	}); err != nil {
		t.Fatalf("transition with the right From: %v", err)
	}
	if d := h.deployment("d1"); d.State != structs.StateSuperseded {
		t.Fatalf("state %s", d.State)
	}
}
