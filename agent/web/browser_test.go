package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/cap/oidc"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// plantedSecret is the value of a secret env entry of a job; no page may
// show it.
const plantedSecret = "hunter2-planted-secret-value"

// browser drives one headless Chromium.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	// pages keeps the HTML of every page visited, for the secret check.
	pages map[string]string
}

// newBrowser starts Chromium with the flags a closed network needs and a
// fresh profile.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	bin := testutil.ChromiumBinary(t)
	profile, err := os.MkdirTemp("", "nops-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin), chromedp.UserDataDir(profile),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		// The in-test OIDC provider has a self-signed CA.
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.WindowSize(1280, 900),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int]("1+1")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx, shots: testutil.ScreenshotDir(t), pages: map[string]string{}}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v (at %s)", what, err, b.location())
	}
}

func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	return loc
}

// eval runs a script and returns its value.
func eval[T any](b *browser, expr string, opts ...chromedp.EvaluateOption) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
}

// waitJS waits until a script is true; it survives navigations.
func (b *browser) waitJS(what, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := eval[bool](b, expr)
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(150 * time.Millisecond)
	}
	html, _ := eval[string](b, "document.documentElement.outerHTML")
	b.t.Fatalf("browser: timed out waiting for %s (%s; last error %v) at %s\n%.3000s", what, expr, last, b.location(), html)
}

// html returns the page's HTML and keeps it for the secret check.
func (b *browser) html(name string) string {
	b.t.Helper()
	h, err := eval[string](b, "document.documentElement.outerHTML")
	if err != nil {
		b.t.Fatalf("browser: page HTML: %v", err)
	}
	b.pages[name] = h
	return h
}

// open navigates and waits for the page's <main>.
func (b *browser) open(u string) {
	b.t.Helper()
	b.do("open "+u, chromedp.Navigate(u))
	b.waitJS("page "+u, `document.readyState === "complete" && !!document.querySelector("main")`, 20*time.Second)
}

// screenshot saves the page as name.png and checks that it is not blank.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	b.html(name)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		b.t.Fatalf("screenshot %s is not a PNG: %v", name, err)
	}
	colours := map[uint32]bool{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 3 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 3 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[(r>>8)<<16|(g>>8)<<8|bl>>8] = true
		}
	}
	if len(colours) < 8 {
		b.t.Fatalf("screenshot %s looks blank: %d colours", name, len(colours))
	}
	b.t.Logf("screenshot %s: %dx%d, %d colours", path, bounds.Dx(), bounds.Dy(), len(colours))
}

// sweepWidths are the widths of the screenshots of every page: a desktop
// and a phone.
var sweepWidths = []int64{1400, 390}

// sweep opens each page at each width of sweepWidths, checks its layout
// and saves its screenshot as name-width.png, then gives the window its
// size back.
func (b *browser) sweep(base string, pages map[string]string) {
	b.t.Helper()
	names := make([]string, 0, len(pages))
	for n := range pages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, w := range sweepWidths {
		b.do(fmt.Sprintf("%d pixels wide", w), chromedp.EmulateViewport(w, 900))
		for _, n := range names {
			b.open(base + pages[n])
			name := fmt.Sprintf("%s-%d", n, w)
			b.checkLayout(name)
			b.screenshot(name)
		}
	}
	b.do("window size", chromedp.EmulateViewport(1280, 900))
}

// screenshots checks the layout of the page shown (one a URL cannot reopen,
// such as the answer to a form) and saves its screenshot at each width of
// sweepWidths, then gives the window its size back.
func (b *browser) screenshots(name string) {
	b.t.Helper()
	for _, w := range sweepWidths {
		b.do(fmt.Sprintf("%d pixels wide", w), chromedp.EmulateViewport(w, 900))
		n := fmt.Sprintf("%s-%d", name, w)
		b.checkLayout(n)
		b.screenshot(n)
	}
	b.do("window size", chromedp.EmulateViewport(1280, 900))
}

// typeInto sets a field's value as typing would, in the current document
// (a DevTools node query can hold on to the document before a navigation).
func (b *browser) typeInto(sel, text string) {
	b.t.Helper()
	b.waitJS(sel, `document.readyState === "complete" && !!document.querySelector(`+jsString(sel)+`)`, 20*time.Second)
	if _, err := eval[bool](b, `(() => { const e = document.querySelector(`+jsString(sel)+`); e.focus(); e.value = `+jsString(text)+
		`; e.dispatchEvent(new Event("input", {bubbles: true})); return true; })()`); err != nil {
		b.t.Fatalf("browser: type into %s: %v", sel, err)
	}
}

// click clicks an element of the current document.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.waitJS(sel, `document.readyState === "complete" && !!document.querySelector(`+jsString(sel)+`)`, 20*time.Second)
	if _, err := eval[bool](b, `(() => { document.querySelector(`+jsString(sel)+`).click(); return true; })()`); err != nil {
		b.t.Fatalf("browser: click %s: %v", sel, err)
	}
}

func jsString(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// cookie returns a cookie of the browser (HttpOnly ones included).
func (b *browser) cookie(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	cookies, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) ([]*network.Cookie, error) {
		res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
		return res.Cookies, err
	})
	if err != nil {
		b.t.Fatalf("cookies: %v", err)
	}
	for _, c := range cookies {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// media emulates prefers-color-scheme ("" for none).
func (b *browser) media(scheme string) {
	b.t.Helper()
	var features []*emulation.MediaFeature
	if scheme != "" {
		features = []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (cdp.Empty, error) {
		return chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: features})
	}); err != nil {
		b.t.Fatalf("emulate %q: %v", scheme, err)
	}
}

type apiToken struct {
	SecretID string `json:"secret_id"`
	Name     string `json:"name"`
}

func mustDo(t *testing.T, s *nopstest.Server, token, method, path string, body any, out any) {
	t.Helper()
	mustDoURL(t, s.URL, token, method, path, body, out)
}

func mustDoURL(t testing.TB, base, token, method, path string, body any, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Nops-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
}

func waitDeployment(t *testing.T, s *nopstest.Server, job string, state structs.DeploymentState) *structs.Deployment {
	t.Helper()
	var dep *structs.Deployment
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		deps, _, err := s.State().Deployments(fsm.DeploymentFilter{JobID: job, State: state})
		if err != nil || len(deps) == 0 {
			return false, fmt.Errorf("no %s deployment of %s yet (%v)", state, job, err)
		}
		dep = deps[0]
		return true, nil
	})
	return dep
}

// TestDashboard_Browser drives the dashboard of a 3-server cluster with
// ACLs on and a real Nomad from a real Chromium, through a follower: token
// login; a deployment waiting for approval approved from the page and
// followed to completion live, without a reload; a reject with a comment;
// pause and resume of a job; a window form with errors next to the fields,
// then a valid one; a planted secret shown nowhere; a reader sees no
// Approve button and a forged POST of theirs is refused; cross-site posts
// are refused; logout; SSO login through an OIDC provider; the window
// deleted; the dark theme and 200 % zoom. A screenshot of every page is
// saved and checked not to be blank.
func TestDashboard_Browser(t *testing.T) {
	b := newBrowser(t)
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepo(t)
	managed := []testutil.JobOption{testutil.WithMeta("nops_managed", "true")}
	approval := append(managed[:1:1], testutil.WithMeta("nops_policy", "approval"))
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", append(approval, testutil.WithEnv("DB_PASSWORD", plantedSecret))...))
	repo.WriteFile("jobs/api.nomad.hcl", testutil.ServiceJobHCL("api", approval...))
	repo.WriteFile("jobs/gate.nomad.hcl", testutil.ServiceJobHCL("gate", approval...))
	repo.WriteFile("jobs/cache.nomad.hcl", testutil.ServiceJobHCL("cache", append(managed[:1:1], testutil.WithMeta("nops_policy", "auto"))...))
	repo.Commit("jobs")

	c := nopstest.StartCluster(t, 3, nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("ops", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = true; cfg.NomadUIURL = nomad.Addr }))
	leader := c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]

	var boot apiToken
	mustDo(t, follower, "", "POST", "/v1/acl/bootstrap", nil, &boot)
	mgmt := boot.SecretID
	mustDo(t, follower, mgmt, "PUT", "/v1/acl/policy/operator-ui", map[string]string{"rules": `
namespace "*" { capabilities = ["read", "approve", "pause", "deploy"] }
cluster { capabilities = ["read", "windows", "pause", "deploy", "operator"] }`}, nil)
	mustDo(t, follower, mgmt, "PUT", "/v1/acl/policy/reader", map[string]string{"rules": `
namespace "*" { capabilities = ["read"] }
cluster { capabilities = ["read"] }`}, nil)
	var ada, reader apiToken
	mustDo(t, follower, mgmt, "POST", "/v1/acl/token", map[string]any{"name": "ada", "policies": []string{"operator-ui"}}, &ada)
	mustDo(t, follower, mgmt, "POST", "/v1/acl/token", map[string]any{"name": "reader", "policies": []string{"reader"}}, &reader)

	web := waitDeployment(t, follower, "web", structs.StatePendingApproval)
	api := waitDeployment(t, follower, "api", structs.StatePendingApproval)
	gate := waitDeployment(t, follower, "gate", structs.StatePendingApproval)
	waitDeployment(t, follower, "cache", structs.StateCompleted)
	base := follower.URL

	// Without a login the dashboard shows the login form, in place.
	b.sweep(base, map[string]string{"login": "/ui/login"})
	b.open(base + "/ui/")
	b.waitJS("login form", `!!document.querySelector("#token")`, 10*time.Second)
	b.typeInto("#token", "not-a-token")
	b.click("#login-form button[type=submit]")
	b.waitJS("login refusal", `!!document.querySelector("#token-error")`, 10*time.Second)
	b.typeInto("#token", ada.SecretID)
	b.click("#login-form button[type=submit]")
	b.waitJS("logged in", `!!document.querySelector("#user") && document.querySelector("#user").textContent.includes("ada")`, 20*time.Second)
	b.open(base + "/ui/")
	if h := b.html("overview"); !strings.Contains(h, web.ID[:8]) {
		t.Errorf("overview lists no pending deployment of web")
	} else if i := strings.Index(h, `id="ov-servers"`); i < 0 || strings.Count(h[i:], "badge ok\">healthy") < 3 {
		t.Errorf("overview does not show the three servers healthy with their last contact (operator viewer)")
	}

	// The deployment page: the redacted diff, never the secret.
	b.open(base + "/ui/deployment/" + web.ID)
	b.waitJS("approve button", `!!document.querySelector("#approve")`, 10*time.Second)
	if h := b.html("deployment"); !strings.Contains(h, "DB_PASSWORD") && !strings.Contains(h, "id=\"diff\"") {
		t.Errorf("deployment page shows no diff")
	}
	// The commit, and the file diff coloured by line: the whole file is
	// added by the first deployment, its secret redacted.
	b.waitJS("commit and file diff", `document.querySelector("#dep-commit .commit-subject").textContent === "jobs" &&
		document.querySelectorAll("#dep-filediff .fd-added").length > 10 &&
		getComputedStyle(document.querySelector("#dep-filediff .fd-added")).backgroundColor !== "rgba(0, 0, 0, 0)" &&
		[...document.querySelectorAll("#dep-filediff .fd-added")].some(e => e.textContent.includes('"DB_PASSWORD" = "(redacted)"'))`, 10*time.Second)

	// Approve through the follower, then watch it complete live: the
	// marker set on the page survives, so the page was never reloaded.
	b.typeInto("#approve-comment", "ship it")
	b.click("#approve")
	b.waitJS("approved", `location.search.includes("done=approve") && !!document.querySelector("#dep-state-badge")`, 30*time.Second)
	if _, err := eval[string](b, `document.body.dataset.marker = "kept"`); err != nil {
		t.Fatal(err)
	}
	b.waitJS("live completion", `document.querySelector("#dep-state-badge").dataset.state === "completed"`, 120*time.Second)
	// The health of the Nomad deployment the register created, read from
	// Nomad by the follower, appears live: the panel was absent when the
	// page was rendered.
	b.waitJS("nomad health, live", `!!document.querySelector("#nomad-status") && document.querySelector("#nomad-status").textContent === "successful"`, 20*time.Second)
	if m, err := eval[string](b, `document.body.dataset.marker || ""`); err != nil || m != "kept" {
		t.Fatalf("the page was reloaded while the deployment completed (marker %q, %v)", m, err)
	}
	d, _ := leader.State().Deployment(web.ID)
	if d == nil || len(d.Decisions) == 0 || d.Decisions[0].Actor != "ada" || d.Decisions[0].Comment != "ship it" {
		t.Fatalf("the approval recorded %+v; want ada's, with the comment", d)
	}

	// Reject with a reason, confirmed on a page of its own.
	b.open(base + "/ui/deployment/" + api.ID)
	b.typeInto("#reject-reason", "not on a Friday")
	b.click("#reject")
	b.waitJS("reject confirmation", `!!document.querySelector("#confirm-reject") && document.querySelector("#confirm-reason").value === "not on a Friday"`, 20*time.Second)
	if d, _ := leader.State().Deployment(api.ID); d == nil || d.State != structs.StatePendingApproval {
		t.Fatalf("the deployment was rejected before the confirmation: %+v", d)
	}
	b.screenshots("reject-confirm")
	b.click("#confirm-reject")
	b.waitJS("rejected", `document.querySelector("#dep-state-badge") && document.querySelector("#dep-state-badge").dataset.state === "rejected"`, 30*time.Second)
	if h := b.html("rejected"); !strings.Contains(h, "not on a Friday") {
		t.Errorf("the rejected deployment does not show its reason")
	}

	// Pause and resume a job.
	b.open(base + "/ui/job/default/cache")
	b.typeInto("#pause-reason", "maintenance")
	b.click("#pause")
	b.waitJS("paused", `location.search.includes("done=pause") && document.querySelector("#job-pause").textContent.includes("paused by ada")`, 30*time.Second)
	if p, _ := leader.State().Paused("", "default", "cache"); p == nil || p.Actor != "ada" || p.Reason != "maintenance" {
		t.Fatalf("pause on the leader: %+v", p)
	}
	b.screenshot("job-paused")
	b.click("#resume")
	b.waitJS("resumed", `location.search.includes("done=resume") && document.querySelector("#job-pause").textContent.includes("not paused")`, 30*time.Second)

	// A window: errors next to the fields, then a valid one.
	b.open(base + "/ui/windows")
	b.typeInto("#w-name", "nightly")
	b.typeInto("#w-schedule", "61 * * *")
	b.typeInto("#w-duration", "forever")
	b.click("#window-submit")
	b.waitJS("field errors", `!!document.querySelector("#w-schedule-error") && !!document.querySelector("#w-duration-error")`, 20*time.Second)
	if v, _ := eval[string](b, `document.querySelector("#w-name").value`); v != "nightly" {
		t.Errorf("the form lost its name field: %q", v)
	}
	if n, _ := eval[int](b, `document.querySelectorAll("#w-name-error").length`); n != 0 {
		t.Errorf("the valid name shows an error")
	}
	b.screenshot("windows-errors")
	if w, _ := leader.State().Window("nightly"); w != nil {
		t.Fatalf("an invalid window was stored: %+v", w)
	}
	// Closed throughout the test: an open deny window would hold the jobs,
	// and supersede the gate deployment that waits for approval below.
	b.typeInto("#w-schedule", testutil.ClosedSchedule())
	b.typeInto("#w-duration", "8h")
	b.click("#window-submit")
	b.waitJS("window row", `!!document.querySelector("#window-nightly")`, 20*time.Second)
	if w, _ := leader.State().Window("nightly"); w == nil || w.Duration != "8h" {
		t.Fatalf("window on the leader: %+v", w)
	}

	// Every page, on a desktop and on a phone: none scrolls sideways as a
	// whole, no table cell breaks a word, and each screenshot decodes.
	b.sweep(base, map[string]string{
		"overview": "/ui/", "jobs": "/ui/jobs", "job": "/ui/job/default/web", "job-drift": "/ui/job/default/gate",
		"deployment-completed": "/ui/deployment/" + web.ID, "deployment-pending": "/ui/deployment/" + gate.ID,
		"deployment-rejected": "/ui/deployment/" + api.ID, "approvals": "/ui/approvals", "pauses": "/ui/pauses",
		"windows": "/ui/windows", "orphans": "/ui/orphans", "events": "/ui/events", "cluster": "/ui/cluster",
		"preview": "/ui/preview", "not-found": "/ui/no/such/page",
	})
	b.open(base + "/ui/cluster")
	if n, _ := eval[int](b, `document.querySelectorAll("#cluster-peers tbody tr").length`); n != 3 {
		t.Errorf("the cluster page lists %d raft peers, want 3", n)
	}

	// Cross-site posts are refused: from another site (no cookie is sent)
	// and from another origin of the same site (a foreign Origin and no
	// valid CSRF token).
	attack := func(host string) {
		t.Helper()
		target := base + "/ui/deployment/" + gate.ID + "/approve"
		evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s"><input name="csrf" value="guess"><input name="comment" value="pwned"></form><script>document.getElementById("f").submit()</script>`, target)
		}))
		evil.Start()
		defer evil.Close()
		u, _ := url.Parse(evil.URL)
		b.do("open the attacker's page", chromedp.Navigate("http://"+host+":"+u.Port()+"/"))
		b.waitJS("the cross-site post's answer", `location.href.startsWith("`+base+`") && document.readyState === "complete"`, 20*time.Second)
		b.html("csrf-" + host)
		if d, _ := leader.State().Deployment(gate.ID); d == nil || d.State != structs.StatePendingApproval {
			t.Fatalf("a cross-site post from %s changed the deployment: %+v", host, d)
		}
	}
	attack("localhost")
	attack("127.0.0.1")
	// A post with the session but without the CSRF token is refused too.
	jar := &http.Cookie{Name: "nops_token", Value: ada.SecretID}
	req, _ := http.NewRequest("POST", base+"/ui/deployment/"+gate.ID+"/approve", strings.NewReader("comment=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(jar)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a post without a CSRF token: %v %v; want 400", resp, err)
	}

	// Log out; a reader sees no Approve button, and a post forged from
	// the page with a valid CSRF token is refused.
	b.open(base + "/ui/")
	b.click(".who form button")
	b.waitJS("logged out", `!!document.querySelector("#token")`, 20*time.Second)
	b.typeInto("#token", reader.SecretID)
	b.click("#login-form button[type=submit]")
	b.waitJS("reader logged in", `!!document.querySelector("#user") && document.querySelector("#user").textContent.includes("reader")`, 20*time.Second)
	b.open(base + "/ui/deployment/" + gate.ID)
	if n, _ := eval[int](b, `document.querySelectorAll("#approve, #reject, form[action$='/approve']").length`); n != 0 {
		t.Fatalf("a reader sees %d approve controls", n)
	}
	b.screenshot("deployment-reader")
	code, err := eval[int](b, `(async () => {
		const csrf = document.querySelector("input[name=csrf]").value;
		const r = await fetch("/ui/deployment/`+gate.ID+`/approve", {method: "POST", credentials: "same-origin",
			headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "csrf=" + encodeURIComponent(csrf) + "&comment=forged"});
		return r.status; })()`, chromedp.EvalAwaitPromise)
	if err != nil || code != http.StatusForbidden {
		t.Fatalf("a reader's forged approve answered %d (%v); want 403", code, err)
	}
	if d, _ := leader.State().Deployment(gate.ID); d == nil || d.State != structs.StatePendingApproval {
		t.Fatalf("a reader's forged approve changed the deployment: %+v", d)
	}

	// SSO: log out, then log in through the OIDC provider. The login page
	// offers SSO only once an auth method exists.
	b.click(".who form button")
	b.waitJS("logged out", `!!document.querySelector("#token")`, 20*time.Second)
	if n, _ := eval[int](b, `document.querySelectorAll("#sso").length`); n != 0 {
		t.Fatalf("the login page offers SSO without an auth method")
	}
	p := oidc.StartTestProvider(t)
	defer p.Stop()
	redirect := base + "/ui/oidc/callback"
	p.SetAllowedRedirectURIs([]string{redirect})
	p.SetClientCreds("nops", "client-secret")
	mustDo(t, follower, mgmt, "PUT", "/v1/acl/auth-method/corp", map[string]any{
		"type": "oidc", "token_ttl": "1h", "default": true,
		"config": map[string]any{
			"oidc_discovery_url": p.Addr(), "oidc_client_id": "nops", "oidc_client_secret": "client-secret",
			"allowed_redirect_uris": []string{redirect}, "discovery_ca_pem": []string{p.CACert()},
			"bound_audiences": []string{"nops"}, "signing_algs": []string{"ES256"},
			"claim_mappings": map[string]string{"email": "email"}, "list_claim_mappings": map[string]string{"groups": "groups"},
			"user_claim": "email",
		}}, nil)
	mustDo(t, follower, mgmt, "POST", "/v1/acl/binding-rule", map[string]any{
		"auth_method": "corp", "selector": `"ops" in list.groups`, "bind_type": "policy", "bind_name": "operator-ui"}, nil)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		m, err := follower.State().ACL().AuthMethod("corp")
		return m != nil, err
	})
	p.SetExpectedAuthCode("code-" + gate.ID[:8])
	p.SetExpectedSubject("grace@example.com")
	p.SetCustomClaims(map[string]any{"email": "grace@example.com", "groups": []string{"ops"}})
	// The browser keeps the nonce and the PKCE verifier of its login in a
	// cookie, as `nomad login` keeps them in memory; the provider of the
	// test must be told them. The first pass through the provider fails
	// (it does not know the verifier yet) and shows the error; after the
	// test reads the cookie and tells the provider, the same callback
	// succeeds.
	b.open(base + "/ui/login")
	b.click("#sso")
	b.waitJS("first callback", `location.pathname === "/ui/oidc/callback" && !!document.querySelector("#token-error")`, 30*time.Second)
	raw, err := base64.RawURLEncoding.DecodeString(b.cookie("nops_oidc"))
	var st struct {
		Nonce    string `json:"n"`
		Verifier string `json:"v"`
	}
	if err != nil || json.Unmarshal(raw, &st) != nil || st.Verifier == "" {
		t.Fatalf("the login cookie: %v %q", err, raw)
	}
	p.SetExpectedAuthNonce(st.Nonce)
	p.SetPKCEVerifier(&testVerifier{v: st.Verifier})
	b.do("reload the callback", chromedp.Reload())
	b.waitJS("SSO login", `!!document.querySelector("#user") && document.querySelector("#user").textContent.includes("grace@example.com")`, 30*time.Second)
	b.screenshot("overview-sso")
	if b.cookie("nops_oidc") != "" {
		t.Errorf("the login cookie outlives the login")
	}

	// The SSO user deletes the window.
	b.open(base + "/ui/windows")
	b.click("#window-nightly button[type=submit]")
	b.waitJS("window deleted", `location.search.includes("done=window-delete") && !document.querySelector("#window-nightly")`, 20*time.Second)
	if w, _ := leader.State().Window("nightly"); w != nil {
		t.Fatalf("the deleted window is still on the leader: %+v", w)
	}

	// Dark, and at 200 % zoom (a 640-pixel-wide viewport at twice the
	// pixel ratio): the overview fits without sideways scrolling.
	b.open(base + "/ui/")
	b.media("dark")
	if bg, _ := eval[string](b, `getComputedStyle(document.body).backgroundColor`); bg == "rgb(255, 255, 255)" {
		t.Errorf("the dark theme keeps a white background")
	}
	b.screenshot("overview-dark")
	b.media("")
	b.do("zoom 200%", chromedp.EmulateViewport(640, 900, chromedp.EmulateScale(2)))
	b.open(base + "/ui/deployment/" + web.ID)
	if w, _ := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("at 200%% zoom the deployment page scrolls sideways by %d pixels", w)
	}
	b.screenshot("deployment-zoom-200")

	// The planted secret appears in no page.
	for name, h := range b.pages {
		if strings.Contains(h, plantedSecret) {
			t.Errorf("page %s shows the planted secret", name)
		}
		if strings.Contains(h, ada.SecretID) || strings.Contains(h, reader.SecretID) {
			t.Errorf("page %s shows a token secret", name)
		}
	}
	t.Logf("screenshots in %s", b.shots)
}

// testVerifier is a PKCE verifier the provider of the test checks.
type testVerifier struct{ v string }

func (t *testVerifier) Verifier() string             { return t.v }
func (t *testVerifier) Challenge() string            { return "" }
func (t *testVerifier) Method() oidc.ChallengeMethod { return oidc.S256 }
func (t *testVerifier) Copy() oidc.CodeVerifier      { c := *t; return &c }
