package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	// streamLifetime ends a live stream after a while; the browser's
	// EventSource reconnects, and an expired token is noticed then.
	streamLifetime = 10 * time.Minute
	// keepAlive sends a comment on an idle stream so that proxies keep it.
	keepAlive = 25 * time.Second
	// coalesce groups the changes of a burst into one message.
	coalesce = 200 * time.Millisecond
	// clusterPoll is how often a stream looks at the cluster's
	// membership, which changes without a write to the state.
	clusterPoll = 2 * time.Second
)

// lastEventIndex is the Raft index a stream's page has seen: the
// browser's Last-Event-ID on a reconnect, else the page's ?index=, else 0.
func lastEventIndex(r *http.Request) uint64 {
	after, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			after = n
		}
	}
	return after
}

// startStream writes the headers of an event stream and its retry delay.
func startStream(w http.ResponseWriter) {
	h := w.Header()
	SetHeaders(h)
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A browser reconnects a broken stream after 2s (the EventSource
	// default is about 3s): soon enough for a live page, not a tight loop.
	_, _ = fmt.Fprintf(w, "retry: 2000\n\n")
}

// live is the live-update stream of one tab: server-sent events that carry
// the state's index each time it changes, or the cluster's membership
// does (a server that fails, leaves or joins, a new leader: no write to
// the state says so). The page's script then fetches the page again and
// swaps the parts that changed. It carries no data, so it shows nothing a
// token could not read; the pages it triggers are checked as usual. The
// stream ends when the server shuts down, so that the page sees it go.
func (u *UI) live(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		SetHeaders(w.Header())
		http.Error(w, "this is a server-sent-event stream: ask for text/event-stream", http.StatusNotAcceptable)
		return
	}
	if n := u.streams.Add(1); n > int64(u.cfg.MaxStreams) {
		u.streams.Add(-1)
		SetHeaders(w.Header())
		http.Error(w, ErrTooManyStreams.Error(), http.StatusServiceUnavailable)
		return
	}
	defer u.streams.Add(-1)
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	after := lastEventIndex(r)
	startStream(w)
	flusher.Flush()

	ctx, cancel := context.WithTimeout(r.Context(), streamLifetime)
	defer cancel()
	if after == 0 {
		after = u.cfg.Backend.Index()
	}
	members := u.clusterDigest()
	idle := time.Now()
	for {
		wctx, wcancel := context.WithTimeout(ctx, clusterPoll)
		idx := u.cfg.Backend.WaitChange(wctx, after)
		early := wctx.Err() == nil
		wcancel()
		if ctx.Err() != nil {
			return
		}
		changed := idx > after
		if !changed && early {
			// Neither a change nor the timeout: the server shuts down.
			return
		}
		if m := u.clusterDigest(); m != members {
			members, changed = m, true
		}
		if !changed {
			if time.Since(idle) < keepAlive {
				continue
			}
			idle = time.Now()
			if _, err := fmt.Fprintf(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
			continue
		}
		select {
		case <-time.After(coalesce):
		case <-ctx.Done():
			return
		}
		idx = max(idx, u.cfg.Backend.Index(), after)
		after = idx
		idle = time.Now()
		if _, err := fmt.Fprintf(w, "id: %d\nevent: change\ndata: %d\n\n", idx, idx); err != nil {
			return
		}
		flusher.Flush()
	}
}

// clusterDigest sums up what the pages show of the cluster's membership:
// the leader, each Raft peer and each member's status. Indexes and last
// contacts, which move all the time, are left out.
func (u *UI) clusterDigest() string {
	c, err := u.cfg.Backend.Cluster()
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|", c.Leader, c.RaftState)
	for _, p := range c.Peers {
		fmt.Fprintf(&b, "%s,%s,%s,%t,%t;", p.ID, p.Node, p.Address, p.Voter, p.Leader)
	}
	b.WriteByte('|')
	for _, m := range c.Members {
		fmt.Fprintf(&b, "%s,%s,%s,%s,%s;", m.Name, m.Addr, m.Status, m.HTTPAddr, m.Refused)
	}
	return b.String()
}
