package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nops-dev/nops/structs"
)

// Notifications is the part of the API on the notifications of events to
// their targets and their delivery. Get it with Client.Notifications.
type Notifications struct {
	c *Client
}

// Notifications returns the client of the notifications of events to their
// targets and their delivery.
func (c *Client) Notifications() *Notifications { return &Notifications{c: c} }

// List returns the notification outbox, oldest first; state is
// empty (all), pending, delivered or dead.
func (n *Notifications) List(ctx context.Context, state string, q *QueryOptions) ([]*structs.Notification, *QueryMeta, error) {
	v := url.Values{}
	if state != "" {
		v.Set("state", state)
	}
	var out []*structs.Notification
	meta, err := n.c.get(ctx, "/v1/notifications", v, q, &out)
	return out, meta, err
}

// Info returns one notification of the outbox.
func (n *Notifications) Info(ctx context.Context, id string, q *QueryOptions) (*structs.Notification, *QueryMeta, error) {
	var out structs.Notification
	meta, err := n.c.get(ctx, "/v1/notification/"+seg(id), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// Targets returns the notify blocks of the server asked.
func (n *Notifications) Targets(ctx context.Context) ([]*structs.NotifyTarget, error) {
	var out []*structs.NotifyTarget
	_, err := n.c.get(ctx, "/v1/notify/targets", nil, nil, &out)
	return out, err
}

// Test has the leader send a test message through the named target.
func (n *Notifications) Test(ctx context.Context, name string) (*structs.NotifyTestResult, error) {
	var out structs.NotifyTestResult
	err := n.c.write(ctx, http.MethodPost, "/v1/notify/"+url.PathEscape(name)+"/test", nil, nil, &out)
	return &out, err
}
