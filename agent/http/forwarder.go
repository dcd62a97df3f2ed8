package agenthttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/rpc/forward"
	"github.com/nops-dev/nops/structs"
)

// What the HTTP port accepts fits the forwarding protocol's frames, and
// the leader refuses the headers the HTTP server refuses (compile-time
// checks: a negative constant does not convert to uint64).
const (
	_ = uint64(forward.MaxBody - maxBody)
	_ = uint64(forward.MaxHeaderBytes - maxHeaderBytes)
	_ = uint64(maxHeaderBytes - forward.MaxHeaderBytes)
)

// newForwardServer is the leader's end of the forwarding protocol: it runs
// forwarded requests with handler, the RPC port's internal one.
func newForwardServer(api *httpAPI, handler http.Handler, logger hclog.Logger) *forward.Server {
	s := api.s
	return forward.NewServer(forward.Options{
		Handler: handler, Logger: logger,
		IdleTimeout:   orDefault(s.Config().HTTPIdleTimeout, config.DefaultHTTPIdleTimeout),
		ReadTimeout:   orDefault(s.Config().HTTPReadTimeout, config.DefaultHTTPReadTimeout),
		WriteTimeout:  orDefault(s.Config().HTTPWriteTimeout, config.DefaultHTTPWriteTimeout),
		StreamTimeout: snapshotTransferTimeout,
		Goroutines:    s.Goroutines(),
		BaseContext:   s.RequestContext,
		WriteError: func(w http.ResponseWriter, code int, msg string) {
			writeError(w, &HTTPError{Code: code, Msg: msg})
		},
		SetMeta: api.setMeta,
	})
}

// forwarder sends a follower's requests that need the leader over the
// forwarding protocol (package rpc/forward) and copies the answers back.
// It retries only what the leader cannot have applied: a failed dial, a
// frame of which no byte was written, or a not-leader answer (not for an
// upload whose rest was sent: that is answered 503, not applied). A
// connection lost after the frame went out, or on which the leader sent
// nothing, not even a keepalive, for forward.SilenceLimit, answers 502,
// possibly applied. With no leader, a request waits up to leaderWait, then answers 503.
type forwarder struct {
	s      Server
	api    *apiBase
	logger hclog.Logger

	mu sync.Mutex
	// client forwards to the current leader.
	client *forward.Client
	// framed counts the answers the leader gave.
	framed atomic.Uint64
}

func newForwarder(api *apiBase, logger hclog.Logger) *forwarder {
	return &forwarder{s: api.s, api: api, logger: logger}
}

// serveOnLeader runs a request that needs the leader: through here, once
// this server leads, else on the leader, forwarded. It is a loop, not a
// handler that calls itself: it waits up to leaderWait for a leader,
// retrying only what the leader cannot have applied, then forwards or
// serves, once.
func (f *forwarder) serveOnLeader(w http.ResponseWriter, r *http.Request, here http.Handler) {
	req, err := f.outbound(w, r)
	if err != nil {
		f.api.setMeta(w)
		writeError(w, err)
		return
	}
	deadline := time.Now().Add(leaderWait)
	var lastErr error
	for {
		if f.s.IsLeader() {
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(req.Body), orEmpty(req.Rest)))
			here.ServeHTTP(w, r)
			return
		}
		pause := 50 * time.Millisecond
		if leader, _ := f.s.Leader(); leader != "" && leader != f.s.RPCAddr() {
			done, err := f.forwardTo(w, r, leader, req)
			if done {
				return
			}
			lastErr, pause = err, 100*time.Millisecond
		}
		if time.Now().After(deadline) {
			f.noLeader(w, lastErr)
			return
		}
		select {
		case <-r.Context().Done():
			f.abandon(w, r)
			return
		case <-time.After(pause):
		}
	}
}

func orEmpty(r io.Reader) io.Reader {
	if r == nil {
		return http.NoBody
	}
	return r
}

// outbound is the request as it is forwarded: its body read whole (at most
// maxBody), or, for a snapshot, streamed: its first chunk read, the rest
// left in req.Rest, a blocked read of which req.Interrupt ends.
func (f *forwarder) outbound(w http.ResponseWriter, r *http.Request) (*forward.Request, error) {
	header := r.Header.Clone()
	header.Set(headerForwarded, f.s.NodeID())
	req := &forward.Request{Method: r.Method, URI: r.URL.RequestURI(), Host: r.Host, Header: header, Stream: isSnapshotPath(r.URL.Path)}
	if !req.Stream {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			return nil, decodeError(err)
		}
		req.Body = body
		return req, nil
	}
	head := make([]byte, forward.Chunk)
	n, end, err := forward.ReadChunk(r.Body, head)
	if err != nil {
		return nil, decodeError(err)
	}
	req.Body = head[:n]
	if !end {
		req.More, req.Rest = true, r.Body
		req.Interrupt = interruptRead(w)
	}
	return req, nil
}

// interruptRead returns what ends a blocked read of w's request body: a
// read deadline in the past. The deadline stays on the client's
// connection: had the body been read to its end already, the HTTP server's
// background read would fail on it and cancel the context of every later
// request the connection carries. So the connection closes after this
// answer rather than carry another. Call it on the handler's goroutine,
// before the answer's header is written.
func interruptRead(w http.ResponseWriter) func() {
	rc := http.NewResponseController(w)
	return func() {
		_ = rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
	}
}

// forwardTo sends the request to the leader once. done reports that w has
// its answer: the leader's, or a 502 when the leader was lost after the
// request went out; else err says why it may be sent again.
func (f *forwarder) forwardTo(w http.ResponseWriter, r *http.Request, leader string, req *forward.Request) (done bool, err error) {
	limit := forward.CallLimit
	if req.Stream {
		limit = snapshotTransferTimeout
	}
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	client := f.leaderClient(leader)
	var resp *forward.Response
	var sent bool
	if req.Stream {
		resp, sent, err = client.CallStream(ctx, req)
	} else {
		resp, sent, err = client.Call(ctx, req)
	}
	switch {
	case err == nil && resp.Abort:
		err = forward.ErrAborted
	case err == nil && resp.Header.Get(headerNotLeader) != "":
		if resp.BodyStream != nil {
			resp.BodyStream.Close()
		}
		if req.More {
			// The rest of the upload went to a server that refused it:
			// nothing was applied, but the body cannot be sent again.
			f.noLeader(w, fmt.Errorf("%s answered %w while the upload was sent", leader, structs.ErrNotLeader))
			return true, nil
		}
		return false, fmt.Errorf("%s: %w", leader, structs.ErrNotLeader)
	}
	if err != nil && !sent {
		return false, err
	}
	if err != nil {
		f.api.setMeta(w)
		writeError(w, &HTTPError{Code: http.StatusBadGateway,
			Msg: fmt.Sprintf("lost the leader %s while forwarding; the request may or may not have been applied: %v", leader, err)})
		return true, nil
	}
	f.framed.Add(1)
	f.sawForwardedWrite(r, resp.Status, resp.Header)
	f.copyAnswer(w, r, resp)
	return true, nil
}

// copyAnswer writes the leader's answer, headers included, in place of
// this server's.
func (f *forwarder) copyAnswer(w http.ResponseWriter, r *http.Request, resp *forward.Response) {
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.Status)
	if resp.BodyStream == nil {
		_, _ = w.Write(resp.Body)
		return
	}
	defer resp.BodyStream.Close()
	if _, err := io.Copy(w, resp.BodyStream); err != nil {
		// The status is sent: abort the connection so the client sees a
		// broken answer rather than a short one.
		f.logger.Warn("forwarded answer cut short", "path", r.URL.Path, "error", err)
		panic(http.ErrAbortHandler)
	}
}

// noLeader answers 503: no leader took the request, nothing was applied.
func (f *forwarder) noLeader(w http.ResponseWriter, cause error) {
	f.api.setMeta(w)
	msg := structs.ErrNoLeader.Error()
	if cause != nil {
		msg += ": " + cause.Error()
	}
	writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: msg})
}

// abandon answers a request whose wait for a leader ended early: the
// server shuts down, or the client went away. Nothing was applied; a
// handler that returned without writing would have answered 200.
func (f *forwarder) abandon(w http.ResponseWriter, r *http.Request) {
	cause := structs.ErrShuttingDown
	if !f.s.ShuttingDown() {
		cause = fmt.Errorf("request cancelled: %w", context.Cause(r.Context()))
	}
	f.noLeader(w, cause)
}

// leaderClient returns the client of the leader at addr, and retires the
// client of a previous leader.
func (f *forwarder) leaderClient(addr string) *forward.Client {
	f.mu.Lock()
	if f.client != nil && f.client.Addr() == addr {
		defer f.mu.Unlock()
		return f.client
	}
	old := f.client
	// A connection is reused for half the leader's idle timeout, which the
	// leader counts from the last frame it read: it never closes for
	// idleness a connection a frame is on its way to.
	reuse := orDefault(f.s.Config().HTTPIdleTimeout, config.DefaultHTTPIdleTimeout) / 2
	f.client = forward.NewClient(addr, func(ctx context.Context) (net.Conn, error) {
		return f.s.DialForward(ctx, addr)
	}, f.logger, reuse)
	c := f.client
	f.mu.Unlock()
	if old != nil {
		old.Retire()
	}
	return c
}
