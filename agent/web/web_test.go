package web_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
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
