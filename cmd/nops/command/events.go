package command

import (
	"context"
	"encoding/json"
	"flag"
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

  -cluster=<name>
    Only the events of this Nomad cluster, and those of no cluster (a
    pause of every job, a window) which concern every cluster.

  -limit=<n>
    Print at most n events (before following).

  -follow
    After the events so far, wait for new ones and print them as they come,
    until interrupted. With -json, prints one JSON object per line.
` + apiFlagsHelp
}

func (c *eventsCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var since, cursor, kind, cluster string
	var limit int
	var follow bool
	spec := apiArgs{
		name: "events",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&since, "since", "", "")
			fs.StringVar(&kind, "kind", "", "")
			clusterFlag(&cluster)(fs)
			fs.IntVar(&limit, "limit", 0, "")
			fs.BoolVar(&follow, "follow", false, "")
		},
		check: func([]string) (err error) {
			if cursor, err = m.resolveSince(since); err != nil {
				return err
			}
			return checkLimit(limit)
		},
	}
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		events, _, err := api.Events().List(ctx, cursor, kind, 0, &client.QueryOptions{Limit: limit, Cluster: cluster})
		if err != nil {
			return m.fail(err)
		}
		if !follow {
			return m.eventTable(true).list(m, events, asJSON)
		}
		return c.follow(ctx, api, cursor, kind, cluster, events, asJSON)
	})
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

// follow prints events and then streams newer ones (server-sent events)
// until ctx is done. A broken stream is reported and resumed after the last
// event printed, with a growing pause.
func (c *eventsCommand) follow(ctx context.Context, api *client.Client, cursor, kind, cluster string, first []*structs.Event, asJSON bool) int {
	m := c.m
	t := m.eventTable(true)
	emit := func(events []*structs.Event) {
		if len(events) == 0 {
			return
		}
		cursor = strconv.FormatUint(events[len(events)-1].Seq, 10)
		if cluster != "" {
			// The server filters the stream and the lists; the stream of
			// a server older than clusters does not, so the events of
			// other clusters are left out here too.
			kept := events[:0:0]
			for _, e := range events {
				if e.Cluster == "" || e.Cluster == cluster {
					kept = append(kept, e)
				}
			}
			if events = kept; len(events) == 0 {
				return
			}
		}
		if asJSON {
			enc := json.NewEncoder(m.stdout)
			for _, e := range events {
				_ = enc.Encode(e)
			}
			return
		}
		t.print(m, events)
		t.header = ""
	}
	emit(first)
	backoff := structs.Backoff{Min: time.Second, Max: 30 * time.Second}
	stream := true
	for {
		if after, err := strconv.ParseUint(cursor, 10, 64); stream && (err == nil || cursor == "") {
			// The server streams new events as they are applied; a broken
			// stream resumes after the last event printed.
			err := api.Events().Stream(ctx, after, client.StreamFilter{Kind: kind, Cluster: cluster}, func(e *structs.Event) error {
				emit([]*structs.Event{e})
				backoff.Reset()
				return nil
			})
			if ctx.Err() != nil {
				return exitOK
			}
			if client.IsNoSuchEndpoint(err) {
				stream = false // an older server: long-poll
				continue
			}
			if !m.retryAfter(ctx, err, backoff.Next()) {
				return exitOK
			}
			continue
		}
		// A -since time with no event yet: long-poll until the first one
		// gives a sequence number to stream from.
		events, _, err := api.Events().List(ctx, cursor, kind, followWait, &client.QueryOptions{Cluster: cluster})
		if ctx.Err() != nil {
			return exitOK
		}
		if err != nil {
			if !m.retryAfter(ctx, err, backoff.Next()) {
				return exitOK
			}
			continue
		}
		backoff.Reset()
		emit(events)
	}
}

// retryAfter reports err and waits for wait, or until ctx is done; it
// reports whether to try again.
func (m *runner) retryAfter(ctx context.Context, err error, wait time.Duration) bool {
	fmt.Fprintf(m.stderr, "Warning: %v; retrying in %s\n", err, wait)
	return structs.Sleep(ctx, wait)
}
