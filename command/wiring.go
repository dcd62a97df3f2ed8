package command

import (
	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
)

// buildOptions is where `nops serve` wires the parts a server runs beyond
// Raft and the core API: the leader loops (detection, apply, hooks, holds)
// and the routes they serve. It returns the options for agent.New and a
// cleanup that serve calls after the server has shut down (nil for none).
//
// For now it wires nothing: a server started with these options replicates
// state and serves the core API, and its leader runs no loops.
func buildOptions(cfg *config.Config, logger hclog.Logger) (agent.Options, func(), error) {
	_ = cfg
	_ = logger
	return agent.Options{}, nil, nil
}
