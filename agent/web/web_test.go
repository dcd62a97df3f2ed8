package web_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// client is a browser-like HTTP client: a cookie jar, no redirects
// followed.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: base, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, form url.Values, header map[string]string) (int, http.Header, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%.2000s", page)
	}
	return m[1]
}

func startACL(t *testing.T) (*nopstest.Server, string) {
	t.Helper()
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) { c.ACL.Enabled = true }))
	var boot apiToken
	mustDo(t, s, "", "POST", "/v1/acl/bootstrap", nil, &boot)
	return s, boot.SecretID
}

// TestDashboard_LoginAndHeaders logs in with a token over plain HTTP and
// checks the session cookie's attributes and the security headers.
func TestDashboard_LoginAndHeaders(t *testing.T) {
	s, mgmt := startACL(t)
	c := newClient(t, s.URL)

	code, h, page := c.do("GET", "/ui/", nil, nil)
	if code != http.StatusUnauthorized || !strings.Contains(page, `id="token"`) {
		t.Fatalf("GET /ui/ without a login: %d\n%.500s", code, page)
	}
	for k, want := range map[string]string{
		"Content-Security-Policy": "default-src 'self'", "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
	} {
		if !strings.Contains(h.Get(k), want) {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), want)
		}
	}
	if strings.Contains(h.Get("Content-Security-Policy"), "unsafe-inline") {
		t.Errorf("the CSP allows inline code: %s", h.Get("Content-Security-Policy"))
	}
	csrf := csrfOf(t, page)

	code, _, page = c.do("POST", "/ui/login", url.Values{"csrf": {csrf}, "token": {"wrong"}, "next": {"/ui/"}}, nil)
	if code != http.StatusUnauthorized || !strings.Contains(page, "token-error") {
		t.Fatalf("login with a wrong token: %d\n%.500s", code, page)
	}
	code, h, page = c.do("POST", "/ui/login", url.Values{"csrf": {csrf}, "token": {mgmt}, "next": {"https://evil.example/"}}, nil)
	if code != http.StatusOK || h.Get("Refresh") != "0; url=/ui/" {
		t.Fatalf("login: %d %v\n%.500s", code, h, page)
	}
	var session *http.Cookie
	for _, ck := range (&http.Response{Header: h}).Cookies() {
		if ck.Name == "nops_token" {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/ui/" {
		t.Fatalf("session cookie %+v; want HttpOnly, SameSite=Strict, Path=/ui/", session)
	}
	code, _, page = c.do("GET", "/ui/", nil, nil)
	if code != http.StatusOK || !strings.Contains(page, `id="user"`) {
		t.Fatalf("GET /ui/ after login: %d\n%.800s", code, page)
	}
	if strings.Contains(page, mgmt) {
		t.Fatal("the page shows the token secret")
	}
}

// TestDashboard_Attacks keeps the refused attempts as regression tests:
// no token, a forged session, a missing or wrong CSRF token, a foreign
// Origin, an oversize body, an oversize comment, a forged OIDC callback,
// and an open redirect after login. None changes the state.
func TestDashboard_Attacks(t *testing.T) {
	s, mgmt := startACL(t)
	before := s.State().LatestIndex()

	anon := newClient(t, s.URL)
	for _, p := range []string{"/ui/", "/ui/jobs", "/ui/approvals", "/ui/pauses", "/ui/windows", "/ui/orphans", "/ui/events", "/ui/cluster", "/ui/job/default/web", "/ui/deployment/x"} {
		if code, _, page := anon.do("GET", p, nil, nil); code != http.StatusUnauthorized || !strings.Contains(page, `id="login-form"`) {
			t.Errorf("GET %s without a login: %d; want 401 with the login form", p, code)
		}
	}
	if code, _, _ := anon.do("GET", "/ui/live", nil, map[string]string{"Accept": "text/event-stream"}); code != http.StatusUnauthorized {
		t.Errorf("live stream without a login: %d; want 401", code)
	}
	for _, p := range []string{"/ui/pause", "/ui/windows", "/ui/deployment/x/approve", "/ui/job/default/web/pause"} {
		if code, _, _ := anon.do("POST", p, url.Values{"reason": {"x"}}, nil); code != http.StatusUnauthorized {
			t.Errorf("POST %s without a login: %d; want 401", p, code)
		}
	}
	forged := newClient(t, s.URL)
	u, _ := url.Parse(s.URL + "/ui/")
	forged.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "nops_token", Value: "00000000-0000-0000-0000-000000000000"}, {Name: "nops_csrf", Value: strings.Repeat("a", 43)}})
	if code, _, _ := forged.do("POST", "/ui/pause", url.Values{"csrf": {strings.Repeat("a", 43)}, "reason": {"x"}}, nil); code != http.StatusUnauthorized {
		t.Errorf("POST with a forged session: %d; want 401", code)
	}

	// A logged-in browser.
	c := newClient(t, s.URL)
	_, _, page := c.do("GET", "/ui/login", nil, nil)
	csrf := csrfOf(t, page)
	if code, _, _ := c.do("POST", "/ui/login", url.Values{"token": {mgmt}}, nil); code != http.StatusBadRequest {
		t.Errorf("login without a CSRF token: %d; want 400", code)
	}
	if code, h, _ := c.do("POST", "/ui/login", url.Values{"csrf": {csrf}, "token": {mgmt}, "next": {"//evil.example/x"}}, nil); code != http.StatusOK || h.Get("Refresh") != "0; url=/ui/" {
		t.Fatalf("login: %d, Refresh %q; want a refresh to /ui/", code, h.Get("Refresh"))
	}
	_, _, page = c.do("GET", "/ui/pauses", nil, nil)
	csrf = csrfOf(t, page)
	// The dashboard refuses a bad CSRF token or a cross-site fetch with
	// 400; a foreign Origin is refused before, by the server's request
	// guard, with 403.
	for name, tc := range map[string]struct {
		form   url.Values
		header map[string]string
		want   int
	}{
		"no CSRF token":    {url.Values{"reason": {"x"}}, nil, http.StatusBadRequest},
		"wrong CSRF token": {url.Values{"csrf": {strings.Repeat("b", 43)}, "reason": {"x"}}, nil, http.StatusBadRequest},
		"foreign Origin":   {url.Values{"csrf": {csrf}, "reason": {"x"}}, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		"cross-site fetch": {url.Values{"csrf": {csrf}, "reason": {"x"}}, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusBadRequest},
	} {
		if code, _, _ := c.do("POST", "/ui/pause", tc.form, tc.header); code != tc.want {
			t.Errorf("pause with %s: %d; want %d", name, code, tc.want)
		}
	}
	if code, _, _ := c.do("POST", "/ui/pause", url.Values{"csrf": {csrf}, "reason": {strings.Repeat("x", 5000)}}, nil); code != http.StatusBadRequest {
		t.Errorf("pause with a 5000-byte reason: %d; want 400", code)
	}
	if code, _, _ := c.do("POST", "/ui/pause", url.Values{"csrf": {csrf}, "reason": {strings.Repeat("x", 2<<20)}}, nil); code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge {
		t.Errorf("pause with a 2 MiB body: %d; want 400 or 413", code)
	}
	// The reject form, the confirmation page it answers and the confirmed
	// reject are refused without this browser's CSRF token.
	for i, form := range []url.Values{
		{"reason": {"x"}},
		{"reason": {"x"}, "confirm": {"yes"}},
		{"csrf": {strings.Repeat("b", 43)}, "reason": {"x"}, "confirm": {"yes"}},
	} {
		if code, _, page := c.do("POST", "/ui/deployment/x/reject", form, nil); code != http.StatusBadRequest || strings.Contains(page, `name="confirm"`) {
			t.Errorf("reject %d without the CSRF token: %d; want 400 and no confirmation form", i, code)
		}
	}
	// Garbage and oversize filters answer a page with the problem named,
	// never a server error.
	for _, p := range []string{"/ui/events?since=%00&kind=" + strings.Repeat("k", 10000) + "&job=" + strings.Repeat("%ff", 2000),
		"/ui/events?cluster=" + strings.Repeat("%00", 3000), "/ui/events?cluster=..%2F..%2Fx&cluster=eu",
		"/ui/jobs?q=" + strings.Repeat("%ff", 3000) + "&sync=bogus&page=-1"} {
		if code, _, _ := c.do("GET", p, nil, nil); code >= 500 {
			t.Errorf("GET %.60s...: %d", p, code)
		}
	}
	if code, _, _ := c.do("GET", "/ui/oidc/callback?state=forged&code=x", nil, nil); code != http.StatusBadRequest {
		t.Errorf("a forged OIDC callback: %d; want 400", code)
	}
	if p, _ := s.State().Pauses(); len(p) != 0 {
		t.Fatalf("a refused request paused: %+v", p)
	}
	if after := s.State().LatestIndex(); after != before {
		t.Fatalf("refused requests changed the state: index %d → %d", before, after)
	}

	// A pause of every job of a cluster that does not exist, or whose name
	// is huge, is refused by the API and shown on the pauses page.
	for _, cluster := range []string{"mars", strings.Repeat("c", 5000), "\x00"} {
		code, h, _ := c.do("POST", "/ui/pause", url.Values{"csrf": {csrf}, "reason": {"x"}, "cluster": {cluster}}, nil)
		if code != http.StatusSeeOther || h.Get("Location") != "/ui/pauses" {
			t.Errorf("pause of cluster %.20q: %d %q; want the refusal shown on the pauses page", cluster, code, h.Get("Location"))
		}
	}
	if p, _ := s.State().Pauses(); len(p) != 0 {
		t.Fatalf("a pause of a cluster that does not exist paused: %+v", p)
	}

	// The same browser, with its CSRF token, may act.
	if code, h, _ := c.do("POST", "/ui/pause", url.Values{"csrf": {csrf}, "reason": {"freeze"}}, nil); code != http.StatusSeeOther || h.Get("Location") != "/ui/pauses?done=pause" {
		t.Fatalf("pause: %d %q; want a redirect to the pauses page", code, h.Get("Location"))
	}
	if p, _ := s.State().Pauses(); len(p) != 1 || p[0].Reason != "freeze" || p[0].Actor == "" {
		t.Fatalf("pauses after the pause: %+v", p)
	}
}

// TestDashboard_NoACL checks the dashboard of a server without ACLs: no
// login, a notice that says so, and still no cross-site post.
func TestDashboard_NoACL(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	c := newClient(t, s.URL)
	code, _, page := c.do("GET", "/ui/", nil, nil)
	if code != http.StatusOK || !strings.Contains(page, `id="acl-off"`) {
		t.Fatalf("overview without ACLs: %d\n%.500s", code, page)
	}
	if code, h, _ := c.do("GET", "/", nil, nil); code != http.StatusFound || h.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d %q; want a redirect to /ui/", code, h.Get("Location"))
	}
	_, _, page = c.do("GET", "/ui/pauses", nil, nil)
	csrf := csrfOf(t, page)
	if code, _, _ := c.do("POST", "/ui/pause", url.Values{"reason": {"x"}}, nil); code != http.StatusBadRequest {
		t.Errorf("a post without a CSRF token: %d; want 400", code)
	}
	if code, _, _ := c.do("POST", "/ui/pause", url.Values{"csrf": {csrf}, "reason": {"freeze"}}, nil); code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	if p, _ := s.State().Pauses(); len(p) != 1 || p[0].Actor != "dashboard" {
		t.Fatalf("pauses: %+v; want one by the dashboard", p)
	}
	// The static assets are served with the same headers.
	code, h, body := c.do("GET", "/ui/static/app.js", nil, nil)
	if code != http.StatusOK || !strings.Contains(body, "EventSource") || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("app.js: %d %v", code, h)
	}
}

// TestDashboard_LiveStreamsAreBounded opens more live streams than a
// server allows: the extra one is refused, and a closed stream frees its
// place.
func TestDashboard_LiveStreamsAreBounded(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	const max = 64
	var bodies []io.ReadCloser
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	open := func() int {
		req, _ := http.NewRequest("GET", s.URL+"/ui/live", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := (&http.Client{}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			buf := make([]byte, 16)
			_, _ = resp.Body.Read(buf) // the stream has started
			bodies = append(bodies, resp.Body)
		} else {
			resp.Body.Close()
		}
		return resp.StatusCode
	}
	for i := range max {
		if code := open(); code != http.StatusOK {
			t.Fatalf("stream %d: %d", i, code)
		}
	}
	if code := open(); code != http.StatusServiceUnavailable {
		t.Fatalf("stream %d: %d; want 503", max+1, code)
	}
	bodies[0].Close()
	bodies = bodies[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		code := open()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream did not free its place: %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDashboard_ClusterShowsRefusedMembers: a member that claims the
// server's node ID under another name is listed on the Cluster page with
// the reason every membership decision ignores it; the server itself is
// not refused.
func TestDashboard_ClusterShowsRefusedMembers(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	nopstest.FakeMember(t, s, "impostor", nopstest.MemberTags(s.NodeID(), s.RPCAddr(), "global"))
	c := newClient(t, s.URL)
	code, _, page := c.do("GET", "/ui/cluster", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("cluster page: %d", code)
	}
	row := regexp.MustCompile(`<tr class="refused"><td>impostor</td>.*?</tr>`).FindString(page)
	if row == "" || !strings.Contains(row, "claims the node ID "+s.NodeID()) {
		t.Fatalf("the impostor is not shown as refused, with its reason:\n%.3000s", page)
	}
	if strings.Contains(page, `<tr class="refused"><td>`+s.Config().NodeName+`</td>`) {
		t.Fatal("the server itself is shown as refused")
	}
}

// TestDashboard_PagesAndForms checks, without a browser, what a page
// answers without script: an unknown address is an HTML 404 page with the
// layout and a link home; static assets are linked by the hash of their
// content, cached for a year at that version and checked again at any
// other; the login page offers SSO only once an auth method exists; the
// events filter takes a relative since and shows each field's problem in
// the form; Deploy now explains itself by the job's state; the jobs
// search works as a GET.
func TestDashboard_PagesAndForms(t *testing.T) {
	t.Parallel()
	s := startManaged(t)
	setStatus(t, s, "web", structs.SyncInSync)
	setStatus(t, s, "api", structs.SyncInSync)
	c := newClient(t, s.URL)

	code, h, page := c.do("GET", "/ui/no/such/page", nil, nil)
	if code != http.StatusNotFound || !strings.Contains(h.Get("Content-Type"), "text/html") ||
		!strings.Contains(page, `id="home"`) || !strings.Contains(page, `<nav aria-label="Main">`) {
		t.Errorf("an unknown /ui/ address: %d %s\n%.600s", code, h.Get("Content-Type"), page)
	}

	// Versioned assets.
	_, _, page = c.do("GET", "/ui/", nil, nil)
	m := regexp.MustCompile(`<script src="/ui/static/app\.js\?v=([0-9a-f]{16})">`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the page links no versioned script:\n%.3000s", page)
	}
	_, _, js := c.do("GET", "/ui/static/app.js", nil, nil)
	sum := sha256.Sum256([]byte(js))
	if m[1] != hex.EncodeToString(sum[:8]) {
		t.Errorf("the script's version %s is not the hash of its content", m[1])
	}
	if _, h, _ := c.do("GET", "/ui/static/app.js?v="+m[1], nil, nil); !strings.Contains(h.Get("Cache-Control"), "immutable") {
		t.Errorf("the current version is cached as %q; want a year, immutable", h.Get("Cache-Control"))
	}
	for _, old := range []string{"/ui/static/app.js?v=0123456789abcdef", "/ui/static/app.js"} {
		if _, h, _ := c.do("GET", old, nil, nil); h.Get("Cache-Control") != "no-cache" {
			t.Errorf("%s is cached as %q; want no-cache", old, h.Get("Cache-Control"))
		}
	}

	// Events: a relative since; field errors in the form.
	if code, _, page := c.do("GET", "/ui/events?since=1h&kind=job", nil, nil); code != http.StatusOK || !strings.Contains(page, `<option selected>job</option>`) {
		t.Errorf("events since 1h of kind job: %d\n%.2000s", code, page)
	}
	code, _, page = c.do("GET", "/ui/events?since=yesterday&kind=bogus", nil, nil)
	if code != http.StatusBadRequest || !strings.Contains(page, `id="e-since-error"`) || !strings.Contains(page, `id="e-kind-error"`) ||
		!strings.Contains(page, `id="events-filter"`) {
		t.Errorf("events with a bad since and kind: %d; want the form with both fields' errors\n%.3000s", code, page)
	}

	// Deploy now, on an in-sync job with no window.
	_, _, page = c.do("GET", "/ui/job/default/web", nil, nil)
	hint := regexp.MustCompile(`id="deploy-now-hint">([^<]*)<`).FindStringSubmatch(page)
	if hint == nil || strings.Contains(hint[1], "lifted") || !strings.Contains(hint[1], "in sync") {
		t.Errorf("the Deploy now hint of an in-sync job reads %q", hint)
	}
	code, hdr, _ := c.do("POST", "/ui/job/default/web/deploy-now", url.Values{"csrf": {csrfOf(t, page)}}, nil)
	if code != http.StatusSeeOther {
		t.Fatalf("deploy now: %d", code)
	}
	_, _, page = c.do("GET", hdr.Get("Location"), nil, nil)
	if strings.Contains(page, "closed window is lifted") || !strings.Contains(page, `class="flash"`) {
		t.Errorf("after deploy now on an in-sync job the page says:\n%.3000s", page)
	}

	// A job waiting for a dependency (nops_depends_on) says for which, on
	// its page and in the list.
	waits := "waiting for default/db: deploying"
	apply(t, s, structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: systemMeta(),
		Statuses: []*structs.JobStatus{{Namespace: "default", JobID: "api", Repository: "ops", File: "jobs/api.nomad.hcl",
			Commit: strings.Repeat("ab", 20), Policy: structs.PolicyAuto, Sync: structs.SyncDrift, WaitingFor: waits,
			ObservedAt: time.Now().UTC()}}})
	if _, _, page := c.do("GET", "/ui/job/default/api", nil, nil); !strings.Contains(page, `<dd id="job-waiting"><span class="badge warn">`+waits+`</span>`) {
		t.Errorf("the page of a job waiting for a dependency does not say for which:\n%.3000s", page)
	}
	if _, _, page := c.do("GET", "/ui/jobs", nil, nil); !strings.Contains(page, `<span class="muted">`+waits+`</span>`) {
		t.Errorf("the jobs list does not say what a job waits for:\n%.3000s", page)
	}
	if _, _, page := c.do("GET", "/ui/job/default/web", nil, nil); strings.Contains(page, `id="job-waiting"`) {
		t.Errorf("the page of a job that waits for nothing shows a wait")
	}

	// The jobs search, without script.
	_, _, page = c.do("GET", "/ui/jobs?q=AP", nil, nil)
	if !strings.Contains(page, ">default/api</a>") || strings.Contains(page, ">default/web</a>") || !strings.Contains(page, `value="AP"`) {
		t.Errorf("the jobs search for AP:\n%.3000s", page)
	}

	// SSO only with an auth method.
	acl, mgmt := startACL(t)
	anon := newClient(t, acl.URL)
	if _, _, page := anon.do("GET", "/ui/login", nil, nil); strings.Contains(page, "/ui/login/sso") {
		t.Errorf("the login page offers SSO with no auth method")
	}
	mustDo(t, acl, mgmt, "PUT", "/v1/acl/auth-method/corp", map[string]any{"type": "oidc", "default": true, "display_name": "Corp SSO",
		"config": map[string]any{"oidc_discovery_url": "https://sso.example", "oidc_client_id": "nops", "oidc_client_secret": "s",
			"allowed_redirect_uris": []string{acl.URL + "/ui/oidc/callback"}, "bound_audiences": []string{"nops"}, "user_claim": "sub"}}, nil)
	if _, _, page := anon.do("GET", "/ui/login", nil, nil); !strings.Contains(page, `id="sso"`) || !strings.Contains(page, "Log in with Corp SSO") {
		t.Errorf("the login page does not offer the auth method:\n%.3000s", page)
	}
}
