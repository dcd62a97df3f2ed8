package agenthttp_test

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	agenthttp "github.com/nops-dev/nops/agent/http"
	"github.com/nops-dev/nops/reconcile"
)

// loopbackConfig is the configuration of a single server on 127.0.0.1,
// on free ports, with a data directory of its own.
func loopbackConfig(tb testing.TB) *config.Config {
	cfg := config.Default()
	cfg.DataDir = tb.TempDir()
	cfg.Bind, cfg.Advertise = "127.0.0.1", "127.0.0.1"
	cfg.HTTPPort, cfg.RPCPort, cfg.SerfPort = 0, 0, 0
	cfg.BootstrapExpect = 1
	return cfg
}

// TestRoute_AnswerTableNamesOnlyRealRoutes: every pattern the answer table
// declares is a route the server serves, so a renamed or removed route
// cannot leave a stale declaration behind.
func TestRoute_AnswerTableNamesOnlyRealRoutes(t *testing.T) {
	cfg := loopbackConfig(t)
	cfg.Dev = true
	// A nil manager: its routes are in the table, and none is called.
	s, err := agent.New(cfg, hclog.NewNullLogger(), agent.Options{Reconciler: (*reconcile.Fleet)(nil)})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	served := map[string]bool{}
	for _, rt := range s.RouteTable() {
		served[rt.Pattern] = true
	}
	for _, pattern := range agenthttp.AnswerPatterns() {
		if !served[pattern] {
			t.Errorf("the answer table declares %s, which the server does not serve", pattern)
		}
	}
}
