package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestDashboard_BrowserCanaryDiffAndHealth drives, from a real Chromium,
// a job deployed with a canary against a real Nomad: its new version's
// deployment page shows the plan diff as a tree (the changed env value,
// the redacted secret, the forced create/destroy called out), readable at
// 390 px without sideways scrolling; the Promote button promotes the
// canary and the page follows the deployment to completion live; the jobs
// list shows the job's health beside its sync, linked to Nomad; paused,
// the job's page shows the diff of a newer commit's drift, with no
// deployment. No page shows the planted secret. Screenshots at 1400 and
// 390 px are saved and checked not to be blank.
func TestDashboard_BrowserCanaryDiffAndHealth(t *testing.T) {
	b := newBrowser(t)
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepo(t)
	shop := func(version string) string {
		return testutil.ServiceJobHCL("shop", testutil.WithMeta("nops_managed", "true"), testutil.WithMeta("nops_policy", "auto"),
			testutil.WithCanaries(1, false), testutil.WithCount(2), testutil.WithEnv("VERSION", version),
			testutil.WithEnv("DB_PASSWORD", plantedSecret+version))
	}
	repo.WriteFile("jobs/shop.nomad.hcl", shop("1"))
	repo.Commit("shop v1")
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("ops", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = true; cfg.NomadUIURL = nomad.Addr }))
	var boot apiToken
	mustDo(t, s, "", "POST", "/v1/acl/bootstrap", nil, &boot)
	waitDeployment(t, s, "shop", structs.StateCompleted)

	b.open(s.URL + "/ui/")
	b.typeInto("#token", boot.SecretID)
	b.click("#login-form button[type=submit]")
	b.waitJS("logged in", `!!document.querySelector("#user")`, 20*time.Second)
	b.do("desktop width", chromedp.EmulateViewport(1400, 900))

	// Version 2: its canary waits for a promotion.
	repo.WriteFile("jobs/shop.nomad.hcl", shop("2"))
	repo.Commit("shop v2")
	// Its canary waits: registered, with no health deadline (the apply
	// timeout pauses), as the page tells it.
	var d *structs.Deployment
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		list, _, err := s.State().Deployments(fsm.DeploymentFilter{JobID: "shop"})
		if err != nil {
			return false, err
		}
		for _, x := range list {
			if x.State == structs.StateApplying && x.Registered && x.HealthDeadline.IsZero() {
				d = x
				return true, nil
			}
		}
		return false, fmt.Errorf("no deployment of shop waits for its canary")
	})
	b.open(s.URL + "/ui/deployment/" + d.ID)
	b.waitJS("promote button", `!!document.querySelector("#promote")`, 20*time.Second)
	h := b.html("deployment-canary")
	tree := h[strings.Index(h, `id="plan-diff"`):]
	for _, want := range []string{`<code class="pd-name">Env[VERSION]</code>`, `<del class="pd-old">1</del>`, `<ins class="pd-new">2</ins>`,
		`<code class="pd-name">Env[DB_PASSWORD]</code>`, `<del class="pd-old">(redacted)</del>`, `class="pd-callout"`,
		`forces create/destroy update`, `<summary>As text</summary>`} {
		if !strings.Contains(tree, want) {
			t.Errorf("the deployment's diff tree lacks %s", want)
		}
	}
	b.screenshot("deployment-canary-1400")
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.open(s.URL + "/ui/deployment/" + d.ID)
	if w, _ := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("at 390 px the deployment page scrolls sideways by %d pixels", w)
	}
	if w, _ := eval[int](b, `(() => { const e = document.querySelector("#plan-diff"); return e.scrollWidth - e.clientWidth; })()`); w > 0 {
		t.Errorf("at 390 px the diff tree overflows by %d pixels", w)
	}
	b.screenshot("deployment-canary-390")
	b.do("desktop width", chromedp.EmulateViewport(1400, 900))

	// Promote from the page; the page follows the deployment live.
	b.open(s.URL + "/ui/deployment/" + d.ID)
	b.click("#promote")
	b.waitJS("promoted", `location.search.includes("done=promote") && !!document.querySelector("#dep-state-badge")`, 30*time.Second)
	if _, err := eval[string](b, `document.body.dataset.marker = "kept"`); err != nil {
		t.Fatal(err)
	}
	b.waitJS("live completion", `document.querySelector("#dep-state-badge").dataset.state === "completed"`, 120*time.Second)
	if m, err := eval[string](b, `document.body.dataset.marker || ""`); err != nil || m != "kept" {
		t.Fatalf("the page was reloaded while the deployment completed (marker %q, %v)", m, err)
	}
	var events []*structs.Event
	mustDo(t, s, boot.SecretID, "GET", "/v1/events?object="+d.ID, nil, &events)
	var promoted bool
	for _, e := range events {
		promoted = promoted || (e.Message == "canaries promoted" && e.Actor == "Bootstrap Token")
	}
	if !promoted {
		t.Errorf("no canaries promoted event by the logged-in token")
	}

	// The jobs list: health beside sync, linked to the job's allocations
	// in Nomad.
	s.WaitForJobStatus("default", "shop", 90*time.Second, func(st *structs.JobStatus) bool {
		return st.Health != nil && st.Health.Running == 2 && st.Health.Healthy == 2 && st.Health.State() == "healthy"
	})
	b.open(s.URL + "/ui/jobs")
	b.waitJS("health column", `[...document.querySelectorAll("#jobs-table td .health-counts")].some(e => e.textContent.startsWith("2 running, 2 healthy"))`, 30*time.Second)
	if href, _ := eval[string](b, `document.querySelector("#jobs-table td .health-counts").getAttribute("href")`); href != nomad.Addr+"/ui/jobs/shop@default/allocations" {
		t.Errorf("the health counts link to %q", href)
	}
	b.screenshot("jobs-health-1400")
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.open(s.URL + "/ui/jobs")
	b.screenshot("jobs-health-390")
	b.do("desktop width", chromedp.EmulateViewport(1400, 900))

	// Paused, a newer commit shows as the job's drift, with its diff.
	mustDo(t, s, boot.SecretID, "POST", "/v1/job/default/shop/pause", map[string]string{"reason": "freeze"}, nil)
	repo.WriteFile("jobs/shop.nomad.hcl", shop("3"))
	repo.Commit("shop v3")
	s.WaitForJobStatus("default", "shop", 90*time.Second, func(st *structs.JobStatus) bool {
		return st.Sync == structs.SyncDrift && st.Drift != nil && st.Commit == repo.Head()
	})
	b.open(s.URL + "/ui/job/default/shop")
	b.waitJS("drift tree", `!!document.querySelector("#job-drift .pd")`, 20*time.Second)
	h = b.html("job-drift-paused")
	drift := h[strings.Index(h, `id="job-drift"`):]
	for _, want := range []string{`<del class="pd-old">2</del>`, `<ins class="pd-new">3</ins>`, `Env[DB_PASSWORD]`} {
		if !strings.Contains(drift, want) {
			t.Errorf("the paused job's drift panel lacks %s", want)
		}
	}
	if list, _, _ := s.State().Deployments(fsm.DeploymentFilter{JobID: "shop"}); len(list) != 2 {
		t.Errorf("the paused job has %d deployments, want 2", len(list))
	}
	b.screenshot("job-drift-paused-1400")
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.open(s.URL + "/ui/job/default/shop")
	if w, _ := eval[int](b, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
		t.Errorf("at 390 px the job page scrolls sideways by %d pixels", w)
	}
	b.screenshot("job-drift-paused-390")

	for name, page := range b.pages {
		if strings.Contains(page, plantedSecret) {
			t.Errorf("page %s shows the planted secret", name)
		}
	}
}
