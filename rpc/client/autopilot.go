package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/nops-dev/nops/structs"
)

// AutopilotGetConfig reads the autopilot configuration.
func (o *Operator) AutopilotGetConfig(ctx context.Context) (*structs.AutopilotConfiguration, error) {
	var out structs.AutopilotConfiguration
	if _, err := o.c.get(ctx, "/v1/operator/autopilot/configuration", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AutopilotSetConfig replaces the autopilot configuration. With cas, it
// applies only if the stored configuration is at index *cas.
func (o *Operator) AutopilotSetConfig(ctx context.Context, conf *structs.AutopilotConfiguration, cas *uint64) (*structs.AutopilotConfiguration, error) {
	q := url.Values{}
	if cas != nil {
		q.Set("cas", strconv.FormatUint(*cas, 10))
	}
	var out structs.AutopilotConfiguration
	if err := o.c.write(ctx, http.MethodPut, "/v1/operator/autopilot/configuration", q, conf, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AutopilotHealth reads the servers' health from the leader.
func (o *Operator) AutopilotHealth(ctx context.Context) (*structs.AutopilotHealth, error) {
	var out structs.AutopilotHealth
	if _, err := o.c.get(ctx, "/v1/operator/autopilot/health", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
