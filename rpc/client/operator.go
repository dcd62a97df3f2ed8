package client

import (
	"context"
	"github.com/nops-dev/nops/structs"
	"io"
	"net/http"
	"net/url"
)

// Operator is the part of the API on the cluster as an operator sees it:
// Raft peers, snapshots, autopilot, the gossip keyring and the garbage
// collector. Get it with Client.Operator.
type Operator struct {
	c *Client
}

// Operator returns the client of the cluster as an operator sees it: Raft
// peers, snapshots, autopilot, the gossip keyring and the garbage collector.
func (c *Client) Operator() *Operator { return &Operator{c: c} }

// RaftConfiguration returns the Raft peers as the leader committed them.
func (o *Operator) RaftConfiguration(ctx context.Context, q *QueryOptions) (*structs.RaftConfiguration, *QueryMeta, error) {
	var out structs.RaftConfiguration
	meta, err := o.c.get(ctx, "/v1/operator/raft/configuration", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// RaftRemovePeer removes a server from the Raft configuration by its ID.
func (o *Operator) RaftRemovePeer(ctx context.Context, id string) error {
	return o.c.write(ctx, http.MethodDelete, "/v1/operator/raft/peer", url.Values{"id": {id}}, nil, nil)
}

// RaftTransferLeadership hands leadership over to the server with ID id, or
// to any voter when id is empty, and returns the leader once it is done.
func (o *Operator) RaftTransferLeadership(ctx context.Context, id string) (*structs.LeadershipTransfer, error) {
	var v url.Values
	if id != "" {
		v = url.Values{"id": {id}}
	}
	var out structs.LeadershipTransfer
	if err := o.c.write(ctx, http.MethodPost, "/v1/operator/raft/transfer-leadership", v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SnapshotSave has the leader take a snapshot and returns the archive as a
// stream (a gzipped tar with checksums; see agent/snapshot), which the
// caller closes. QueryMeta.LastIndex is the snapshot's Raft index.
func (o *Operator) SnapshotSave(ctx context.Context) (io.ReadCloser, *QueryMeta, error) {
	resp, took, err := o.c.do(ctx, request{method: http.MethodGet, path: snapshotPath})
	if err != nil {
		return nil, nil, err
	}
	return resp.Body, parseMeta(resp.Header, took), nil
}

// SnapshotRestore sends a snapshot archive to the leader, which replaces the
// cluster's state with it.
func (o *Operator) SnapshotRestore(ctx context.Context, archive io.Reader) (*structs.SnapshotRestore, error) {
	var out structs.SnapshotRestore
	r := request{method: http.MethodPut, path: snapshotPath, body: archive, contentType: "application/x-nops-snapshot"}
	if _, err := o.c.call(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// snapshotPath is the path of snapshot save and restore.
const snapshotPath = "/v1/operator/snapshot"
