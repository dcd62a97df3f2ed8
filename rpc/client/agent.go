package client

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/nops-dev/nops/structs"
)

// Agent is the part of the API on the server asked itself: its
// configuration, its view of the members, its health, its logs and its debug
// data. Get it with Client.Agent.
type Agent struct {
	c *Client
}

// Agent returns the client of the server asked itself: its configuration,
// its view of the members, its health, its logs and its debug data.
func (c *Client) Agent() *Agent { return &Agent{c: c} }

// Self returns the server answering.
func (a *Agent) Self(ctx context.Context, q *QueryOptions) (*structs.AgentSelf, *QueryMeta, error) {
	var out structs.AgentSelf
	meta, err := a.c.get(ctx, "/v1/agent/self", nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// Members returns the serf members the server sees, sorted by name.
func (a *Agent) Members(ctx context.Context, q *QueryOptions) ([]structs.Member, *QueryMeta, error) {
	var out []structs.Member
	meta, err := a.c.get(ctx, "/v1/agent/members", nil, q, &out)
	return out, meta, err
}

// Health returns the server's health: an *APIError with status 503 when it
// knows no leader.
func (a *Agent) Health(ctx context.Context) (*structs.Health, error) {
	var out structs.Health
	if _, err := a.c.get(ctx, "/v1/health", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Monitor streams the logs of a server (the one asked, or the one named
// by server: a node name or ID) at level until ctx ends; the caller closes
// the stream.
func (a *Agent) Monitor(ctx context.Context, server, level string, asJSON bool) (io.ReadCloser, error) {
	q := url.Values{}
	if server != "" {
		q.Set("server", server)
	}
	if level != "" {
		q.Set("log_level", level)
	}
	if asJSON {
		q.Set("log_json", "true")
	}
	resp, _, err := a.c.do(ctx, request{method: http.MethodGet, path: "/v1/agent/monitor", query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// DebugItem reads one item of a debug bundle (self, metrics, goroutine,
// heap) of a server; the caller closes it.
func (a *Agent) DebugItem(ctx context.Context, server, item string) (io.ReadCloser, error) {
	q := url.Values{}
	if server != "" {
		q.Set("server", server)
	}
	resp, _, err := a.c.do(ctx, request{method: http.MethodGet, path: "/v1/agent/debug/" + seg(item), query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
