package agenthttp

import (
	"bytes"
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

// apiBase is what the groups of routes share: the server, the logger, the
// caches of compiled ACLs and OIDC providers, and the checks that use them
// (authorize, setMeta).
type apiBase struct {
	s      Server
	logger hclog.Logger

	// acls caches the compiled ACLs of tokens, providers the OIDC
	// providers of the auth methods.
	acls      aclCache
	providers oidcProviders
	// logins are the OIDC logins begun on this server as the leader.
	logins oidcLogins
	// restoring is held by the snapshot restore this server is reading,
	// checking or forwarding: one at a time (snapshotRestoreSlot).
	restoring sync.Mutex
	// monitors counts the log monitors running, eventStreams the open
	// event streams.
	monitors, eventStreams atomic.Int32
	// forwarded is the highest index that a write this server forwarded
	// was answered with: reads through it wait for it (readyourwrites.go).
	forwarded atomic.Pointer[forwardedWrite]
}

// httpAPI serves the v1 API on the HTTP port and, for requests forwarded by
// followers, on the RPC port: it builds both handlers, with the middleware
// (guard, wrap), from the routes of its groups, each a small type over the
// shared apiBase.
type httpAPI struct {
	*apiBase

	// fwd forwards the requests that need the leader (forwarder.go).
	fwd *forwarder

	cluster  *clusterAPI
	operator *operatorAPI
	acl      *aclAPI
	sso      *ssoAPI

	// ui is the dashboard, built once by dashboard().
	uiOnce sync.Once
	ui     *web.UI
}

// The groups of routes.
type (
	// clusterAPI: status, agent, health, deployments, pauses, windows,
	// events, notifications.
	clusterAPI struct{ *apiBase }
	// operatorAPI: Raft, snapshots, keyring, autopilot, GC, monitor,
	// debug.
	operatorAPI struct{ *apiBase }
	// aclAPI: policies, roles, tokens, auth methods, binding rules.
	aclAPI struct{ *apiBase }
	// ssoAPI: logins through an auth method (OIDC, JWT).
	ssoAPI struct{ *apiBase }
)

func newHTTPAPI(s Server) *httpAPI {
	b := &apiBase{s: s, logger: s.Logger().Named("http")}
	return &httpAPI{
		apiBase: b, fwd: newForwarder(b, s.Logger().Named("forward")),
		cluster: &clusterAPI{b}, operator: &operatorAPI{b}, acl: &aclAPI{b}, sso: &ssoAPI{b},
	}
}

// Route kinds.
const (
	kindRead  = "read"
	kindWrite = "write"
	// kindLeaderRead is a read only the leader can answer.
	kindLeaderRead = "leader-read"
)

// handler is the API of the HTTP port or, internal, of the RPC port (the
// requests forwarded by followers and the calls of peers). On the HTTP
// port, a follower hands a request that needs the leader to the forwarder
// before any middleware: the guard, the ACL check and the route run once,
// on the server that answers.
func (a *httpAPI) handler(internal bool) http.Handler {
	mux := http.NewServeMux()
	kinds := map[string]string{}
	route := func(pattern, kind string, rule routeRule, fn handlerFunc) {
		kinds[pattern] = kind
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
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.s.Metrics(), promhttp.HandlerOpts{}))
	if !internal {
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
		mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &HTTPError{Code: http.StatusNotFound, Msg: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
	// Every answer carries the cluster headers, errors included; a route
	// sets them again once it has read the state.
	here := a.guard(mux, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.setMeta(w)
		mux.ServeHTTP(w, r)
	}))
	if internal {
		return here
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.s.IsLeader() || !needsLeader(mux, kinds, r) {
			here.ServeHTTP(w, r)
			return
		}
		setDeadlines(w, r)
		a.fwd.serveOnLeader(w, r, here)
	})
}

// needsLeader reports whether a request runs on the leader: a write, or a
// consistent read.
func needsLeader(mux *http.ServeMux, kinds map[string]string, r *http.Request) bool {
	_, pattern := mux.Handler(r)
	switch kinds[pattern] {
	case kindWrite, kindLeaderRead:
		return true
	case kindRead:
		return r.URL.Query().Has("consistent")
	}
	return false
}

// wrap applies the cluster rules to a handler: writes run on the leader
// (a follower forwarded them before wrap, see handler), consistent reads
// too, and a server that is not the leader answers them 503 not-leader;
// every answer carries the index and leader headers. The route's ACL rule
// is checked where the handler runs: a read on the server asked, with its
// replicated state; a write (or a consistent read) on the leader, with the
// token the forwarded request carries.
func (a *httpAPI) wrap(kind string, rule routeRule, internal bool, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if isAbort(p) {
					panic(p)
				}
				a.logger.Error("panic in handler", "path", r.URL.Path, "panic", p)
				writeError(w, &HTTPError{Code: http.StatusInternalServerError, Msg: "internal error"})
			}
		}()
		r.Body = http.MaxBytesReader(w, r.Body, bodyLimit(a.s.Config(), r))
		if !a.ready(w, r, kind, internal) {
			return
		}
		authorized, err := a.authorize(r, rule)
		if err != nil {
			if errors.Is(err, errTokenNotFound) && !internal && !a.s.IsLeader() {
				// A token created on the leader may not have reached this
				// server yet: the leader answers with it.
				a.fwd.serveOnLeader(w, r, http.HandlerFunc(tokenNotFound))
				return
			}
			a.setMeta(w)
			writeError(w, err)
			return
		}
		r = authorized
		if rule.scope == scopeJob {
			// With ACLs off no check resolved the job's cluster: the
			// handler acts on the one the request names or the job's
			// only one, or answers why not.
			if r, err = a.withJobCluster(r); err != nil {
				a.setMeta(w)
				writeError(w, err)
				return
			}
		}
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

// ready checks what a request of kind needs before its ACL check, and
// answers it when that fails: a write or a consistent read runs on the
// leader (a consistent read after it verified its leadership), and a read
// waits for the index its X-Nops-Min-Index asks for and, on the HTTP port
// (not a peer's call on the RPC port), for the writes this server
// forwarded (readyourwrites.go), before the ACL check, as the client's
// token may be that new.
func (a *httpAPI) ready(w http.ResponseWriter, r *http.Request, kind string, internal bool) bool {
	needLeader := kind == kindWrite || kind == kindLeaderRead || (kind == kindRead && r.URL.Query().Has("consistent"))
	if needLeader {
		if !a.s.IsLeader() {
			// Leadership moved since the request arrived: the follower
			// that forwarded it tries the new leader.
			w.Header().Set(headerNotLeader, "true")
			writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: structs.ErrNotLeader.Error()})
			return false
		}
		if kind != kindWrite {
			if err := a.s.Raft().VerifyLeader().Error(); err != nil {
				writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: "leadership lost: " + err.Error()})
				return false
			}
		}
	}
	if kind != kindWrite {
		if err := a.awaitMinIndex(w, r, !internal); err != nil {
			a.setMeta(w)
			writeError(w, err)
			return false
		}
	}
	return true
}

// tokenNotFound answers a request forwarded for its token when leadership
// came to this server meanwhile: the token is not known here either.
func tokenNotFound(w http.ResponseWriter, _ *http.Request) { writeError(w, errTokenNotFound) }

type rawBody struct {
	contentType string
	body        []byte
}

func (a *apiBase) setMeta(w http.ResponseWriter) {
	h := w.Header()
	h.Set(headerIndex, strconv.FormatUint(a.s.State().LatestIndex(), 10))
	leader, _ := a.s.Leader()
	h.Set(headerKnownLeader, strconv.FormatBool(leader != ""))
	contact := time.Duration(0)
	if !a.s.IsLeader() {
		if last := a.s.Raft().LastContact(); !last.IsZero() {
			contact = time.Since(last)
		}
	}
	h.Set(headerLastContact, strconv.FormatInt(contact.Milliseconds(), 10))
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
		he = &HTTPError{Code: StatusOf(err), Msg: err.Error()}
	}
	body := map[string]any{"error": he.Msg}
	if len(he.Problems) > 1 {
		body["problems"] = he.Problems
	}
	writeJSON(w, he.Code, body)
}

// StatusOf returns the HTTP status an error answers with.
func StatusOf(err error) int {
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
	case errors.Is(err, structs.ErrForbidden):
		return http.StatusForbidden
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
