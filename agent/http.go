package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nops-dev/nops/agent/web"
	"github.com/nops-dev/nops/structs"
)

const (
	// maxBody bounds a request body; a larger one answers 413. A snapshot
	// restore is bounded by the snapshot-max-size setting.
	maxBody = 1 << 20

	headerIndex       = "X-Nops-Index"
	headerKnownLeader = "X-Nops-Known-Leader"
	headerLastContact = "X-Nops-Last-Contact"
	headerNextToken   = "X-Nops-Next-Token"
	headerForwarded   = "X-Nops-Forwarded"
	headerActor       = "X-Nops-Actor"
	headerNotLeader   = "X-Nops-Not-Leader"
)

// HTTPError is an error with a status code and, for bad input, every
// problem found.
type HTTPError struct {
	Code     int
	Msg      string
	Problems []string
}

func (e *HTTPError) Error() string { return e.Msg }

func badRequest(problems ...string) *HTTPError {
	return &HTTPError{Code: http.StatusBadRequest, Msg: strings.Join(problems, "; "), Problems: problems}
}

// handlerFunc answers a request with a value to encode as JSON, or an error.
type handlerFunc func(w http.ResponseWriter, r *http.Request) (any, error)

// httpAPI serves the v1 API on the HTTP port and, for requests forwarded by
// followers, on the RPC port.
type httpAPI struct {
	s      *Server
	logger hclog.Logger

	mu      sync.Mutex
	clients map[string]*http.Client
	// fwd forwards writes to the current leader (forward.go).
	fwd *fwdClient
	// framed counts the answers the leader gave with it.
	framed atomic.Uint64

	// acls caches the compiled ACLs of tokens, providers the OIDC
	// providers of the auth methods.
	acls      aclCache
	providers oidcProviders
	// logins are the OIDC logins begun on this server as the leader.
	logins oidcLogins
	// restoring is held by the snapshot restore this server is reading,
	// checking or forwarding: one at a time (snapshotRestoreSlot).
	restoring sync.Mutex

	// ui is the dashboard, built once by dashboard().
	uiOnce sync.Once
	ui     *web.UI
}

func newHTTPAPI(s *Server) *httpAPI {
	return &httpAPI{s: s, logger: s.logger.Named("http"), clients: map[string]*http.Client{}}
}

// Route kinds.
const (
	kindRead  = "read"
	kindWrite = "write"
)

func (a *httpAPI) handler(internal bool) http.Handler {
	mux := http.NewServeMux()
	route := func(pattern, kind string, rule routeRule, fn handlerFunc) {
		if kind == kindUI {
			// The dashboard is served on the HTTP port only.
			if !internal {
				mux.Handle(pattern, a.wrapUI(rule, fn))
			}
			return
		}
		mux.Handle(pattern, a.wrap(kind, rule, internal, fn))
	}
	a.routes(route)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.s.metrics, promhttp.HandlerOpts{}))
	if !internal {
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
		mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &HTTPError{Code: http.StatusNotFound, Msg: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	// Every answer carries the cluster headers, errors included; a route
	// sets them again once it has read the state.
	return a.guard(mux, internal, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.setMeta(w)
		mux.ServeHTTP(w, r)
	}))
}

// wrap applies the cluster rules to a handler: writes run on the leader
// (forwarded there from a follower), consistent reads too; every answer
// carries the index and leader headers. The route's ACL rule is checked
// where the handler runs: a read on the server asked, with its replicated
// state; a write (or a consistent read) on the leader, with the token the
// forwarded request carries.
func (a *httpAPI) wrap(kind string, rule routeRule, internal bool, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.logger.Error("panic in handler", "path", r.URL.Path, "panic", p)
				writeError(w, &HTTPError{Code: http.StatusInternalServerError, Msg: "internal error"})
			}
		}()
		r.Body = http.MaxBytesReader(w, r.Body, bodyLimit(a.s.config, r))
		needLeader := kind == kindWrite || (kind == kindRead && r.URL.Query().Has("consistent"))
		if needLeader {
			if !a.s.IsLeader() {
				if internal {
					w.Header().Set(headerNotLeader, "true")
					writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: structs.ErrNotLeader.Error()})
					return
				}
				if isSnapshotPath(r.URL.Path) {
					// A snapshot upload is read whole before it is
					// forwarded: refuse a caller without the right here,
					// before a byte of it is buffered, and a second
					// restore while one is under way.
					if _, err := a.authorize(r, rule); err != nil {
						writeError(w, err)
						return
					}
					if r.Method == http.MethodPut {
						release, err := a.snapshotRestoreSlot()
						if err != nil {
							writeError(w, err)
							return
						}
						defer release()
					}
				}
				a.forward(w, r)
				return
			}
			if kind == kindRead {
				if err := a.s.raft.VerifyLeader().Error(); err != nil {
					writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: "leadership lost: " + err.Error()})
					return
				}
			}
		}
		authorized, err := a.authorize(r, rule)
		if err != nil {
			if err == errTokenNotFound && !internal && !a.s.IsLeader() {
				a.forward(w, r)
				return
			}
			a.setMeta(w)
			writeError(w, err)
			return
		}
		r = authorized
		// The headers are set before the handler, for the handlers that
		// stream their answer, and again after it, so that an answer
		// carries the index of the state it read (after its own write).
		a.setMeta(w)
		out, err := fn(w, r)
		a.setMeta(w)
		if err != nil {
			writeError(w, err)
			return
		}
		if rule.scope == scopeList {
			out = filterList(out, requestIdentity(r), rule.cap)
		}
		if out == nil {
			return
		}
		if raw, ok := out.(rawBody); ok {
			w.Header().Set("Content-Type", raw.contentType)
			_, _ = w.Write(raw.body)
			return
		}
		if v, ok := w.(valueWriter); ok {
			// An in-process request of the dashboard takes the value
			// as it is, without a JSON round trip.
			v.setValue(out)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}

type rawBody struct {
	contentType string
	body        []byte
}

func (a *httpAPI) setMeta(w http.ResponseWriter) {
	h := w.Header()
	h.Set(headerIndex, strconv.FormatUint(a.s.State().LatestIndex(), 10))
	leader, _ := a.s.Leader()
	h.Set(headerKnownLeader, strconv.FormatBool(leader != ""))
	contact := time.Duration(0)
	if !a.s.IsLeader() {
		if last := a.s.raft.LastContact(); !last.IsZero() {
			contact = time.Since(last)
		}
	}
	h.Set(headerLastContact, strconv.FormatInt(contact.Milliseconds(), 10))
}

// forward sends the request to the leader's RPC port and copies its answer
// back: a write with the forwarding protocol (forward.go), anything else,
// and a write to a leader that does not speak it, over HTTP. It waits up to
// leaderWait for a leader, and retries only what the leader cannot have
// applied: a failed connect, or an answer that says it is not the leader.
func (a *httpAPI) forward(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, decodeError(err))
		return
	}
	deadline := time.Now().Add(leaderWait)
	for {
		leader, _ := a.s.Leader()
		if leader == "" || leader == a.s.rpcAddr {
			if a.s.IsLeader() {
				// Leadership came here while we waited.
				r.Body = io.NopCloser(bytes.NewReader(body))
				a.s.httpServer.Handler.ServeHTTP(w, r)
				return
			}
			if time.Now().After(deadline) {
				a.setMeta(w)
				writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: structs.ErrNoLeader.Error()})
				return
			}
			select {
			case <-r.Context().Done():
				a.abandon(w, r)
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		var resp *http.Response
		var sent, framed bool
		if isForwardedWrite(r) {
			resp, sent, framed, err = a.sendFrame(r, leader, body)
		}
		if !framed {
			resp, sent, err = a.send(r, leader, body)
		}
		if err == nil && resp.Header.Get(headerNotLeader) == "" {
			defer resp.Body.Close()
			// The leader's answer, headers included, replaces this
			// server's.
			for k, vs := range resp.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(resp.StatusCode)
			if _, err := io.Copy(w, resp.Body); err != nil {
				// The status is sent: abort the connection so the client
				// sees a broken answer rather than a short one.
				a.logger.Warn("forwarded answer cut short", "path", r.URL.Path, "error", err)
				panic(http.ErrAbortHandler)
			}
			return
		}
		if resp != nil {
			resp.Body.Close()
		}
		if err != nil && sent {
			a.setMeta(w)
			writeError(w, &HTTPError{Code: http.StatusBadGateway,
				Msg: fmt.Sprintf("lost the leader %s while forwarding; the request may or may not have been applied: %v", leader, err)})
			return
		}
		if time.Now().After(deadline) {
			a.setMeta(w)
			msg := structs.ErrNoLeader.Error()
			if err != nil {
				msg += ": " + err.Error()
			}
			writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: msg})
			return
		}
		select {
		case <-r.Context().Done():
			a.abandon(w, r)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// abandon answers a request whose wait for a leader ended early: the
// server shuts down, or the client went away. Nothing was applied; a handler
// that returned without writing would have answered 200.
func (a *httpAPI) abandon(w http.ResponseWriter, r *http.Request) {
	msg := structs.ErrNoLeader.Error() + ": " + errClosed.Error()
	if !a.s.shuttingDown() {
		msg = structs.ErrNoLeader.Error() + ": request cancelled: " + context.Cause(r.Context()).Error()
	}
	a.setMeta(w)
	writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: msg})
}

// leaderHTTPClient returns the HTTP client of the leader at addr. Only the
// current leader's is kept: a former leader's idle connections are closed
// and its client dropped, so that the map does not grow with every address
// that was ever leader.
func (a *httpAPI) leaderHTTPClient(addr string) *http.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[addr]; ok {
		return c
	}
	for old, c := range a.clients {
		c.CloseIdleConnections()
		delete(a.clients, old)
	}
	c := a.s.rpcHTTPClient(addr)
	a.clients[addr] = c
	return c
}

// send forwards one request. sent reports whether the request may have
// reached the leader (an error after that point must not be retried).
func (a *httpAPI) send(r *http.Request, leader string, body []byte) (*http.Response, bool, error) {
	client := a.leaderHTTPClient(leader)
	// A snapshot may take long to stream; every other request gets a
	// minute, as long as the longest handler allows itself.
	limit := time.Minute
	if r.URL.Path == "/v1/operator/snapshot" {
		limit = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	req, err := http.NewRequestWithContext(ctx, r.Method, "http://"+leader+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, false, err
	}
	req.Header = r.Header.Clone()
	req.Header.Set(headerForwarded, a.s.nodeID)
	var sent bool
	trace := &connTrace{onConn: func() { sent = true }}
	req = req.WithContext(withConnTrace(req.Context(), trace))
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, sent, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, true, nil
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var he *HTTPError
	if !errors.As(err, &he) {
		he = &HTTPError{Code: statusOf(err), Msg: err.Error()}
	}
	body := map[string]any{"error": he.Msg}
	if len(he.Problems) > 1 {
		body["problems"] = he.Problems
	}
	writeJSON(w, he.Code, body)
}

func statusOf(err error) int {
	var coded interface{ StatusCode() int }
	if errors.As(err, &coded) {
		return coded.StatusCode()
	}
	switch {
	case errors.Is(err, structs.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, structs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, structs.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, structs.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, structs.ErrUpstream), errors.Is(err, structs.ErrLeadershipLost):
		return http.StatusBadGateway
	case errors.Is(err, structs.ErrNoLeader), errors.Is(err, structs.ErrNotLeader), errors.Is(err, raft.ErrNotLeader):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// decode reads a JSON body strictly: unknown fields, trailing data and an
// oversize body are errors. An empty body leaves out untouched.
func decode(r *http.Request, out any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return decodeError(err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return badRequest("request body has data after the JSON value")
	}
	return nil
}

func decodeError(err error) error {
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return &HTTPError{Code: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body too large: the limit is %d bytes", mbe.Limit)}
	case errors.As(err, &se):
		return badRequest(fmt.Sprintf("malformed JSON at offset %d: %v", se.Offset, se))
	case errors.As(err, &te):
		return badRequest(fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return badRequest("unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: unexpected end of input")
	}
	return badRequest("bad request body: " + err.Error())
}

// writeMeta stamps a request on the leader: the time and who asked.
func writeMeta(r *http.Request) structs.WriteMeta {
	actor := strings.TrimSpace(r.Header.Get(headerActor))
	if actor == "" {
		actor = "anonymous"
	}
	if len(actor) > 128 {
		actor = actor[:128]
	}
	return structs.WriteMeta{Time: time.Now().UTC(), Actor: actor}
}

func queryInt(r *http.Request, key string) (int, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, badRequest(fmt.Sprintf("query parameter %s must be a non-negative integer, not %q", key, v))
	}
	return n, nil
}
