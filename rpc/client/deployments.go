package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nops-dev/nops/structs"
)

// Deployments is the part of the API on deployments: their state and
// history, and the decisions on them. Get it with Client.Deployments.
type Deployments struct {
	c *Client
}

// Deployments returns the client of deployments: their state and history,
// and the decisions on them.
func (c *Client) Deployments() *Deployments { return &Deployments{c: c} }

// List lists deployments newest first. With q.Limit set, the answer
// is one page and QueryMeta.NextToken names the next one.
func (d *Deployments) List(ctx context.Context, f DeploymentFilter, q *QueryOptions) ([]*structs.Deployment, *QueryMeta, error) {
	v := url.Values{}
	if f.Cluster != "" {
		v.Set("cluster", f.Cluster)
	}
	if f.Namespace != "" {
		v.Set("namespace", f.Namespace)
	}
	if f.JobID != "" {
		v.Set("job", f.JobID)
	}
	if f.State != "" {
		v.Set("state", f.State)
	}
	var out []*structs.Deployment
	meta, err := d.c.get(ctx, "/v1/deployments", v, q, &out)
	return out, meta, err
}

// Info returns one deployment (without its job spec). id may be a
// unique prefix of at least 4 characters.
func (d *Deployments) Info(ctx context.Context, id string, q *QueryOptions) (*structs.Deployment, *QueryMeta, error) {
	var out structs.Deployment
	meta, err := d.c.get(ctx, "/v1/deployment/"+seg(id), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// Events returns the events of one deployment, oldest first.
func (d *Deployments) Events(ctx context.Context, id string, q *QueryOptions) ([]*structs.Event, *QueryMeta, error) {
	var out []*structs.Event
	meta, err := d.c.get(ctx, "/v1/deployment/"+seg(id)+"/events", nil, q, &out)
	return out, meta, err
}

// Approve approves a deployment waiting for approval and returns it as it
// is after the decision. The server answers 409 when it is not pending or
// the job is paused.
func (d *Deployments) Approve(ctx context.Context, id, comment string) (*structs.Deployment, error) {
	var out structs.Deployment
	if err := d.c.write(ctx, http.MethodPost, "/v1/deployment/"+seg(id)+"/approve", nil, &structs.ApproveRequest{Comment: comment}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reject rejects a deployment waiting for approval and returns it as it is
// after the decision.
func (d *Deployments) Reject(ctx context.Context, id, reason string) (*structs.Deployment, error) {
	var out structs.Deployment
	if err := d.c.write(ctx, http.MethodPost, "/v1/deployment/"+seg(id)+"/reject", nil, &structs.RejectRequest{Reason: reason}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SkipRequirements lets a deployment waiting in detected for its
// cluster's promotion order start without it (SPEC section 16), with a
// reason the server records; it returns the deployment as it is then.
func (d *Deployments) SkipRequirements(ctx context.Context, id, reason string) (*structs.Deployment, error) {
	var out structs.Deployment
	if err := d.c.write(ctx, http.MethodPost, "/v1/deployment/"+seg(id)+"/skip-requirements", nil, &structs.ReasonRequest{Reason: reason}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Promote promotes the canaries of a deployment that wait for it.
func (d *Deployments) Promote(ctx context.Context, id string) (*structs.PromoteResult, error) {
	var out structs.PromoteResult
	if err := d.c.write(ctx, http.MethodPost, "/v1/deployment/"+seg(id)+"/promote", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NomadHealth reads, through the server asked, the health of the Nomad
// deployment that a deployment's register created; Deployment is false
// when it created none.
func (d *Deployments) NomadHealth(ctx context.Context, id string, q *QueryOptions) (*structs.NomadHealth, *QueryMeta, error) {
	var out structs.NomadHealth
	meta, err := d.c.get(ctx, "/v1/deployment/"+seg(id)+"/nomad", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}
