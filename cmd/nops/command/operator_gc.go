package command

import (
	"context"
	"fmt"

	"github.com/nops-dev/nops/rpc/client"
)

// operatorGCCommand forces a retention pass.
type operatorGCCommand struct {
	m *runner
}

func (c *operatorGCCommand) Synopsis() string {
	return "Run a retention pass now: drop old job specs, deployments and events"
}

func (c *operatorGCCommand) Help() string {
	return `Usage: nops operator gc [options]

  Has the leader run a retention pass now, as it does every retention
  interval: it drops the stored job specs of deployments finished longer
  than spec_after ago, deletes finished deployments beyond the newest
  deployments_per_job of their job that finished longer than deployment_age
  ago, and deletes events older than event_age. It never removes an active
  deployment, the newest deployment of a job, the deployment a block names,
  a block or a deploy-now request. Prints what was removed.
` + apiFlagsHelp
}

func (c *operatorGCCommand) Run(ctx context.Context, args []string) int {
	return c.m.runWrite(c, args, apiArgs{name: "operator gc"}, func(api *client.Client, _ []string) (any, string, error) {
		res, err := api.Operator().GC(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("gc: %w", err)
		}
		return res, fmt.Sprintf("Retention pass done: %d job specs dropped, %d deployments and %d events deleted",
			res.SpecsDropped, res.DeploymentsDeleted, res.EventsDeleted), nil
	})
}
