package agenthttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
)

const (
	// maxEventStreams bounds the event streams one server serves at once:
	// each holds a connection and a goroutine that wakes on every write.
	maxEventStreams = 64
	// streamBatch bounds the events one read of a stream sends, so a client
	// far behind catches up in pieces instead of one huge state read.
	streamBatch = 500
	// streamKeepAlive is how often an idle stream sends a comment, so
	// proxies and clients see it is alive.
	streamKeepAlive = 15 * time.Second
)

func (a *clusterAPI) notifyRoutes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	route("GET /v1/notifications", kindRead, filtered(acl.Read), a.notificationList)
	route("GET /v1/notification/{id}", kindRead, onCluster(acl.Read), a.notificationGet)
	route("GET /v1/notify/targets", kindRead, onCluster(acl.Operator), a.notifyTargets)
	route("POST /v1/notify/{name}/test", kindWrite, onCluster(acl.Operator), a.notifyTest)
	// The stream filters each event to what the token may read (canRead).
	route("GET /v1/events/stream", kindRead, anyToken(), a.eventStream)
}

func (a *clusterAPI) notificationList(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	var problems []string
	f := fsm.NotificationFilter{State: structs.NotificationState(q.Get("state")), After: q.Get("next")}
	if f.State != "" && !f.State.Valid() {
		problems = append(problems, fmt.Sprintf("state: %q is not pending, delivered or dead", f.State))
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		problems = append(problems, err.Error())
	}
	f.Limit = limit
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	list, next, err := a.s.State().Notifications(f)
	if err != nil {
		return nil, err
	}
	if next != "" {
		w.Header().Set(headerNextToken, next)
	}
	return nonNil(list), nil
}

func (a *clusterAPI) notificationGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	return byPath(r, "id", "notification", a.s.State().Notification, asStored)
}

func (a *clusterAPI) notifyTargets(_ http.ResponseWriter, _ *http.Request) (any, error) {
	out := []*structs.NotifyTarget{}
	for _, n := range a.s.Config().Notify {
		out = append(out, &structs.NotifyTarget{Name: n.Name, Kind: n.Kind, Events: nonNilStrings(n.Events),
			Namespaces: nonNilStrings(n.Namespaces), Jobs: nonNilStrings(n.Jobs)})
	}
	return out, nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (a *clusterAPI) notifyTest(_ http.ResponseWriter, r *http.Request) (any, error) {
	if err := decode(r, &struct{}{}); err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	n, err := a.s.Notifier().Test(r.Context(), name, writeMeta(r).Actor)
	if errors.Is(err, notify.ErrUnknownTarget) {
		return nil, fmt.Errorf("%w: notify target %q", structs.ErrNotFound, name)
	}
	out := &structs.NotifyTestResult{Target: name, ID: n.ID, OK: err == nil}
	if err != nil {
		out.Error = err.Error()
	}
	return out, nil
}

// streamStart is the sequence number a stream starts after: the larger
// of ?index= and the Last-Event-ID of a client that reconnects.
func streamStart(r *http.Request) (uint64, error) {
	var after uint64
	for _, v := range []string{r.URL.Query().Get("index"), strings.TrimSpace(r.Header.Get("Last-Event-ID"))} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, badRequest(fmt.Sprintf("index: %q is not an event sequence number", v))
		}
		after = max(after, n)
	}
	return after, nil
}

// writeEvents writes the events of kind (any when empty) and of cluster
// (any when empty; an event of no cluster always) that the token
// id may read as server-sent events, and returns the sequence number of
// the last event looked at. An error is the connection's.
func writeEvents(w io.Writer, events []*structs.Event, after uint64, kind, cluster string, id *identity) (uint64, error) {
	for _, e := range events {
		after = e.Seq
		if kind != "" && e.Kind != kind {
			continue
		}
		if cluster != "" && e.Cluster != "" && e.Cluster != cluster {
			continue
		}
		if !canRead(id, e.Cluster, e.Namespace, e.JobID) {
			continue
		}
		body, err := json.Marshal(e)
		if err != nil {
			return after, fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, body); err != nil {
			return after, err
		}
	}
	return after, nil
}

// eventStream serves the audit log as server-sent events from the local
// replicated state: every event after ?index= (an event sequence number)
// or the Last-Event-ID header, then each new one as it is applied, until
// the client goes away. Each event's id is its sequence number, so a
// client resumes where it stopped. ?kind= keeps one kind of event,
// ?cluster= one Nomad cluster's (and the events of no cluster).
func (a *clusterAPI) eventStream(w http.ResponseWriter, r *http.Request) (any, error) {
	after, err := streamStart(r)
	if err != nil {
		return nil, err
	}
	kind := r.URL.Query().Get("kind")
	// ?cluster= keeps the events of one Nomad cluster and those of no
	// cluster (the Nops cluster's own), as GET /v1/events does.
	cluster, err := a.clusterFilter(r)
	if err != nil {
		return nil, err
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return nil, errors.New("streaming is not supported by this connection")
	}
	if n := a.eventStreams.Add(1); n > maxEventStreams {
		a.eventStreams.Add(-1)
		return nil, &HTTPError{Code: http.StatusTooManyRequests,
			Msg: fmt.Sprintf("too many event streams on this server (limit %d): retry later", maxEventStreams)}
	}
	defer a.eventStreams.Add(-1)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	keepAlive := time.NewTicker(streamKeepAlive)
	defer keepAlive.Stop()
	for {
		// The token is checked again before each batch: a deleted or
		// expired token, or one that lost its policies, ends the stream.
		id, ok := a.reauthorize(r, anyToken())
		if !ok {
			return nil, nil
		}
		st := a.s.State()
		changed := st.Changed()
		events, err := st.Events(fsm.EventFilter{AfterSeq: after, Limit: streamBatch})
		if err != nil {
			return nil, nil
		}
		if after, err = writeEvents(w, events, after, kind, cluster, id); err != nil {
			return nil, nil
		}
		if len(events) > 0 {
			flusher.Flush()
			if len(events) == streamBatch {
				continue
			}
		}
		select {
		case <-r.Context().Done():
			return nil, nil
		case <-a.s.ShutdownCh():
			return nil, nil
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil, nil
			}
			flusher.Flush()
		case <-changed:
		}
	}
}
