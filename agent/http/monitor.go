package agenthttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent/acl"
)

// Log streaming (GET /v1/agent/monitor), as Nomad's and Consul's monitor:
// a sink registered on the server's InterceptLogger copies each log line,
// at the level the client asks for, into a bounded buffer that the HTTP
// handler drains. The sink never blocks the server: when the client reads
// too slowly and the buffer is full, lines are dropped and counted, and the
// client is told how many. Known secrets are redacted from every line.

const (
	// monitorBuffer is how many log lines a monitor holds for a slow
	// client before it drops: a few seconds of a busy server's debug log.
	monitorBuffer = 512
	// maxMonitorLine bounds one streamed log line; a longer one (a huge
	// error or plan) is cut rather than held whole in every buffer.
	maxMonitorLine = 16 << 10
	// maxMonitors bounds the monitors of one server at once: each one
	// formats every log line again, so many would slow the server.
	maxMonitors = 16
	// monitorCopyBuffer is the read size when relaying another server's
	// monitor: a few lines per read, flushed as they come.
	monitorCopyBuffer = 32 << 10
)

// ErrMonitorUnavailable is a monitor asked of a server whose logger cannot
// stream (it was not built as an hclog.InterceptLogger).
var ErrMonitorUnavailable = errors.New("this server's logger cannot stream logs")

// monitor is one client's stream of log lines.
type monitor struct {
	ch      chan []byte
	dropped atomic.Int64
	redact  *redactor
}

var _ io.Writer = (*monitor)(nil)

// Write takes one formatted log line. It never blocks: a full buffer drops
// the line.
func (m *monitor) Write(p []byte) (int, error) {
	line := p
	if len(line) > maxMonitorLine {
		line = append(append([]byte(nil), line[:maxMonitorLine]...), []byte("...[truncated]\n")...)
	} else {
		line = append([]byte(nil), line...)
	}
	line = m.redact.bytes(line)
	select {
	case m.ch <- line:
	default:
		m.dropped.Add(1)
	}
	return len(p), nil
}

// startMonitor registers a sink at level on the server's logger. The
// returned stop removes it.
func (a *apiBase) startMonitor(level hclog.Level, json bool) (*monitor, func(), error) {
	il, ok := a.s.RootLogger().(hclog.InterceptLogger)
	if !ok {
		return nil, nil, ErrMonitorUnavailable
	}
	if n := a.monitors.Add(1); n > maxMonitors {
		a.monitors.Add(-1)
		return nil, nil, &HTTPError{Code: http.StatusTooManyRequests, Msg: fmt.Sprintf("at most %d log monitors may run on one server at once", maxMonitors)}
	}
	m := &monitor{ch: make(chan []byte, monitorBuffer), redact: newRedactor(a.s.LiveConfig())}
	sink := hclog.NewSinkAdapter(&hclog.LoggerOptions{Level: level, Output: m, JSONFormat: json})
	il.RegisterSink(sink)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			il.DeregisterSink(sink)
			a.monitors.Add(-1)
		})
	}
	return m, stop, nil
}

// agentMonitor streams this server's logs (or, with ?server=NODE, another
// server's) until the client goes away. ?log_level= sets the level (info by
// default), ?log_json=true the format.
func (a *operatorAPI) agentMonitor(w http.ResponseWriter, r *http.Request) (any, error) {
	if done, err := a.toServer(w, r); done || err != nil {
		return nil, err
	}
	q := r.URL.Query()
	levelName := strings.ToLower(q.Get("log_level"))
	if levelName == "" {
		levelName = "info"
	}
	level := hclog.LevelFromString(levelName)
	if level == hclog.NoLevel || level == hclog.Off {
		return nil, badRequest(fmt.Sprintf("log_level: %q is not one of trace, debug, info, warn, error", levelName))
	}
	m, stop, err := a.startMonitor(level, q.Get("log_json") == "true")
	if err != nil {
		return nil, err
	}
	defer stop()
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "==> streaming the logs of %s at level %s\n", a.s.NodeName(), levelName)
	if flusher != nil {
		flusher.Flush()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var reported int64
	for {
		select {
		case <-r.Context().Done():
			return nil, nil
		case line := <-m.ch:
			if _, err := w.Write(line); err != nil {
				return nil, nil
			}
			// Write whatever else is waiting before flushing.
			for n := len(m.ch); n > 0; n-- {
				if _, err := w.Write(<-m.ch); err != nil {
					return nil, nil
				}
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-tick.C:
			// A deleted or expired token ends the stream.
			if _, ok := a.reauthorize(r, onCluster(acl.Operator)); !ok {
				return nil, nil
			}
			if d := m.dropped.Load(); d > reported {
				fmt.Fprintf(w, "==> the client read too slowly: %d log lines dropped\n", d-reported)
				reported = d
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
	}
}

// toServer sends a request that names another server (?server= its node
// name or ID) to that server's RPC port and copies the answer back,
// streaming. It reports done when it answered. A request that names this
// server, or none, is left to the caller.
func (a *operatorAPI) toServer(w http.ResponseWriter, r *http.Request) (bool, error) {
	target := r.URL.Query().Get("server")
	if target == "" || target == a.s.NodeName() || target == a.s.NodeID() {
		return false, nil
	}
	if r.Header.Get(headerForwarded) != "" {
		// A forwarded request is for this server only: never hop twice.
		return false, &HTTPError{Code: http.StatusBadGateway, Msg: fmt.Sprintf("forwarded request names server %q, which is not this server", target)}
	}
	addr := a.s.ServerRPCAddr(target)
	if addr == "" {
		return false, fmt.Errorf("%w: no server named %q (see nops operator raft list-peers or /v1/agent/members)", errNotFound, target)
	}
	q := r.URL.Query()
	q.Del("server")
	u := *r.URL
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, "http://"+addr+u.RequestURI(), http.NoBody)
	if err != nil {
		return false, err
	}
	req.Header = r.Header.Clone()
	req.Header.Set(headerForwarded, a.s.NodeID())
	client := a.s.RPCHTTPClient(addr)
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return false, &HTTPError{Code: http.StatusBadGateway, Msg: fmt.Sprintf("server %s at %s: %v", target, addr, err)}
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, monitorCopyBuffer)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return true, nil
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return true, nil
		}
	}
}

// redactor replaces the secrets a server knows with [redacted].
type redactor struct {
	secrets [][]byte
}

func (r *redactor) bytes(b []byte) []byte {
	if r == nil {
		return b
	}
	for _, s := range r.secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte("[redacted]"))
		}
	}
	return b
}
