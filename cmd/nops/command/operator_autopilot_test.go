package command

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil/nopstest"
)

func TestOperatorAutopilot_Commands(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)

	res := c.run("operator", "autopilot", "get-config")
	if res.code != 0 || !strings.Contains(res.stdout, "CleanupDeadServers") || !strings.Contains(res.stdout, "10s") {
		t.Fatalf("get-config: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = c.run("operator", "autopilot", "set-config", "-min-quorum", "1", "-server-stabilization-time", "20s")
	if res.code != 0 || !strings.Contains(res.stdout, "Configuration updated") {
		t.Fatalf("set-config: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = c.run("operator", "autopilot", "get-config", "-json")
	if res.code != 0 || !strings.Contains(res.stdout, `"min_quorum": 1`) || !strings.Contains(res.stdout, `"server_stabilization_time": "20s"`) ||
		!strings.Contains(res.stdout, `"last_contact_threshold": "200ms"`) {
		t.Fatalf("get-config after set-config: %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	deadline := time.Now().Add(20 * time.Second)
	for {
		res = c.run("operator", "autopilot", "health")
		if res.code == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if res.code != 0 || !strings.Contains(res.stdout, "Healthy: true") || !strings.Contains(res.stdout, s.Config().NodeName) {
		t.Fatalf("health: %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}
