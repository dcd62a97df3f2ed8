package agenthttp

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/nops-dev/nops/agent/config"
)

// The HTTP guard: what every request to either port goes through before a
// route sees it, and the limits of the servers themselves.
//
//   - Timeouts: a request must be read within HTTPReadTimeout and answered
//     within HTTPWriteTimeout; an idle keep-alive connection is closed after
//     HTTPIdleTimeout; headers are at most maxHeaderBytes. Long polls and
//     streams have no write deadline, snapshot transfers get
//     snapshotTransferTimeout both ways.
//   - At most HTTPMaxConns connections are served at once.
//   - A wrong method on a known path answers 405 with an Allow header.
//   - A state-changing request (POST, PUT, PATCH, DELETE) with a body must
//     say Content-Type: application/json (a snapshot restore: its archive
//     type), else 415; one without a body and without a Content-Type
//     (curl -X POST …/v1/acl/bootstrap) needs none, as the Origin check
//     below refuses a browser's cross-site write. A browser can send a text/plain or form body to any site
//     without asking; a JSON body it sends only after a CORS preflight, which
//     this server does not grant. The dashboard's forms (/ui/) post form
//     bodies and are protected by the session's CSRF token instead.
//   - A state-changing request from a browser (it carries Origin) must come
//     from the server's own origin (scheme, host and port) addressed by IP or localhost, or from an
//     origin in HTTPAllowedOrigins or the origin of UIURL, else 403. A same-origin request under a
//     host name is refused unless allowed: a DNS rebinding page is
//     "same-origin" under its own name.
//   - A body over the route's limit answers 413, at once when its declared
//     length says so.
const (
	// maxHeaderBytes bounds a request's headers: a token and a few cookies
	// need a few KiB, and 64 KiB is what common proxies accept.
	maxHeaderBytes = 64 << 10
	// snapshotTransferTimeout bounds a snapshot save or restore: a 1 GiB
	// archive (snapshot.DefaultMaxSize) over a slow link.
	snapshotTransferTimeout = 30 * time.Minute
	// maxReadHeaderTimeout bounds the wait for a request's headers, which
	// a client sends at once; a slow sender holds a connection slot.
	maxReadHeaderTimeout = 10 * time.Second
)

// webhookPath is the git webhook's route, and webhookContentTypes the
// types a delivery may be sent as.
const webhookPath = "/v1/webhook/git"

var webhookContentTypes = []string{"application/json", "application/x-www-form-urlencoded"}

// snapshotContentTypes are the types a snapshot restore may be sent as.
var snapshotContentTypes = []string{"application/x-nops-snapshot", "application/octet-stream", "application/gzip"}

// NewHTTPServer returns an http.Server of h with the guard's limits.
// A zero limit (a Config not built by config.Default) takes the default.
func NewHTTPServer(cfg *config.Config, h http.Handler) *http.Server {
	read := orDefault(cfg.HTTPReadTimeout, config.DefaultHTTPReadTimeout)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(maxReadHeaderTimeout, read),
		ReadTimeout:       read,
		WriteTimeout:      orDefault(cfg.HTTPWriteTimeout, config.DefaultHTTPWriteTimeout),
		IdleTimeout:       orDefault(cfg.HTTPIdleTimeout, config.DefaultHTTPIdleTimeout),
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// LimitListener caps the connections ln serves at once.
func LimitListener(cfg *config.Config, ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, orDefault(cfg.HTTPMaxConns, config.DefaultHTTPMaxConns))
}

// guard wraps the API's mux, on both ports: a request forwarded by a
// follower meets it once, on the leader.
func (a *httpAPI) guard(mux *http.ServeMux, next http.Handler) http.Handler {
	allowed := map[string]bool{}
	for _, o := range a.s.Config().HTTPAllowedOrigins {
		allowed[strings.TrimSuffix(strings.ToLower(o), "/")] = true
	}
	// The dashboard's public address is an origin of this server's own.
	if u, err := url.Parse(a.s.Config().UIURL); err == nil && u.Scheme != "" && u.Host != "" {
		allowed[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if isAbort(p) {
					panic(p)
				}
				a.logger.Error("panic in request guard", "path", r.URL.Path, "panic", p)
				writeError(w, &HTTPError{Code: http.StatusInternalServerError, Msg: "internal error"})
			}
		}()
		setDeadlines(w, r)
		if _, pattern := mux.Handler(r); pattern == "/" {
			// No route: 405 when the path is known under other methods,
			// else the mux answers 404.
			if allow := allowedMethods(mux, r); len(allow) > 0 {
				a.setMeta(w)
				w.Header().Set("Allow", strings.Join(allow, ", "))
				writeError(w, &HTTPError{Code: http.StatusMethodNotAllowed,
					Msg: fmt.Sprintf("method %s is not allowed on %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if limit := bodyLimit(a.s.Config(), r); r.ContentLength > limit {
			a.setMeta(w)
			writeError(w, &HTTPError{Code: http.StatusRequestEntityTooLarge,
				Msg: fmt.Sprintf("request body too large: the limit is %d bytes", limit)})
			return
		}
		if stateChanging(r.Method) {
			// The dashboard's forms post form bodies; they carry a CSRF
			// token of the session instead (agent/web).
			if err := checkContentType(r); err != nil && !isDashboardPath(r.URL.Path) {
				a.setMeta(w)
				writeError(w, err)
				return
			}
			// A forwarded request carries the host its client addressed:
			// the leader checks its origin as the follower would have.
			if err := checkOrigin(r, allowed); err != nil {
				a.logger.Warn("cross-origin write refused", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
				a.setMeta(w)
				writeError(w, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

func isSnapshotPath(p string) bool { return p == "/v1/operator/snapshot" }

// isDashboardPath reports whether p is a page or form of the dashboard.
func isDashboardPath(p string) bool { return strings.HasPrefix(p, "/ui/") }

// bodyLimit is the largest body a request may send.
func bodyLimit(cfg *config.Config, r *http.Request) int64 {
	if isSnapshotPath(r.URL.Path) {
		return int64(orDefault(cfg.SnapshotMaxSize, config.DefaultSnapshotMaxSize))
	}
	return maxBody
}

// setDeadlines lifts the write deadline of long polls and streams, and
// gives snapshot transfers longer both ways.
func setDeadlines(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	switch {
	case isSnapshotPath(r.URL.Path):
		at := time.Now().Add(snapshotTransferTimeout)
		_ = rc.SetReadDeadline(at)
		_ = rc.SetWriteDeadline(at)
	case isLongPoll(r):
		_ = rc.SetWriteDeadline(time.Time{})
	}
}

// isLongPoll reports a request whose answer may take as long as it asks
// (?wait=, ?index=) or never ends (a stream of server-sent events).
func isLongPoll(r *http.Request) bool {
	q := r.URL.Query()
	return q.Has("wait") || q.Has("index") || strings.HasSuffix(r.URL.Path, "/stream") ||
		strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// allowedMethods lists the methods the mux has a route for on r's path.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := *r
		probe.Method = m
		if _, pattern := mux.Handler(&probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// checkContentType requires a JSON content type on a state-changing request
// with a body, or a snapshot archive type on a snapshot restore. A request
// with neither a body nor a Content-Type passes.
func checkContentType(r *http.Request) error {
	want := []string{"application/json"}
	switch {
	case isSnapshotPath(r.URL.Path):
		want = snapshotContentTypes
	case r.URL.Path == webhookPath:
		// GitHub can deliver its payload as a form; a push proves itself
		// by its signature, which a page cannot forge.
		want = webhookContentTypes
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		for _, w := range want {
			if mt == w {
				return nil
			}
		}
	}
	if ct == "" {
		ct = "none"
	}
	return &HTTPError{Code: http.StatusUnsupportedMediaType,
		Msg: fmt.Sprintf("%s %s needs Content-Type: %s (got %s)", r.Method, r.URL.Path, strings.Join(want, " or "), ct)}
}

// requestScheme is the scheme r came in by on this server.
func requestScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// checkOrigin refuses a browser's write from another origin, or from this
// server's origin under a host name that is not allowed (DNS rebinding).
// A request without Origin does not come from a browser's page.
func checkOrigin(r *http.Request, allowed map[string]bool) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if allowed[strings.ToLower(origin)] {
		return nil
	}
	refuse := func(why string) error {
		return &HTTPError{Code: http.StatusForbidden,
			Msg: fmt.Sprintf("origin %q may not send writes: %s; add it to http_allowed_origins to allow it", origin, why)}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return refuse("not an origin this server serves")
	}
	if !strings.EqualFold(u.Scheme, requestScheme(r)) || !strings.EqualFold(u.Host, r.Host) {
		return refuse("cross-origin")
	}
	host := u.Hostname()
	if net.ParseIP(host) == nil && !strings.EqualFold(host, "localhost") {
		return refuse("a host name that is not allowed")
	}
	return nil
}
