package holds_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHolds_IsALeafPackage: the FSM asks holds whether a job is paused, so
// holds must import no package of this module but structs (no I/O, no
// reconciler state can reach the FSM through it).
func TestHolds_IsALeafPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/nops-dev/nops/structs/holds").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.HasPrefix(pkg, "github.com/nops-dev/nops/") {
			continue
		}
		switch pkg {
		case "github.com/nops-dev/nops/structs/holds", "github.com/nops-dev/nops/structs":
		default:
			t.Errorf("holds depends on %s; it may import only structs of this module", pkg)
		}
	}
}
