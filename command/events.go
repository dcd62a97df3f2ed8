package command

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// followWait is how long one long poll of `nops events -follow` waits.
const followWait = 30 * time.Second

// eventsCommand prints the audit log, and follows it.
type eventsCommand struct {
	m *runner
}

func (c *eventsCommand) Synopsis() string { return "Show the audit log, or follow it" }

func (c *eventsCommand) Help() string {
	return `Usage: nops events [options]

  Prints the audit log, oldest first: every deployment state change and
  every decision (approve, reject, retry, pause, resume, deploy now, window
  change), with who made it.

Options:

  -since=<seq|time|duration>
    Only events after this event sequence number, at or after this RFC 3339
    time, or within this duration before now (like 1h).

  -kind=<kind>
    Only events of this kind: deployment, job, pause or window.

  -limit=<n>
    Print at most n events (before following).

  -follow
    After the events so far, wait for new ones and print them as they come,
    until interrupted. With -json, prints one JSON object per line.
` + apiFlagsHelp
}

func (c *eventsCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var f apiFlags
	var since, kind string
	var limit int
	var follow bool
	fs := newFlagSet("events")
	f.register(m, fs)
	fs.StringVar(&since, "since", "", "")
	fs.StringVar(&kind, "kind", "", "")
	fs.IntVar(&limit, "limit", 0, "")
	fs.BoolVar(&follow, "follow", false, "")
	if _, code, ok := m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	cursor, err := m.resolveSince(since)
	if err != nil {
		return m.usageError(c, err)
	}
	if limit < 0 {
		return m.usageError(c, fmt.Errorf("-limit: must not be negative, got %d", limit))
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	events, _, err := api.Events(ctx, cursor, kind, 0, &client.QueryOptions{Limit: limit})
	if err != nil {
		return m.fail(err)
	}
	if !follow {
		if f.json {
			if events == nil {
				events = []*structs.Event{}
			}
			return m.printJSON(events)
		}
		if len(events) == 0 {
			fmt.Fprintln(m.stdout, "No events")
			return exitOK
		}
		tw := m.table()
		m.eventRows(tw, events, true, true)
		tw.Flush()
		return exitOK
	}
	return c.follow(ctx, api, cursor, kind, events, f.json)
}

// resolveSince turns -since into the server's since: a sequence number or
// an RFC 3339 time.
func (m *runner) resolveSince(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return s, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return m.now().Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	return "", fmt.Errorf("-since: %q is neither an event sequence number, an RFC 3339 time nor a duration", s)
}

// follow prints events and long-polls for newer ones until ctx is done. A
// failed poll is reported and retried with a growing pause.
func (c *eventsCommand) follow(ctx context.Context, api *client.Client, cursor, kind string, first []*structs.Event, asJSON bool) int {
	m := c.m
	header := true
	emit := func(events []*structs.Event) {
		if len(events) == 0 {
			return
		}
		cursor = strconv.FormatUint(events[len(events)-1].Seq, 10)
		if asJSON {
			enc := json.NewEncoder(m.stdout)
			for _, e := range events {
				_ = enc.Encode(e)
			}
			return
		}
		tw := m.table()
		m.eventRows(tw, events, true, header)
		tw.Flush()
		header = false
	}
	emit(first)
	backoff := time.Second
	for {
		events, _, err := api.Events(ctx, cursor, kind, followWait, nil)
		if ctx.Err() != nil {
			return exitOK
		}
		if err != nil {
			fmt.Fprintf(m.stderr, "Warning: %v; retrying in %s\n", err, backoff)
			select {
			case <-ctx.Done():
				return exitOK
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		emit(events)
	}
}
