package fsm

import (
	"testing"

	"github.com/nops-dev/nops/structs"
)

// TestCreateFailWith: a deployment whose hook is missing is created and
// failed in one entry, so no step can start it in between; it leaves a
// block and both events.
func TestCreateFailWith(t *testing.T) {
	h := newHarness(t)
	d := testDeployment("d-hook", "default", "web", 1, 0)
	h.mustApply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
		WriteMeta: h.meta("nops"), Deployment: d, FailWith: `pre hook "backup" is not declared by any file in namespace default`,
	})
	got := h.deployment("d-hook")
	if got.State != structs.StateFailed || got.Error != `pre hook "backup" is not declared by any file in namespace default` {
		t.Fatalf("deployment: state %s error %q", got.State, got.Error)
	}
	if got.CreateIndex != got.ModifyIndex {
		t.Fatalf("created at %d but failed at %d: not one entry", got.CreateIndex, got.ModifyIndex)
	}
	b, err := h.state().Block("default", "web")
	if err != nil || b == nil || b.DeploymentID != "d-hook" || b.AfterRegister {
		t.Fatalf("block: %+v %v", b, err)
	}
	events := h.events()
	if len(events) != 2 || events[0].To != string(structs.StateDetected) ||
		events[1].From != string(structs.StateDetected) || events[1].To != string(structs.StateFailed) {
		t.Fatalf("events: %+v", events)
	}
	if a, _ := h.state().ActiveDeployment("default", "web"); a != nil {
		t.Fatalf("a failed deployment is active: %+v", a)
	}
}
