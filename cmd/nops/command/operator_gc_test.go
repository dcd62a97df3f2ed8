package command

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestCLI_OperatorGC forces a retention pass: the events older than a year
// go, the rest stay, and the command says what it removed.
func TestCLI_OperatorGC(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)
	old := time.Now().UTC().Add(-400 * 24 * time.Hour)
	if _, err := s.Apply(structs.EventAppendRequestType, &structs.EventAppendRequest{
		WriteMeta: structs.WriteMeta{Time: old, Actor: "nops"},
		Events:    []*structs.Event{{Kind: structs.EventKindJob, Object: "default/web", Message: "long ago"}},
	}); err != nil {
		t.Fatal(err)
	}
	c.ok("pause", "-reason", "now")
	mustContain(t, "gc", c.ok("operator", "gc"), "0 job specs dropped, 0 deployments and 1 events deleted")
	var res structs.GCResult
	c.okJSON(&res, "operator", "gc")
	if res.EventsDeleted != 0 || res.Index == 0 {
		t.Fatalf("second pass = %+v, want nothing removed", res)
	}
	evs, err := s.State().Events(fsm.EventFilter{})
	if err != nil || len(evs) != 1 || evs[0].Message == "long ago" {
		t.Fatalf("events after gc = %+v, %v", evs, err)
	}
}
