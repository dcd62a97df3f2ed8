package client

import (
	"context"

	"github.com/nops-dev/nops/structs"
)

// Status is the part of the API on the leader, the peers and the last
// detection cycle, as the server asked knows them. Get it with
// Client.Status.
type Status struct {
	c *Client
}

// Status returns the client of the leader, the peers and the last detection
// cycle, as the server asked knows them.
func (c *Client) Status() *Status { return &Status{c: c} }

// Leader returns the Raft address of the cluster's leader, empty when the
// server knows none.
func (s *Status) Leader(ctx context.Context, q *QueryOptions) (string, *QueryMeta, error) {
	var out string
	meta, err := s.c.get(ctx, "/v1/status/leader", nil, q, &out)
	return out, meta, err
}

// Peers returns the Raft addresses of the cluster's servers.
func (s *Status) Peers(ctx context.Context, q *QueryOptions) ([]string, *QueryMeta, error) {
	var out []string
	meta, err := s.c.get(ctx, "/v1/status/peers", nil, q, &out)
	return out, meta, err
}

// DetectionCycle returns the leader's last completed detection cycle (GET
// /v1/status/cycle), nil with no error when none has completed yet. A server
// without the route answers an *APIError with IsNoSuchEndpoint.
func (s *Status) DetectionCycle(ctx context.Context, q *QueryOptions) (*structs.DetectionCycle, *QueryMeta, error) {
	var out *structs.DetectionCycle
	meta, err := s.c.get(ctx, "/v1/status/cycle", nil, q, &out)
	if IsNotFound(err) && !IsNoSuchEndpoint(err) {
		return nil, nil, nil
	}
	return out, meta, err
}
