package agenthttp

import (
	"net/http"
	"strings"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/structs"
)

// promotionRoutes are the routes of the promotion order between Nomad
// clusters (SPEC section 16).
func (a *clusterAPI) promotionRoutes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	route("POST /v1/deployment/{id}/skip-requirements", kindWrite, onDeployment(acl.Deploy), a.deploymentSkipRequirements)
}

// deploymentSkipRequirements lets a deployment waiting in detected for its
// cluster's promotion order start without it: an operator's decision,
// with a reason, audited by an event on the deployment that names the
// actor. Bad input is refused before anything is proposed; a deployment
// past detected is a conflict (409). The apply loop is woken for the
// deployment, which it then starts as its policy says.
func (a *clusterAPI) deploymentSkipRequirements(_ http.ResponseWriter, r *http.Request) (any, error) {
	var body structs.ReasonRequest
	if err := decode(r, &body); err != nil {
		return nil, err
	}
	if strings.TrimSpace(body.Reason) == "" {
		return nil, badRequest("reason: required: say why the deployment may skip its cluster's promotion order")
	}
	if err := structs.CheckText("reason", body.Reason); err != nil {
		return nil, err
	}
	d, err := a.lookupDeployment(r)
	if err != nil {
		return nil, err
	}
	req := &structs.DeploymentSkipRequirementsRequest{WriteMeta: writeMeta(r), ID: d.ID, Reason: body.Reason}
	if _, err := a.s.Apply(structs.DeploymentSkipRequirementsRequestType, req); err != nil {
		return nil, err
	}
	a.s.Kick(structs.Kick{Deployment: d.ID})
	if d, err = a.s.State().Deployment(d.ID); err != nil {
		return nil, err
	}
	return d.Public(), nil
}
