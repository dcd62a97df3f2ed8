package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// Notifications returns the notification outbox, oldest first; state is
// empty (all), pending, delivered or dead.
func (c *Client) Notifications(ctx context.Context, state string, q *QueryOptions) ([]*structs.Notification, *QueryMeta, error) {
	v := url.Values{}
	if state != "" {
		v.Set("state", state)
	}
	var out []*structs.Notification
	meta, err := c.get(ctx, "/v1/notifications", v, q, &out)
	return out, meta, err
}

// Notification returns one notification of the outbox.
func (c *Client) Notification(ctx context.Context, id string, q *QueryOptions) (*structs.Notification, *QueryMeta, error) {
	var out structs.Notification
	meta, err := c.get(ctx, "/v1/notification/"+seg(id), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// NotifyTargets returns the notify blocks of the server asked.
func (c *Client) NotifyTargets(ctx context.Context) ([]*structs.NotifyTarget, error) {
	var out []*structs.NotifyTarget
	_, err := c.get(ctx, "/v1/notify/targets", nil, nil, &out)
	return out, err
}

// NotifyTest has the leader send a test message through the named target.
func (c *Client) NotifyTest(ctx context.Context, name string) (*structs.NotifyTestResult, error) {
	var out structs.NotifyTestResult
	err := c.write(ctx, http.MethodPost, "/v1/notify/"+url.PathEscape(name)+"/test", nil, nil, &out)
	return &out, err
}

// EventStream follows the audit log as server-sent events, from the event
// after sequence number after, and calls fn for each event until ctx is
// done, fn fails, or the stream breaks (then it returns the error; the
// caller resumes from the last sequence number it saw).
func (c *Client) EventStream(ctx context.Context, after uint64, kind string, fn func(*structs.Event) error) error {
	v := url.Values{"index": {strconv.FormatUint(after, 10)}}
	if kind != "" {
		v.Set("kind", kind)
	}
	resp, _, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/events/stream", query: v})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var e structs.Event
			if err := json.Unmarshal([]byte(data.String()), &e); err != nil {
				return fmt.Errorf("decode streamed event: %w", err)
			}
			data.Reset()
			if err := fn(&e); err != nil {
				return err
			}
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := sc.Err(); err != nil {
		return &UnreachableError{Address: c.base.String(), Err: err}
	}
	return &UnreachableError{Address: c.base.String(), Err: fmt.Errorf("the event stream ended")}
}
