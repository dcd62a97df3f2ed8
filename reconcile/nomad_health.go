package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// NomadHealth reads from Nomad now the health of the Nomad deployment that
// the register of the Nops deployment with ID id created (any server may:
// it is a read of Nomad, with no effect on it). It answers Deployment
// false when the register created none or has not happened yet, and wraps
// structs.ErrUpstream when Nomad cannot be read.
func (q *Query) NomadHealth(ctx context.Context, id string) (*structs.NomadHealth, error) {
	d, err := q.server.State().Deployment(id)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", id, err)
	}
	if d == nil {
		return nil, fmt.Errorf("%w: deployment %q", structs.ErrNotFound, id)
	}
	if d.NomadDeploymentID == "" {
		return &structs.NomadHealth{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nd, err := q.client.Deployment(ctx, d.NomadDeploymentID)
	if errors.Is(err, nomadx.ErrDeploymentNotFound) {
		// Nomad garbage-collects old deployments.
		return &structs.NomadHealth{ID: d.NomadDeploymentID, Description: "Nomad no longer has this deployment"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cannot read the deployment from Nomad: %w", structs.ErrUpstream, err)
	}
	out := &structs.NomadHealth{Deployment: true, ID: nd.ID, Status: nd.Status, Description: nd.StatusDescription}
	for name, g := range nd.TaskGroups {
		if g == nil {
			continue
		}
		out.Groups = append(out.Groups, structs.NomadGroupHealth{
			Name: name, Desired: g.DesiredTotal, Placed: g.PlacedAllocs, Healthy: g.HealthyAllocs,
			Unhealthy: g.UnhealthyAllocs, DesiredCanaries: g.DesiredCanaries, PlacedCanaries: len(g.PlacedCanaries),
			Promoted: g.Promoted, AwaitingPromotion: g.DesiredCanaries > 0 && !g.Promoted,
		})
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Name < out.Groups[j].Name })
	return out, nil
}
