package command

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestCLI_CommitContext: a commit "Bump web to v2" by Ada Lovelace that
// changes a job file holding a planted secret makes a deployment that
// waits for approval; its subject, author and link, and its file diff with
// the changed line and without the secret, show in the API, in `nops
// deployment status`, in the webhook notification a real receiver gets,
// and on the dashboard's deployment, approvals and job pages.
func TestCLI_CommitContext(t *testing.T) {
	const secret = "s3cret-planted"
	job := func(version string) string {
		return testutil.ServiceJobHCL("web", testutil.WithManaged("approval"),
			testutil.WithEnv("DB_PASSWORD", secret), testutil.WithMeta("version", version))
	}
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "Add web", map[string]string{"jobs/web.nomad.hcl": job("v1")})

	var mu sync.Mutex
	var bodies []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rcv.Close)
	const web = "https://git.example.com/ops/jobs"
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("main", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(c *config.Config) {
			c.Repositories[0].WebURL = web
			c.Notify = []config.NotifyConfig{{Name: "hook", Kind: config.NotifyKindWebhook, URL: rcv.URL,
				Events: []string{structs.NotifyPendingApproval}}}
		}))
	c := newCLI(t, s.Server)

	first := s.WaitForDeployment("default", "web", structs.StatePendingApproval, 60*time.Second)
	c.ok("deployment", "approve", first.ID)
	s.WaitForDeployment("default", "web", structs.StateCompleted, 90*time.Second)

	repo.WriteFile("jobs/web.nomad.hcl", job("v2"))
	head := repo.CommitAs("Ada Lovelace <ada@example.com>", "Bump web to v2\n\nThe new version.")
	var d *structs.Deployment
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		for _, x := range s.Deployments("default", "web") {
			if x.Commit == head && x.State == structs.StatePendingApproval {
				d = x
				return true, nil
			}
		}
		return false, nil
	})
	link := web + "/commit/" + head
	changed := []string{`-    "version" = "v1"`, `+    "version" = "v2"`}

	// The API, one deployment and the list.
	var got structs.Deployment
	code, raw := s.Do("GET", "/v1/deployment/"+d.ID, nil, &got)
	if code != http.StatusOK || got.CommitSubject() != "Bump web to v2" || got.CommitAuthor != "Ada Lovelace <ada@example.com>" ||
		got.CommitURL != link || got.CommitTime.IsZero() {
		t.Fatalf("GET /v1/deployment: %d %q %q %q %v", code, got.CommitMessage, got.CommitAuthor, got.CommitURL, got.CommitTime)
	}
	mustContain(t, "file_diff", got.FileDiff, changed...)
	var fields map[string]any
	if err := json.Unmarshal([]byte(raw), &fields); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"commit_author": "Ada Lovelace <ada@example.com>", "commit_url": link, "file_diff": got.FileDiff,
		"commit_message": "Bump web to v2\n\nThe new version.\n", "commit_time": got.CommitTime.Format(time.RFC3339)} {
		if v, _ := fields[k].(string); v != want {
			t.Errorf("the API answer's %s is %q, want %q", k, v, want)
		}
	}
	var list []map[string]any
	s.Do("GET", "/v1/deployments?job=web", nil, &list)
	if len(list) != 2 || list[0]["commit_url"] != link || list[0]["file_diff"] != got.FileDiff || list[1]["commit_author"] != "Nops Test <test@nops.invalid>" {
		t.Errorf("the deployment list lacks the commit context: %v", list)
	}

	// The CLI.
	out := c.ok("deployment", "status", d.ID)
	mustContain(t, "deployment status", out, "Subject", "Bump web to v2", "Author", "Ada Lovelace <ada@example.com>", "Link", link,
		"File diff: +1 -1 lines (show it with -diff)")
	out = c.ok("deployment", "status", "-diff", d.ID)
	mustContain(t, "deployment status -diff", out, append(changed, "File diff (redacted)", "--- a/jobs/web.nomad.hcl")...)

	// The webhook notification.
	var hook string
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bodies {
			var p notify.WebhookPayload
			if json.Unmarshal([]byte(b), &p) == nil && p.Deployment != nil && p.Deployment.ID == d.ID {
				hook = b
				return true, nil
			}
		}
		return false, nil
	})
	var p notify.WebhookPayload
	if err := json.Unmarshal([]byte(hook), &p); err != nil {
		t.Fatal(err)
	}
	if p.Deployment.CommitSubject() != "Bump web to v2" || p.Deployment.CommitAuthor != "Ada Lovelace <ada@example.com>" ||
		p.Deployment.CommitURL != link || p.Deployment.CommitTime.IsZero() {
		t.Errorf("the webhook body: %s", hook)
	}

	// The dashboard, without a browser.
	page := func(path string) string {
		t.Helper()
		resp, err := s.HTTPClient().Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return string(b)
	}
	anchor := `<a href="` + link + `" rel="noopener"`
	for path, want := range map[string][]string{
		"/ui/deployment/" + d.ID: {"Bump web to v2", "Ada Lovelace &lt;ada@example.com&gt;", anchor,
			`<span class="fd-removed">-    &#34;version&#34; = &#34;v1&#34;</span>`, `<span class="fd-added">&#43;    &#34;version&#34; = &#34;v2&#34;</span>`},
		"/ui/approvals":       {"Bump web to v2", "Ada Lovelace &lt;ada@example.com&gt;", anchor, `class="fd-added"`},
		"/ui/job/default/web": {"Bump web to v2", "Ada Lovelace &lt;ada@example.com&gt;", anchor},
	} {
		body := page(path)
		mustContain(t, path, body, want...)
		if strings.Contains(body, secret) {
			t.Errorf("%s shows the planted secret", path)
		}
	}

	// The secret is on neither side of the file diff, anywhere; the first
	// deployment's diff adds the whole file, its secret redacted.
	var firstGot structs.Deployment
	s.Do("GET", "/v1/deployment/"+first.ID, nil, &firstGot)
	mustContain(t, "first file diff", firstGot.FileDiff, "--- /dev/null\n+++ b/jobs/web.nomad.hcl\n", `+        "DB_PASSWORD" = "(redacted)"`)
	for what, text := range map[string]string{"file diff": got.FileDiff, "API answer": raw, "status -diff": out, "webhook body": hook,
		"first file diff": firstGot.FileDiff} {
		if strings.Contains(text, secret) {
			t.Errorf("the %s shows the planted secret", what)
		}
	}
}
