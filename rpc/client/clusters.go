package client

import (
	"context"

	"github.com/nops-dev/nops/structs"
)

// Clusters is the part of the API on the Nomad clusters Nops deploys to
// (SPEC section 16). Get it with Client.Clusters.
type Clusters struct {
	c *Client
}

// Clusters returns the client of the Nomad clusters Nops deploys to.
func (c *Client) Clusters() *Clusters { return &Clusters{c: c} }

// List returns what the leader sees of each Nomad cluster, in
// configuration order: its address, whether it answers and when it last
// did, its Nomad version, whether its event stream is up, and its jobs.
// A follower forwards the request to the leader.
func (cl *Clusters) List(ctx context.Context, q *QueryOptions) ([]*structs.ClusterStatus, *QueryMeta, error) {
	var out []*structs.ClusterStatus
	meta, err := cl.c.get(ctx, "/v1/clusters", nil, q, &out)
	return out, meta, err
}
