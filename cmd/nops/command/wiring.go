package command

import (
	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
)

// buildOptions is where `nops serve` wires the parts a server runs beyond
// Raft and the core API: the leader loops (git watching, detection, apply,
// hooks, holds) and the routes they serve. It returns the options for
// agent.New and a cleanup that serve calls after the server has shut down
// (nil for none).
func buildOptions(cfg *config.Config, logger hclog.Logger) (agent.Options, func(), error) {
	return agent.ReconcileOptions(cfg, logger, nil), nil, nil
}
