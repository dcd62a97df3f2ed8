package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// AutopilotConfiguration is the cluster's autopilot configuration.
// Durations are Go duration strings.
type AutopilotConfiguration struct {
	CleanupDeadServers      bool   `json:"cleanup_dead_servers"`
	LastContactThreshold    string `json:"last_contact_threshold"`
	MaxTrailingLogs         uint64 `json:"max_trailing_logs"`
	MinQuorum               uint   `json:"min_quorum"`
	ServerStabilizationTime string `json:"server_stabilization_time"`
	CreateIndex             uint64 `json:"create_index"`
	ModifyIndex             uint64 `json:"modify_index"`
}

// AutopilotHealth is the cluster's health as the leader's autopilot sees
// it.
type AutopilotHealth struct {
	Healthy          bool                    `json:"healthy"`
	FailureTolerance int                     `json:"failure_tolerance"`
	Leader           string                  `json:"leader"`
	Voters           []string                `json:"voters"`
	Servers          []AutopilotServerHealth `json:"servers"`
}

// AutopilotServerHealth is one Raft server's health.
type AutopilotServerHealth struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Address     string    `json:"address"`
	SerfStatus  string    `json:"serf_status"`
	Version     string    `json:"version"`
	Leader      bool      `json:"leader"`
	Voter       bool      `json:"voter"`
	RaftState   string    `json:"raft_state"`
	Healthy     bool      `json:"healthy"`
	LastContact string    `json:"last_contact"`
	LastTerm    uint64    `json:"last_term"`
	LastIndex   uint64    `json:"last_index"`
	StableSince time.Time `json:"stable_since"`
}

// AutopilotGetConfig reads the autopilot configuration.
func (c *Client) AutopilotGetConfig(ctx context.Context) (*AutopilotConfiguration, error) {
	var out AutopilotConfiguration
	if _, err := c.get(ctx, "/v1/operator/autopilot/configuration", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AutopilotSetConfig replaces the autopilot configuration. With cas, it
// applies only if the stored configuration is at index *cas.
func (c *Client) AutopilotSetConfig(ctx context.Context, conf *AutopilotConfiguration, cas *uint64) (*AutopilotConfiguration, error) {
	q := url.Values{}
	if cas != nil {
		q.Set("cas", strconv.FormatUint(*cas, 10))
	}
	var out AutopilotConfiguration
	if err := c.write(ctx, http.MethodPut, "/v1/operator/autopilot/configuration", q, conf, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AutopilotHealth reads the servers' health from the leader.
func (c *Client) AutopilotHealth(ctx context.Context) (*AutopilotHealth, error) {
	var out AutopilotHealth
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
