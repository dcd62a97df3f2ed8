package client

import (
	"context"
	"net/url"
	"time"

	"github.com/nops-dev/nops/structs"
)

// Events returns the audit log, oldest first. since is empty (from the
// start), an event sequence number (events after it) or an RFC 3339 time
// (events at or after it); kind is empty (all) or an event kind. With wait
// above zero the request is a long poll: the server answers as soon as there
// is an event to return, or with none once wait ran out (at most 5m).
func (c *Client) Events(ctx context.Context, since, kind string, wait time.Duration, q *QueryOptions) ([]*structs.Event, *QueryMeta, error) {
	v := url.Values{}
	if since != "" {
		v.Set("since", since)
	}
	if kind != "" {
		v.Set("kind", kind)
	}
	if wait > 0 {
		v.Set("wait", wait.String())
	}
	var out []*structs.Event
	meta, err := c.get(ctx, "/v1/events", v, q, &out)
	return out, meta, err
}
