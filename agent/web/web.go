package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/structs"
)

//go:embed templates/*.html templates/partials/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Cookie names.
const (
	cookieToken = "nops_token"
	cookieCSRF  = "nops_csrf"
	cookieOIDC  = "nops_oidc"
	// cookieFlash carries the reason an action was refused to the page
	// the browser is sent back to, once.
	cookieFlash = "nops_flash"
	// fieldCSRF is the form field of the CSRF token.
	fieldCSRF = "csrf"
)

// Sentinel errors.
var (
	// ErrCSRF refuses a POST without the session's CSRF token or from
	// another site.
	ErrCSRF = errors.New("cross-site request refused: the form's CSRF token is missing or wrong, or it comes from another site")
	// ErrTooManyStreams refuses a live-update stream past the bound.
	ErrTooManyStreams = errors.New("too many live-update streams are open on this server")
)

// Backend is what the dashboard needs of its server.
type Backend interface {
	// Do serves one in-process request to the v1 API as the viewer:
	// with the viewer's token, forwarded to the leader when it writes.
	Do(ctx context.Context, v *Viewer, method, path string, body any) (*Response, error)
	// WaitChange blocks until the state's index passes after, ctx ends
	// or the server shuts down, and returns the index.
	WaitChange(ctx context.Context, after uint64) uint64
	// Index is the state's current Raft index.
	Index() uint64
	// Cluster describes the Raft peers, serf members and this server.
	Cluster() (*ClusterInfo, error)
	// LoginMethods lists the auth methods a browser can log in with
	// (OIDC), for the login page; their names are not secret.
	LoginMethods() []LoginMethod
}

// LoginMethod is an auth method the login page offers.
type LoginMethod struct {
	Name, DisplayName string
	Default           bool
}

// Response is the answer of an in-process API request.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
	// Value, when set, is the answer as the API handler returned it, in
	// place of Body: a local read skips the JSON round trip.
	Value any
}

// OK reports a 2xx answer.
func (r *Response) OK() bool { return r.Code >= 200 && r.Code < 300 }

// Decode decodes a 2xx JSON answer into out, or returns the API's error.
func (r *Response) Decode(out any) error {
	if !r.OK() {
		return r.Err()
	}
	if out == nil {
		return nil
	}
	if r.Value != nil {
		// The handler's value, when it has the type asked for.
		dst := reflect.ValueOf(out)
		if v := reflect.ValueOf(r.Value); dst.Kind() == reflect.Pointer && v.Type().AssignableTo(dst.Elem().Type()) {
			dst.Elem().Set(v)
			return nil
		} else if v.Kind() == reflect.Pointer && dst.Type() == v.Type() && !v.IsNil() {
			dst.Elem().Set(v.Elem())
			return nil
		}
		raw, err := json.Marshal(r.Value)
		if err != nil {
			return fmt.Errorf("encode API answer: %w", err)
		}
		r.Body = raw
	}
	if err := json.Unmarshal(r.Body, out); err != nil {
		return fmt.Errorf("decode API answer: %w", err)
	}
	return nil
}

// APIError is a non-2xx API answer.
type APIError struct {
	Code     int
	Msg      string
	Problems []string
}

func (e *APIError) Error() string { return e.Msg }

// Err returns the API error of a non-2xx answer.
func (r *Response) Err() *APIError {
	var body struct {
		Error    string   `json:"error"`
		Problems []string `json:"problems"`
	}
	_ = json.Unmarshal(r.Body, &body)
	if body.Error == "" {
		body.Error = http.StatusText(r.Code)
	}
	if len(body.Problems) == 0 {
		body.Problems = []string{body.Error}
	}
	return &APIError{Code: r.Code, Msg: body.Error, Problems: body.Problems}
}

// Viewer is who looks at a page: the identity the server resolved from
// the session's token.
type Viewer struct {
	// Name is shown on every page and recorded as the actor.
	Name string
	// Token is the session's secret, for the in-process API requests;
	// never rendered.
	Token string
	// Anonymous is set when no token is logged in.
	Anonymous bool
	// HeaderAuth is set when the token came in a request header rather
	// than the session cookie: no other site can send one, so such a
	// request needs no CSRF token.
	HeaderAuth bool
	// CanCluster and CanJob answer the viewer's capabilities; nil means
	// every capability (ACLs off).
	CanCluster func(capability string) bool
	CanJob     func(cluster, namespace, job, capability string) bool
}

type viewerKey struct{}

// WithViewer returns a context that carries the viewer.
func WithViewer(ctx context.Context, v *Viewer) context.Context {
	return context.WithValue(ctx, viewerKey{}, v)
}

func viewerOf(r *http.Request) *Viewer {
	if v, ok := r.Context().Value(viewerKey{}).(*Viewer); ok && v != nil {
		return v
	}
	return &Viewer{Name: "anonymous", Anonymous: true}
}

func (v *Viewer) cluster(c string) bool {
	return v.CanCluster == nil || v.CanCluster(c)
}

func (v *Viewer) job(cluster, ns, job, c string) bool {
	return v.CanJob == nil || v.CanJob(cluster, ns, job, c)
}

// Config configures the dashboard.
type Config struct {
	Logger  hclog.Logger
	Backend Backend
	// ACLs says whether ACLs are enabled; without them the dashboard
	// needs no login and says so.
	ACLs bool
	// TLS marks the session cookies Secure.
	TLS bool
	// UIURL is the public base URL of the dashboard (for the SSO
	// callback); empty means the address of the request.
	UIURL string
	// NomadUIURL, when set, links jobs and allocations to the Nomad UI.
	NomadUIURL string
	// Clusters returns the Nomad clusters the server deploys to, as its
	// configuration in force names them (SPEC section 16); nil means one
	// cluster named default with NomadUIURL. Every page knows the clusters
	// from it, without asking GET /v1/clusters, which only the pages that
	// show a cluster's state read.
	Clusters func() []ClusterLink
	// Node names this server.
	Node string
	// MaxStreams bounds the open live-update streams (default 64).
	MaxStreams int
	// Now is the clock (time.Now by default).
	Now func() time.Time
	// ForbidSelf answers the server's approval { forbid_self } now, so
	// that a page says why an Approve would be refused; nil means off.
	ForbidSelf func() bool
}

// UI is the dashboard of one server.
type UI struct {
	cfg    Config
	logger hclog.Logger
	// pages are the dashboard's pages, by name, set by New and read
	// only after. A page's templates are parsed on its first render and
	// kept: New parses every page once to refuse a broken one, and lets
	// the trees go, so that a server whose dashboard nobody opens (most
	// followers, an idle leader) does not hold them (about 2 MiB).
	pages  map[string]*lazyPage
	static http.Handler
	// assets maps each static file to the hash of its content, the
	// version in its URL.
	assets  map[string]string
	streams atomic.Int64
}

// views are the dashboard's pages: each reads the API as the viewer and
// renders one template; none writes.
type views struct{ *UI }

// actions are the dashboard's forms: each checks the CSRF token, runs one
// API write as the viewer and sends the browser back to a page.
type actions struct{ *UI }

// sessions are the dashboard's login, logout and SSO handlers: they set
// and clear the session cookies.
type sessions struct{ *UI }

// New parses the templates and returns the dashboard.
func New(cfg Config) (*UI, error) {
	if cfg.Backend == nil {
		return nil, errors.New("web: a backend is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = defaultMaxStreams
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.UIURL = strings.TrimRight(cfg.UIURL, "/")
	cfg.NomadUIURL = strings.TrimRight(cfg.NomadUIURL, "/")
	u := &UI{cfg: cfg, logger: cfg.Logger, pages: map[string]*lazyPage{}, assets: map[string]string{}}
	if err := fs.WalkDir(staticFS, "static", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		raw, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(raw)
		u.assets[strings.TrimPrefix(p, "static/")] = hex.EncodeToString(sum[:8])
		return nil
	}); err != nil {
		return nil, fmt.Errorf("web: hash assets: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		if _, err := u.parsePage(n); err != nil {
			return nil, err
		}
		u.pages[name] = &lazyPage{file: n}
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	u.static = http.StripPrefix("/ui/static/", http.FileServerFS(sub))
	return u, nil
}

// parsePage parses a page's template file over the layout and the
// partials (templates/partials), which every page shares.
func (u *UI) parsePage(file string) (*template.Template, error) {
	t, err := template.New("layout.html").Funcs(u.funcs()).ParseFS(templateFS, "templates/layout.html", "templates/partials/*.html", file)
	if err != nil {
		return nil, fmt.Errorf("web: parse %s: %w", file, err)
	}
	return t, nil
}

// lazyPage is one page's template file, parsed once on first use.
type lazyPage struct {
	file string
	once sync.Once
	t    *template.Template
	err  error
}

// page returns a page's templates, parsed on its first use: the first
// renders of one page wait for one parse, those of others do not.
func (u *UI) page(name string) (*template.Template, error) {
	p := u.pages[name]
	if p == nil {
		return nil, fmt.Errorf("no page %q", name)
	}
	p.once.Do(func() { p.t, p.err = u.parsePage(p.file) })
	return p.t, p.err
}

// SetHeaders sets the security headers of every dashboard answer.
func SetHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

// SessionToken returns the token secret of the request's session cookie,
// or "".
func SessionToken(r *http.Request) string {
	c, err := r.Cookie(cookieToken)
	if err != nil || len(c.Value) > structs.MaxSecretLen {
		return ""
	}
	return c.Value
}

const (
	// randomTokenBytes is the entropy of a CSRF token, OIDC nonce or PKCE
	// verifier: 256 bits, which no one guesses.
	randomTokenBytes = 32
	// randomTokenLen is the length of randomTokenBytes in unpadded base64.
	randomTokenLen = 43
	// maxCookie bounds a cookie read back: browsers keep at most 4 KiB per
	// cookie, so a longer one was not set by this dashboard.
	maxCookie = 4096
	// maxAuthMethodName bounds an auth method's name, as the API does.
	maxAuthMethodName = 128
	// oidcCookieMaxAge (seconds) keeps a login's state as long as the server
	// keeps the OIDC request it started (10 minutes).
	oidcCookieMaxAge = 600
	// defaultMaxStreams is Config.MaxStreams when unset: each stream holds
	// a connection and a goroutine, and a few browsers need far fewer.
	defaultMaxStreams = 64
)

func randomToken() string {
	b := make([]byte, randomTokenBytes)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (u *UI) cookie(name, value string, maxAge int, sameSite http.SameSite) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/ui/", MaxAge: maxAge, HttpOnly: true,
		Secure: u.cfg.TLS, SameSite: sameSite}
}

// csrfToken returns the session's CSRF token, setting its cookie when the
// browser has none.
func (u *UI) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(cookieCSRF); err == nil && len(c.Value) == randomTokenLen {
		return c.Value
	}
	t := randomToken()
	http.SetCookie(w, u.cookie(cookieCSRF, t, 0, http.SameSiteStrictMode))
	// A page rendered in this answer reads it back.
	r.AddCookie(&http.Cookie{Name: cookieCSRF, Value: t})
	return t
}

// checkCSRF refuses a POST that comes from another site or lacks the
// session's CSRF token.
func (u *UI) checkCSRF(r *http.Request) error {
	if viewerOf(r).HeaderAuth {
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return ErrCSRF
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		o, err := url.Parse(origin)
		if err != nil || o.Host != r.Host {
			return ErrCSRF
		}
	}
	c, err := r.Cookie(cookieCSRF)
	if err != nil || len(c.Value) != randomTokenLen {
		return ErrCSRF
	}
	if subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue(fieldCSRF))) != 1 {
		return ErrCSRF
	}
	return nil
}

// page is what every page template gets.
type page struct {
	Title  string
	Nav    string
	Viewer *Viewer
	ACLs   bool
	Node   string
	CSRF   string
	Index  uint64
	// Now is the server's clock at render, from which the page's script
	// counts relative times.
	Now   time.Time
	Flash string
	// Error is why the action the browser comes back from was refused;
	// ErrorLink, when set, leads on (to the deployment that superseded
	// the one acted on).
	Error     string
	ErrorLink *link
	// Pending counts the deployments waiting for approval the viewer may
	// see, for the navigation and the title.
	Pending int
	// Others are the other servers' dashboards, which the page offers
	// when this server stops answering.
	Others []link
	// C is the page's view of the Nomad clusters: whether it shows a
	// cluster column, how it addresses a job, where a cluster's Nomad UI
	// is.
	C    *clusterView
	Data any
}

// link is a link a page shows.
type link struct {
	Href, Text string
}

// errorLinker is page data that knows where a refused action's reader
// should go next.
type errorLinker interface {
	errorLink() *link
}

func (u *UI) render(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	t, err := u.page(name)
	if err != nil {
		u.logger.Error("render page", "page", name, "error", err)
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	v := viewerOf(r)
	p := &page{Title: title, Nav: name, Viewer: v, ACLs: u.cfg.ACLs, Node: u.cfg.Node,
		CSRF: u.csrfToken(w, r), Index: u.cfg.Backend.Index(), Now: u.cfg.Now().UTC(), Flash: flash(r.URL.Query().Get("done")), C: u.noClusters(), Data: data}
	if c, ok := data.(clusters); ok && c.clusterInfo() != nil {
		p.C = c.clusterInfo()
	}
	// A live update's fetch leaves the refusal to the page that shows it.
	if r.Header.Get(headerLive) == "" {
		p.Error = u.takeFlash(w, r)
	}
	if l, ok := data.(errorLinker); ok && p.Error != "" {
		p.ErrorLink = l.errorLink()
	}
	if name != "login" && (!u.cfg.ACLs || !v.Anonymous) {
		p.Pending = u.pendingCount(r)
		p.Others = u.otherServers()
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", p); err != nil {
		u.logger.Error("render page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	SetHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// headerLive marks the page fetches of the live updates.
const headerLive = "X-Nops-Live"

// pendingCount counts the deployments waiting for approval, as the viewer
// may list them; 0 when the list cannot be read.
func (u *UI) pendingCount(r *http.Request) int {
	var list []*structs.Deployment
	if err := u.get(r, "/v1/deployments?state="+string(structs.StatePendingApproval), &list); err != nil {
		return 0
	}
	return len(list)
}

// otherServers links the dashboards of this server's Raft peers, by the
// HTTP address each one gossips; a member that claims a peer's identity
// under another name, or that gossip refuses, is not linked.
func (u *UI) otherServers() []link {
	c, err := u.cfg.Backend.Cluster()
	if err != nil {
		return nil
	}
	self := ""
	peers := map[string]bool{}
	for _, p := range c.Peers {
		peers[p.ID] = true
	}
	for _, m := range c.Members {
		if m.Name == c.Node {
			self = m.ID
		}
	}
	var out []link
	for _, m := range c.Members {
		if m.Name == c.Node || m.ID == self || !peers[m.ID] || m.Refused != "" || m.HTTPAddr == "" {
			continue
		}
		out = append(out, link{Href: "//" + m.HTTPAddr + "/ui/", Text: m.Name})
	}
	return out
}

// maxFlash bounds a refusal carried in the flash cookie: an API error is
// one sentence, and a cookie holds at most 4 KiB.
const maxFlash = 1024

// setFlash keeps why an action was refused for the next page the browser
// asks for.
func (u *UI) setFlash(w http.ResponseWriter, msg string) {
	if len(msg) > maxFlash {
		msg = msg[:maxFlash]
	}
	http.SetCookie(w, u.cookie(cookieFlash, base64.RawURLEncoding.EncodeToString([]byte(msg)), flashMaxAge, http.SameSiteStrictMode))
}

// flashMaxAge (seconds) outlives the redirect that follows an action.
const flashMaxAge = 60

// takeFlash returns the refusal kept for this page, and clears it.
func (u *UI) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(cookieFlash)
	if err != nil {
		return ""
	}
	http.SetCookie(w, u.cookie(cookieFlash, "", -1, http.SameSiteStrictMode))
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(raw) > maxFlash {
		return ""
	}
	return strings.ToValidUTF8(string(raw), "")
}

// flash turns a done= code into the message shown after an action.
func flash(done string) string {
	switch done {
	case "approve":
		return "Approved."
	case "reject":
		return "Rejected."
	case "promote":
		return "Promotion requested."
	case "pause":
		return "Paused."
	case "resume":
		return "Resumed."
	case "retry":
		return "Retry requested."
	case "deploy-now":
		return "Deploy now requested: the job is checked at once, and its next deployment may run in a closed window."
	case "deploy-now-window":
		return "The closed window is lifted for the next deployment."
	case "deploy-now-paused":
		return "Deploy now requested, but the job stays paused: resume it to deploy."
	case "window":
		return "Window saved."
	case "window-delete":
		return "Window deleted."
	case "refresh":
		return "Fetch requested."
	}
	return ""
}

// Fail renders an error page for a request the server refused before the
// dashboard ran it: a page that needs a login redirects to the login page.
func (u *UI) Fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if code == http.StatusUnauthorized && r.URL.Path != "/ui/live" {
		// The login form, in place: after it, the browser comes back here.
		next := "/ui/"
		if r.Method == http.MethodGet {
			next = safeNext(r.URL.RequestURI())
		}
		d := &loginData{Next: next, Expired: SessionToken(r) != "", SSO: u.ssoMethods()}
		if !d.Expired {
			d.Error = msg
		}
		u.render(w, r, code, "login", "Log in", d)
		return
	}
	u.render(w, r, code, "error", http.StatusText(code), map[string]any{"Code": code, "Message": msg})
}

// fail renders an error from a handler.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *APIError
	if errors.As(err, &ae) {
		u.Fail(w, r, ae.Code, ae.Msg)
		return
	}
	if errors.Is(err, ErrCSRF) {
		u.Fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	u.logger.Error("dashboard request failed", "path", r.URL.Path, "error", err)
	u.Fail(w, r, http.StatusInternalServerError, err.Error())
}

// get reads an API path as the viewer into out.
func (u *UI) get(r *http.Request, path string, out any) error {
	resp, err := u.cfg.Backend.Do(r.Context(), viewerOf(r), http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return resp.Decode(out)
}

// Static serves the embedded assets. Pages link them with the hash of
// their content in the URL (?v=), so that an upgrade changes the URL: an
// answer to the current version is cached for a year, any other (an old
// page's, or none) must be checked again each time.
func (u *UI) Static(w http.ResponseWriter, r *http.Request) {
	SetHeaders(w.Header())
	if v, ok := u.assets[r.PathValue("file")]; ok && r.URL.Query().Get("v") == v {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	u.static.ServeHTTP(w, r)
}

// asset is the versioned URL of a static file.
func (u *UI) asset(name string) string {
	return "/ui/static/" + name + "?v=" + u.assets[name]
}

// field reads at most n bytes of a form field.
func field(r *http.Request, name string, n int) string {
	v := strings.TrimSpace(r.PostFormValue(name))
	if len(v) > n {
		v = v[:n]
	}
	return v
}
