package client

import (
	"context"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// Repos is the part of the API on the git repositories the leader watches.
// Get it with Client.Repos.
type Repos struct {
	c *Client
}

// Repos returns the client of the git repositories the leader watches.
func (c *Client) Repos() *Repos { return &Repos{c: c} }

// List lists the observed status of every repository.
func (r *Repos) List(ctx context.Context, q *QueryOptions) ([]*structs.RepoStatus, *QueryMeta, error) {
	var out []*structs.RepoStatus
	meta, err := r.c.get(ctx, "/v1/repos", nil, q, &out)
	return out, meta, err
}

// Refresh asks the leader to fetch a repository now and returns its
// status after the fetch.
func (r *Repos) Refresh(ctx context.Context, name string) (*structs.RepoStatus, error) {
	var out structs.RepoStatus
	if err := r.c.write(ctx, http.MethodPost, "/v1/repo/"+seg(name)+"/refresh", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
