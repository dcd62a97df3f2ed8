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
	"time"

	"github.com/nops-dev/nops/structs"
)

// Events is the part of the API on the event log of decisions and state
// changes, read page by page or streamed. Get it with Client.Events.
type Events struct {
	c *Client
}

// Events returns the client of the event log of decisions and state changes,
// read page by page or streamed.
func (c *Client) Events() *Events { return &Events{c: c} }

// StreamFilter narrows a stream of events: Kind keeps one kind of event,
// Cluster the events of one Nomad cluster and those of no cluster. Empty
// fields keep everything.
type StreamFilter struct {
	Kind, Cluster string
}

// Stream follows the audit log as server-sent events, from the event
// after sequence number after, and calls fn for each event f keeps until
// ctx is done, fn fails, or the stream breaks (then it returns the error;
// the caller resumes from the last sequence number it saw).
func (e *Events) Stream(ctx context.Context, after uint64, f StreamFilter, fn func(*structs.Event) error) error {
	v := url.Values{"index": {strconv.FormatUint(after, 10)}}
	if f.Kind != "" {
		v.Set("kind", f.Kind)
	}
	if f.Cluster != "" {
		v.Set("cluster", f.Cluster)
	}
	resp, _, err := e.c.do(ctx, request{method: http.MethodGet, path: "/v1/events/stream", query: v})
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
		return &UnreachableError{Address: e.c.base.String(), Err: err}
	}
	return &UnreachableError{Address: e.c.base.String(), Err: fmt.Errorf("the event stream ended")}
}

// List returns the audit log, oldest first. since is empty (from the
// start), an event sequence number (events after it) or an RFC 3339 time
// (events at or after it); kind is empty (all) or an event kind. With wait
// above zero the request is a long poll: the server answers as soon as there
// is an event to return, or with none once wait ran out (at most 5m).
func (e *Events) List(ctx context.Context, since, kind string, wait time.Duration, q *QueryOptions) ([]*structs.Event, *QueryMeta, error) {
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
	meta, err := e.c.get(ctx, "/v1/events", v, q, &out)
	return out, meta, err
}
