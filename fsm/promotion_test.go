package fsm

import (
	"strings"
	"testing"

	"github.com/nops-dev/nops/structs"
)

// testSkipRequirementsApply checks skip-requirements (SPEC section 16): it
// marks a detected deployment, naming the actor, with an event carrying
// the reason; it is refused, changing nothing, without a reason, with one
// too long, for an unknown deployment, twice, or once the deployment left
// detected.
func testSkipRequirementsApply(t *testing.T, h *harness) {
	skip := func(actor, id, reason string) error {
		return h.apply(structs.DeploymentSkipRequirementsRequestType,
			&structs.DeploymentSkipRequirementsRequest{WriteMeta: h.meta(actor), ID: id, Reason: reason})
	}
	h.create(testDeployment("d1", "default", "web", 0, 0))
	n := len(h.events())

	h.refused(structs.ErrInvalid, []string{"needs a reason"}, func() error { return skip("carol", "d1", "") })
	h.refused(structs.ErrInvalid, []string{"needs a reason"}, func() error { return skip("carol", "d1", "  \n") })
	h.refused(structs.ErrInvalid, []string{"reason", "at most"}, func() error {
		return skip("carol", "d1", strings.Repeat("x", structs.MaxTextLen+1))
	})
	h.refused(structs.ErrNotFound, []string{"nope"}, func() error { return skip("carol", "nope", "staging is down") })

	if err := skip("carol", "d1", "staging is down for maintenance"); err != nil {
		t.Fatal(err)
	}
	d := h.deployment("d1")
	if !d.SkipRequirements || d.SkipRequirementsBy != "carol" || d.State != structs.StateDetected || d.ModifyIndex != h.index {
		t.Fatalf("after skip: %+v", d)
	}
	wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "detected", To: "detected",
		Actor: "carol", Message: "promotion order skipped by carol: staging is down for maintenance"})

	h.refused(structs.ErrConflict, []string{"already skips", "carol"}, func() error { return skip("dave", "d1", "again") })

	h.create(testDeployment("d2", "default", "api", 0, 0))
	h.mustTransition("d2", structs.StatePendingApproval, nil)
	h.refused(structs.ErrConflict, []string{"d2", "pending_approval", "not detected"}, func() error { return skip("carol", "d2", "too late") })
}
