package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// NomadHealth is GET /v1/deployment/{id}/nomad: the health of the Nomad
// deployment that a Nops deployment's register created, read from Nomad
// now by the server asked (any server: it is a read of Nomad, with no
// effect on it). Deployment is false when the register created none
// (batch, periodic and parameterized jobs) or has not happened yet.
type NomadHealth struct {
	Deployment  bool               `json:"deployment"`
	ID          string             `json:"id,omitempty"`
	Status      string             `json:"status,omitempty"`
	Description string             `json:"description,omitempty"`
	Groups      []NomadGroupHealth `json:"groups,omitempty"`
}

// NomadGroupHealth is one task group of a Nomad deployment.
type NomadGroupHealth struct {
	Name              string `json:"name"`
	Desired           int    `json:"desired"`
	Placed            int    `json:"placed"`
	Healthy           int    `json:"healthy"`
	Unhealthy         int    `json:"unhealthy"`
	DesiredCanaries   int    `json:"desired_canaries"`
	PlacedCanaries    int    `json:"placed_canaries"`
	Promoted          bool   `json:"promoted"`
	AwaitingPromotion bool   `json:"awaiting_promotion"`
}

func (m *Manager) httpNomadHealth(_ http.ResponseWriter, r *http.Request) (any, error) {
	d, err := m.srv.State().Deployment(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("%w: deployment %q", structs.ErrNotFound, r.PathValue("id"))
	}
	if d.NomadDeploymentID == "" {
		return &NomadHealth{}, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	nd, err := m.nomad.Deployment(ctx, d.NomadDeploymentID)
	if errors.Is(err, nomadx.ErrDeploymentNotFound) {
		// Nomad garbage-collects old deployments.
		return &NomadHealth{ID: d.NomadDeploymentID, Description: "Nomad no longer has this deployment"}, nil
	}
	if err != nil {
		return nil, &nomadUnavailable{err: err}
	}
	out := &NomadHealth{Deployment: true, ID: nd.ID, Status: nd.Status, Description: nd.StatusDescription}
	for name, g := range nd.TaskGroups {
		if g == nil {
			continue
		}
		out.Groups = append(out.Groups, NomadGroupHealth{
			Name: name, Desired: g.DesiredTotal, Placed: g.PlacedAllocs, Healthy: g.HealthyAllocs,
			Unhealthy: g.UnhealthyAllocs, DesiredCanaries: g.DesiredCanaries, PlacedCanaries: len(g.PlacedCanaries),
			Promoted: g.Promoted, AwaitingPromotion: g.DesiredCanaries > 0 && !g.Promoted,
		})
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Name < out.Groups[j].Name })
	return out, nil
}

// nomadUnavailable is a read of Nomad that failed: the API answers 502.
type nomadUnavailable struct{ err error }

func (e *nomadUnavailable) Error() string {
	return "cannot read the deployment from Nomad: " + e.err.Error()
}
func (e *nomadUnavailable) Unwrap() error   { return e.err }
func (e *nomadUnavailable) StatusCode() int { return http.StatusBadGateway }
