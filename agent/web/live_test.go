package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// managed stands for the reconcilers of a server whose leader runs no
// loop: a Manager built on the server answers the API's job, repository
// and orphan routes from the state the test writes.
type managed struct{ agent.Reconciler }

// startManaged starts one server without reconciler loops whose API
// answers every route, from the state the test writes.
func startManaged(t *testing.T, opts ...nopstest.Option) *nopstest.Server {
	t.Helper()
	rec := &managed{}
	opts = append(opts, nopstest.WithoutReconcilers(), nopstest.WithReconciler(rec), nopstest.WithBuild(func(s *agent.Server) {
		m, err := agent.NewFleet(s, s.Config(), hclog.NewNullLogger(), nil)
		if err != nil {
			t.Errorf("manager: %v", err)
			return
		}
		rec.Reconciler = m
	}))
	return nopstest.Start(t, "", opts...)
}

// apply writes a request through Raft on s, as the reconcilers would.
func apply(t *testing.T, s *nopstest.Server, typ structs.MessageType, req any) {
	t.Helper()
	if _, err := s.Apply(typ, req); err != nil {
		t.Fatalf("apply %v: %v", typ, err)
	}
}

func systemMeta() structs.WriteMeta {
	return structs.WriteMeta{Time: time.Now().UTC(), Actor: "nops"}
}

// setStatus stores a job's observed status.
func setStatus(t *testing.T, s *nopstest.Server, job string, sync structs.SyncState) {
	t.Helper()
	apply(t, s, structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: systemMeta(),
		Statuses: []*structs.JobStatus{{Namespace: "default", JobID: job, Repository: "ops", File: "jobs/" + job + ".nomad.hcl",
			Commit: strings.Repeat("ab", 20), Policy: structs.PolicyApproval, Sync: sync, ObservedAt: time.Now().UTC()}}})
}

// settle moves a deployment waiting for approval to another end state, as
// detection does when a newer commit supersedes it.
func settle(t *testing.T, s *nopstest.Server, d *structs.Deployment, to structs.DeploymentState) {
	t.Helper()
	apply(t, s, structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: systemMeta(),
		ID: d.ID, From: structs.StatePendingApproval, To: to, Message: "a newer spec in git replaces it"})
}

// timezone makes the browser's zone another.
func (b *browser) timezone(zone string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) (cdp.Empty, error) {
		return chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: zone})
	}); err != nil {
		b.t.Fatalf("emulate time zone %s: %v", zone, err)
	}
}

// TestDashboard_LiveUpdates keeps the live updates true, on one server
// whose state the test writes: a deployment superseded while its approval
// comment is being typed shows its new state and the link to the newer
// one, keeps the text and its focus, and no longer offers Approve; an
// approval that loses the race is refused on the deployment's page with
// that link, not on a bare error page; on the job page the drift panel
// appears and goes away live, and the guard of the pause form being typed
// in leaves the rest of its region live (the Deploy now hint follows the
// job's state); the approvals count follows in the navigation and the
// title; relative times count in the page, with the exact time in the
// viewer's zone on hover; a window in Europe/Paris shows its next change
// in that zone; the jobs search filters as one types.
func TestDashboard_LiveUpdates(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	s := startManaged(t)
	setStatus(t, s, "web", structs.SyncInSync)
	setStatus(t, s, "api", structs.SyncInSync)
	old := s.CreatePending("default", "web")
	b.timezone("America/New_York")

	// Typing a comment while a newer commit supersedes the deployment.
	b.open(s.URL + "/ui/deployment/" + old.ID)
	if _, err := eval[string](b, `document.body.dataset.marker = "kept"`); err != nil {
		t.Fatal(err)
	}
	b.typeInto("#approve-comment", "looks good")
	settle(t, s, old, structs.StateSuperseded)
	next := s.CreatePending("default", "web")
	b.waitJS("superseded, live", `document.querySelector("#dep-state-badge").dataset.state === "superseded" &&
		!!document.querySelector("#superseded-by a[href='/ui/deployment/`+next.ID+`']")`, 20*time.Second)
	if v, _ := eval[string](b, `document.querySelector("#approve-comment").value + "|" + (document.activeElement && document.activeElement.id)`); v != "looks good|approve-comment" {
		t.Errorf("the comment being typed was lost or lost its focus: %q", v)
	}
	if v, _ := eval[bool](b, `document.querySelector("#approve").disabled && document.querySelector("#approve-form").classList.contains("stale")`); !v {
		t.Errorf("a superseded deployment still offers Approve")
	}
	if m, _ := eval[string](b, `document.body.dataset.marker || ""`); m != "kept" {
		t.Fatalf("the page was reloaded")
	}
	b.screenshot("live-superseded-while-typing")
	// A click that beat the live update: the approval is refused, and
	// the deployment's page says why, with the link to the newer one.
	if _, err := eval[bool](b, `(() => { const a = document.querySelector("#approve"); a.disabled = false; a.click(); return true; })()`); err != nil {
		t.Fatal(err)
	}
	b.waitJS("refused on the page", `location.pathname === "/ui/deployment/`+old.ID+`" && !!document.querySelector("#flash-error")`, 20*time.Second)
	if h, _ := eval[string](b, `document.querySelector("#flash-error").textContent + " " + document.querySelector("#flash-link").getAttribute("href")`); !strings.Contains(h, "superseded, not pending approval") ||
		!strings.Contains(h, "/ui/deployment/"+next.ID) {
		t.Errorf("the refusal shows %q; want the reason and a link to %s", h, next.ID)
	}
	if d, _ := s.State().Deployment(old.ID); d == nil || len(d.Decisions) != 0 {
		t.Fatalf("the refused approval was recorded: %+v", d)
	}
	b.screenshot("live-refused")
	// The refusal is shown once.
	b.open(s.URL + "/ui/deployment/" + old.ID)
	if n, _ := eval[int](b, `document.querySelectorAll("#flash-error").length`); n != 0 {
		t.Errorf("the refusal is shown again")
	}

	// The approvals count, in the navigation and the title, live.
	b.open(s.URL + "/ui/approvals")
	b.waitJS("one waits", `document.title.startsWith("(1) ") && document.querySelector("#nav-approvals .count").textContent.startsWith("1")`, 10*time.Second)
	other := s.CreatePending("default", "api")
	b.waitJS("two wait, live", `document.title.startsWith("(2) ") && document.querySelector("#nav-approvals .count").textContent.startsWith("2")`, 20*time.Second)
	// Relative times move with no write, and show the exact time in the
	// viewer's zone on hover.
	first, _ := eval[string](b, `document.querySelector("#approvals time[data-rel]").textContent`)
	b.waitJS("a relative time that counts", `document.querySelector("#approvals time[data-rel]").textContent !== `+jsString(first), 5*time.Second)
	if title, _ := eval[string](b, `document.querySelector("#approvals time[data-rel]").title`); !strings.Contains(title, "EST") && !strings.Contains(title, "EDT") {
		t.Errorf("a relative time's title %q is not the exact time in the viewer's zone (America/New_York)", title)
	}

	// The job page: the drift panel appears and goes away live; the pause
	// form being typed in keeps its text while the rest of its region
	// moves on.
	settle(t, s, other, structs.StateSuperseded)
	b.open(s.URL + "/ui/job/default/api")
	if _, err := eval[string](b, `document.body.dataset.marker = "kept"`); err != nil {
		t.Fatal(err)
	}
	if n, _ := eval[int](b, `document.querySelectorAll("#job-drift:not([hidden])").length`); n != 0 {
		t.Fatalf("a drift panel is shown with no active deployment")
	}
	b.typeInto("#pause-reason", "maintenance window")
	setStatus(t, s, "api", structs.SyncDrift)
	b.waitJS("the sync badge follows the drift", `document.querySelector("#job-sync").textContent === "drift"`, 20*time.Second)
	// The Deploy now hint, in the pause form's region, follows too.
	b.waitJS("the deploy-now hint follows the drift", `document.querySelector("#deploy-now-hint").textContent.includes("differs from git")`, 20*time.Second)
	pending := s.CreatePending("default", "api")
	b.waitJS("the drift panel appears", `!!document.querySelector("#job-drift:not([hidden]) pre.diff")`, 20*time.Second)
	settle(t, s, pending, structs.StateSuperseded)
	// The job drifts still: its panel stays, with what the status says.
	b.waitJS("the drift panel says the status's drift", `!document.querySelector("#job-drift pre.diff") && !!document.querySelector("#job-drift:not([hidden])")`, 20*time.Second)
	setStatus(t, s, "api", structs.SyncInSync)
	b.waitJS("the drift panel goes", `!document.querySelector("#job-drift:not([hidden])")`, 20*time.Second)
	if v, _ := eval[string](b, `document.querySelector("#pause-reason").value + "|" + document.activeElement.id`); v != "maintenance window|pause-reason" {
		t.Errorf("the pause reason being typed was lost: %q", v)
	}
	if m, _ := eval[string](b, `document.body.dataset.marker || ""`); m != "kept" {
		t.Fatalf("the job page was reloaded")
	}

	// A window in Europe/Paris shows its next change in that zone (its
	// schedule's), and the exact time in the viewer's on hover.
	mustDo(t, s, "", "PUT", "/v1/window/paris-nights", map[string]any{"kind": "deny", "schedule": "0 22 * * *", "duration": "1h",
		"timezone": "Europe/Paris"}, nil)
	b.open(s.URL + "/ui/windows")
	cell, _ := eval[string](b, `document.querySelector("#window-paris-nights .next-change").textContent`)
	if !strings.Contains(cell, "Europe/Paris") || (!strings.Contains(cell, " 22:00 ") && !strings.Contains(cell, " 23:00 ")) {
		t.Errorf("the next change of a Europe/Paris window reads %q; want 22:00 or 23:00 in that zone", cell)
	}
	if title, _ := eval[string](b, `document.querySelector("#window-paris-nights .next-change time").title`); !strings.Contains(title, "EST") && !strings.Contains(title, "EDT") {
		t.Errorf("the next change's title %q is not in the viewer's zone", title)
	}

	// The jobs search filters as one types, and as a GET without script.
	b.open(s.URL + "/ui/jobs")
	b.typeInto("#f-q", "ap")
	if v, _ := eval[string](b, `Array.from(document.querySelectorAll("#jobs-table tbody tr")).filter(r => !r.hidden).map(r => r.querySelector("a").textContent).join(",")`); v != "default/api" {
		t.Errorf("the search shows %q; want default/api", v)
	}
	b.open(s.URL + "/ui/jobs?q=WE")
	if v, _ := eval[string](b, `Array.from(document.querySelectorAll("#jobs-table tbody tr")).map(r => r.querySelector("a").textContent).join(",")`); v != "default/web" {
		t.Errorf("?q=WE lists %q; want default/web", v)
	}
}

// TestDashboard_LiveCluster keeps the cluster's changes live on a
// three-server cluster: a killed server is shown unreachable (not "last
// contact 0s, Raft index 0") and healthy again once it is back, without a
// reload; the footer's index is the panel's; a tab on a server that dies
// shows a banner, disables its actions and links the other servers'
// dashboards.
func TestDashboard_LiveCluster(t *testing.T) {
	b := newBrowser(t)
	// A rejoining server is a voter again after 2s rather than 10.
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(),
		nopstest.WithConfig(func(cfg *config.Config) { cfg.Autopilot.ServerStabilizationTime = 2 * time.Second }))
	leader := c.WaitForLeader(30 * time.Second)
	followers := c.Followers()
	dead := c.Index(followers[1])

	b.open(leader.URL + "/ui/")
	b.waitJS("three healthy servers", `document.querySelectorAll("#ov-servers .badge.ok").length === 3`, 30*time.Second)
	if _, err := eval[string](b, `document.body.dataset.marker = "kept"`); err != nil {
		t.Fatal(err)
	}
	c.Kill(dead)
	name := c.Config(dead).NodeName
	// The killed server shows as unreachable, then autopilot removes it:
	// the overview follows without a reload, and never shows it with a
	// last contact of 0s and a Raft index of 0.
	row := `Array.from(document.querySelectorAll("#ov-servers tbody tr")).find(r => r.cells[0].textContent.startsWith(` + jsString(name) + `))`
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := eval[string](b, `(() => { const r = `+row+`; return (r ? r.cells[1].textContent + "|" + r.cells[2].textContent + "|" + r.cells[3].textContent : "gone") +
			"|" + document.querySelector("#ov-servers-count").textContent; })()`)
		if err == nil && (v == "0s|0|unhealthy|3" || strings.HasPrefix(v, "0s|0|")) {
			t.Fatalf("the killed server is shown with a last contact of 0s and a Raft index of 0: %q", v)
		}
		if err == nil && (strings.HasPrefix(v, "unknown|unknown|unreachable") || strings.HasPrefix(v, "gone|2")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview does not show the killed server unreachable or gone: %q (%v)", v, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.screenshot("live-cluster-server-down")
	c.Start(dead)
	b.waitJS("the server back, live", `document.querySelector("#ov-servers-count").textContent === "3" && document.querySelectorAll("#ov-servers .badge.ok").length === 3`, 60*time.Second)
	if m, _ := eval[string](b, `document.body.dataset.marker || ""`); m != "kept" {
		t.Fatalf("the overview was reloaded")
	}
	b.waitJS("the footer's index is the panel's", `document.querySelector("#index").textContent === document.querySelector("#ov-index").textContent`, 10*time.Second)

	// A tab on a server that dies.
	gone := followers[0]
	b.open(gone.URL + "/ui/pauses")
	b.waitJS("live stream open", `!!document.querySelector("#pause-all")`, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	c.Kill(c.Index(gone))
	b.waitJS("the unreachable banner", `!document.querySelector("#offline").hidden && document.querySelector("#pause-all").disabled`, 20*time.Second)
	links, _ := eval[string](b, `Array.from(document.querySelectorAll("#offline a.peer")).map(a => a.href).join(" ")`)
	for _, s := range c.Servers() {
		if s == nil {
			continue
		}
		if want := s.URL + "/ui/pauses"; !strings.Contains(links, want) {
			t.Errorf("the banner links %q; want %s", links, want)
		}
	}
	if strings.Contains(links, gone.URL) {
		t.Errorf("the banner links the dead server itself: %q", links)
	}
	b.screenshot("live-server-unreachable")
}

// brokenWords lists the words of table cells that wrap inside: a word,
// split at spaces and after hyphens, whose text spans two lines.
const brokenWords = `(() => {
	const bad = [];
	for (const cell of document.querySelectorAll("td, th")) {
		const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) {
			const re = /[^\s-]+-?/g;
			for (let m = re.exec(n.data); m; m = re.exec(n.data)) {
				const r = document.createRange();
				r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
				const tops = Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => x.top);
				if (tops.length > 1 && Math.max(...tops) - Math.min(...tops) > 4) bad.push(m[0]);
			}
		}
	}
	return bad.slice(0, 10).join(" ");
})()`

// lines counts the lines an element's text takes.
func lines(b *browser, sel string) (int, error) {
	return eval[int](b, `(() => { const r = document.createRange(); r.selectNodeContents(document.querySelector(`+jsString(sel)+`));
		const tops = Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top)).sort((a, b) => a - b);
		let n = 0, last = -100; for (const t of tops) { if (t - last > 4) n++; last = t; } return n; })()`)
}

// checkLayout fails when the page scrolls sideways as a whole (a wide
// table scrolls in its panel) or a table cell breaks a word.
func (b *browser) checkLayout(name string) {
	b.t.Helper()
	if w, _ := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		b.t.Errorf("%s: the page scrolls sideways by %d pixels", name, w)
	}
	if words, _ := eval[string](b, brokenWords); words != "" {
		b.t.Errorf("%s: table cells break words inside: %s", name, words)
	}
}

// TestDashboard_EventsLayout: the Events page with about fifty events, on
// a 390-pixel-wide phone, stays a sane height, breaks no word inside a
// cell, keeps each long token (an ACL token's object) on one line, and
// scrolls its table sideways with a hint rather than the page.
func TestDashboard_EventsLayout(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	s, mgmt := startACL(t)
	mustDo(t, s, mgmt, "PUT", "/v1/acl/policy/bots", map[string]string{"rules": `namespace "*" { capabilities = ["read"] }`}, nil)
	for i := range 18 {
		mustDo(t, s, mgmt, "POST", "/v1/acl/token", map[string]any{"name": fmt.Sprintf("bot-%d", i), "policies": []string{"bots"}}, nil)
	}
	for i := range 15 {
		s.CreatePending("default", fmt.Sprintf("service-%02d", i))
	}
	b.open(s.URL + "/ui/login")
	b.typeInto("#token", mgmt)
	b.click("#login-form button[type=submit]")
	b.waitJS("logged in", `!!document.querySelector("#user")`, 20*time.Second)

	b.do("phone", chromedp.EmulateViewport(390, 844))
	b.open(s.URL + "/ui/events")
	if n, _ := eval[int](b, `document.querySelectorAll("#events tbody tr").length`); n < 50 {
		t.Fatalf("the events page lists %d events; want about fifty", n)
	}
	height, _ := eval[int](b, `document.documentElement.scrollHeight`)
	t.Logf("the events page is %d pixels tall at 390 pixels wide", height)
	if height > 4000 {
		t.Errorf("the events page is %d pixels tall at 390 pixels wide; want under 4000", height)
	}
	b.checkLayout("events at 390")
	tokens, _ := eval[int](b, `document.querySelectorAll("#events td.nowrap").length`)
	for i := range tokens {
		sel := fmt.Sprintf("#events tbody tr:nth-child(%d) td.nowrap", i+1)
		if text, _ := eval[string](b, `document.querySelector(`+jsString(sel)+`).textContent`); strings.HasPrefix(text, "acl-token/") {
			if n, err := lines(b, sel); err != nil || n != 1 {
				t.Errorf("the object %q takes %d lines (%v); want one", text, n, err)
			}
		}
	}
	if hint, _ := eval[bool](b, `!!document.querySelector("#events .scroll-hint:not([hidden])")`); !hint {
		t.Errorf("the events table is wider than the phone and no hint says it scrolls")
	}
	b.screenshot("events-390")
	b.do("desktop", chromedp.EmulateViewport(1400, 900))
	b.open(s.URL + "/ui/events")
	b.checkLayout("events at 1400")
	if hint, _ := eval[bool](b, `!!document.querySelector("#events .scroll-hint:not([hidden])")`); hint {
		t.Errorf("the events table scrolls at 1400 pixels")
	}
	b.screenshot("events-1400")
}
