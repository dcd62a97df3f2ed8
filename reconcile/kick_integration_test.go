package reconcile_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestKick_ApprovalWakesItsDeploymentAlone: an approval wakes the approved
// deployment in the apply loop, which registers it, and starts no
// detection cycle. Nothing else wakes the loops here: no event stream, and
// the drift, engine and poll intervals are an hour.
func TestKick_ApprovalWakesItsDeploymentAlone(t *testing.T) {
	t.Parallel()
	e := lcStart(t, managedWeb(structs.PolicyApproval), nopstest.WithConfig(func(c *config.Config) {
		c.NomadEventStream = false
		c.DriftInterval, c.EngineInterval = time.Hour, time.Hour
		for i := range c.Repositories {
			c.Repositories[i].PollInterval = time.Hour
		}
	}))
	// Every detection cycle lists the live jobs from Nomad, and before it
	// records itself: the lists since the approval, read once a cycle
	// asked for after it has recorded itself, count the cycles since.
	lists := func() uint64 { return e.s.Manager().Nomad().Stats().Operations["jobs.list"].Requests }
	// refresh asks for a cycle through a refresh of the repository and
	// waits until one that started after it has recorded itself: every
	// cycle asked for earlier has then run.
	refresh := func() {
		t.Helper()
		asked := time.Now().UTC()
		e.post("/v1/repo/main/refresh", nil)
		testutil.WaitForResult(t, lcWait, func() (bool, error) {
			c, err := e.s.State().DetectionCycle()
			if err != nil {
				return false, err
			}
			return c != nil && c.StartedAt.After(asked), fmt.Errorf("no detection cycle started after the refresh yet")
		})
	}
	pending := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	refresh()
	before := lists()

	e.post("/v1/deployment/"+pending.ID+"/approve", map[string]string{"comment": "ship it"})
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		d := e.deployment(pending.ID)
		if d.State.Terminal() {
			t.Fatalf("deployment ended %s (%s)", d.State, d.Error)
		}
		return d.Registered, fmt.Errorf("deployment is %s, not registered yet", d.State)
	})

	// One cycle asked for now: the only one since the approval.
	refresh()
	if got := lists() - before; got != 1 {
		t.Fatalf("%d detection cycles listed the live jobs since the approval, want 1 (the refresh's): the approval started %d", got, got-1)
	}
}
