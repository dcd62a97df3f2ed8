package client

import (
	"context"
	"github.com/nops-dev/nops/structs"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// AutopilotGetConfig reads the autopilot configuration.
func (c *Client) AutopilotGetConfig(ctx context.Context) (*structs.AutopilotConfiguration, error) {
	var out structs.AutopilotConfiguration
	if _, err := c.get(ctx, "/v1/operator/autopilot/configuration", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AutopilotSetConfig replaces the autopilot configuration. With cas, it
// applies only if the stored configuration is at index *cas.
func (c *Client) AutopilotSetConfig(ctx context.Context, conf *structs.AutopilotConfiguration, cas *uint64) (*structs.AutopilotConfiguration, error) {
	q := url.Values{}
	if cas != nil {
		q.Set("cas", strconv.FormatUint(*cas, 10))
	}
	var out structs.AutopilotConfiguration
	if err := c.write(ctx, http.MethodPut, "/v1/operator/autopilot/configuration", q, conf, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// structs.AutopilotHealth reads the servers' health from the leader.
func (c *Client) AutopilotHealth(ctx context.Context) (*structs.AutopilotHealth, error) {
	var out structs.AutopilotHealth
	if _, err := c.get(ctx, "/v1/operator/autopilot/health", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Monitor streams the logs of a server (the one asked, or the one named
// by server: a node name or ID) at level until ctx ends; the caller closes
// the stream.
func (c *Client) Monitor(ctx context.Context, server, level string, asJSON bool) (io.ReadCloser, error) {
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
	resp, _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/agent/monitor", query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// DebugItem reads one item of a debug bundle (self, metrics, goroutine,
// heap) of a server; the caller closes it.
func (c *Client) DebugItem(ctx context.Context, server, item string) (io.ReadCloser, error) {
	q := url.Values{}
	if server != "" {
		q.Set("server", server)
	}
	resp, _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/agent/debug/" + seg(item), query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
