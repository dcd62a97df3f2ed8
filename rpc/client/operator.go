package client

import (
	"context"
	"github.com/nops-dev/nops/structs"
	"io"
	"net/http"
	"net/url"
)

// structs.RaftConfiguration returns the Raft peers as the leader committed them.
func (c *Client) RaftConfiguration(ctx context.Context, q *QueryOptions) (*structs.RaftConfiguration, *QueryMeta, error) {
	var out structs.RaftConfiguration
	meta, err := c.get(ctx, "/v1/operator/raft/configuration", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// RaftRemovePeer removes a server from the Raft configuration by its ID.
func (c *Client) RaftRemovePeer(ctx context.Context, id string) error {
	return c.write(ctx, http.MethodDelete, "/v1/operator/raft/peer", url.Values{"id": {id}}, nil, nil)
}

// RaftTransferLeadership hands leadership over to the server with ID id, or
// to any voter when id is empty, and returns the leader once it is done.
func (c *Client) RaftTransferLeadership(ctx context.Context, id string) (*structs.LeadershipTransfer, error) {
	var v url.Values
	if id != "" {
		v = url.Values{"id": {id}}
	}
	var out structs.LeadershipTransfer
	if err := c.write(ctx, http.MethodPost, "/v1/operator/raft/transfer-leadership", v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SnapshotSave has the leader take a snapshot and returns the archive as a
// stream (a gzipped tar with checksums; see agent/snapshot), which the
// caller closes. QueryMeta.LastIndex is the snapshot's Raft index.
func (c *Client) SnapshotSave(ctx context.Context) (io.ReadCloser, *QueryMeta, error) {
	resp, took, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/operator/snapshot"})
	if err != nil {
		return nil, nil, err
	}
	return resp.Body, parseMeta(resp.Header, took), nil
}

// structs.SnapshotRestore sends a snapshot archive to the leader, which replaces the
// cluster's state with it.
func (c *Client) SnapshotRestore(ctx context.Context, archive io.Reader) (*structs.SnapshotRestore, error) {
	var out structs.SnapshotRestore
	r := request{method: http.MethodPut, path: "/v1/operator/snapshot", body: archive, contentType: "application/x-nops-snapshot"}
	if _, err := c.call(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
