package client

import (
	"context"

	"github.com/nops-dev/nops/structs"
)

// Leader returns the Raft address of the cluster's leader, empty when the
// server knows none.
func (c *Client) Leader(ctx context.Context, q *QueryOptions) (string, *QueryMeta, error) {
	var out string
	meta, err := c.get(ctx, "/v1/status/leader", nil, q, &out)
	return out, meta, err
}

// Peers returns the Raft addresses of the cluster's servers.
func (c *Client) Peers(ctx context.Context, q *QueryOptions) ([]string, *QueryMeta, error) {
	var out []string
	meta, err := c.get(ctx, "/v1/status/peers", nil, q, &out)
	return out, meta, err
}

// DetectionCycle returns the leader's last completed detection cycle (GET
// /v1/status/cycle), nil with no error when none has completed yet. A server
// without the route answers an *APIError with IsNoSuchEndpoint.
func (c *Client) DetectionCycle(ctx context.Context, q *QueryOptions) (*structs.DetectionCycle, *QueryMeta, error) {
	var out *structs.DetectionCycle
	meta, err := c.get(ctx, "/v1/status/cycle", nil, q, &out)
	if IsNotFound(err) && !IsNoSuchEndpoint(err) {
		return nil, nil, nil
	}
	return out, meta, err
}

// Self returns the server answering.
func (c *Client) Self(ctx context.Context, q *QueryOptions) (*structs.AgentSelf, *QueryMeta, error) {
	var out structs.AgentSelf
	meta, err := c.get(ctx, "/v1/agent/self", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// Members returns the serf members the server sees, sorted by name.
func (c *Client) Members(ctx context.Context, q *QueryOptions) ([]structs.Member, *QueryMeta, error) {
	var out []structs.Member
	meta, err := c.get(ctx, "/v1/agent/members", nil, q, &out)
	return out, meta, err
}

// structs.Health returns the server's health: an *APIError with status 503 when it
// knows no leader.
func (c *Client) Health(ctx context.Context) (*structs.Health, error) {
	var out structs.Health
	if _, err := c.get(ctx, "/v1/health", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
