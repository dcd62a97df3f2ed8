package web_test

import (
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestDashboard_Preview: the preview page offers a form; a post without
// the session's CSRF token is refused and asks for no preview; a post with
// it shows the API's preview (each job with its stops, plan diff and file
// diff, the removed jobs), a job in two Nomad clusters shows twice, each
// named with its cluster, and an unknown ref shows the API's refusal
// beside the form.
func TestDashboard_Preview(t *testing.T) {
	t.Parallel()
	fake := &nopstest.FakeReconciler{
		RepoList: []*structs.RepoStatus{{Name: "main"}},
		Previews: map[string]*structs.Preview{"main@feature": {
			Repository: "main", Ref: "feature", Commit: strings.Repeat("a", 40), Branch: "main", BranchCommit: strings.Repeat("b", 40),
			Changes: true,
			Jobs: []*structs.PreviewJob{{Namespace: "default", JobID: "web", File: "jobs/web.nomad.hcl", Change: structs.PreviewChanged,
				Policy: structs.PolicyAuto, PlanType: "Edited", Diff: `+/- Count: "1" => "2"`, Hold: "paused: freeze",
				FileDiff: "--- a/jobs/web.nomad.hcl\n+++ b/jobs/web.nomad.hcl\n@@ -1 +1 @@\n-count = 1\n+count = 2\n"}},
			Removed: []*structs.PreviewJob{{Namespace: "default", JobID: "old", File: "jobs/old.nomad.hcl", Change: structs.PreviewRemoved}},
		}, "main@clusters": {
			// The same job in two Nomad clusters (SPEC section 16).
			Repository: "main", Ref: "clusters", Commit: strings.Repeat("c", 40), Branch: "main", Changes: true,
			Jobs: []*structs.PreviewJob{
				{Cluster: "default", Namespace: "default", JobID: "web", File: "jobs/web.nomad.hcl", Change: structs.PreviewChanged, Policy: structs.PolicyAuto},
				{Cluster: "us", Namespace: "default", JobID: "web", File: "jobs/web.nomad.hcl", Change: structs.PreviewChanged, Policy: structs.PolicyAuto}},
			Removed: []*structs.PreviewJob{{Cluster: "us", Namespace: "default", JobID: "old", File: "jobs/old.nomad.hcl", Change: structs.PreviewRemoved}},
		}},
	}
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithReconciler(fake))
	c := newClient(t, s.URL)
	code, _, page := c.do("GET", "/ui/preview", nil, nil)
	if code != http.StatusOK || !strings.Contains(page, `action="/ui/preview"`) || !strings.Contains(page, `value="main"`) {
		t.Fatalf("GET /ui/preview: %d\n%.3000s", code, page)
	}
	csrf := csrfOf(t, page)

	if code, _, _ := c.do("POST", "/ui/preview", url.Values{"repository": {"main"}, "ref": {"feature"}}, nil); code != http.StatusBadRequest {
		t.Fatalf("a preview without the CSRF token: %d, want 400", code)
	}
	for _, call := range fake.Calls() {
		if strings.HasPrefix(call, "Preview") {
			t.Fatalf("a refused post asked for a preview: %v", fake.Calls())
		}
	}

	code, _, page = c.do("POST", "/ui/preview", url.Values{"csrf": {csrf}, "repository": {"main"}, "ref": {"feature"}}, nil)
	text := html.UnescapeString(page)
	if code != http.StatusOK {
		t.Fatalf("POST /ui/preview: %d\n%.3000s", code, page)
	}
	for _, want := range []string{`id="preview-default-web"`, "changed: default/web", "Hold: paused: freeze", `+/- Count: "1" => "2"`,
		"+count = 2", "-count = 1", "default/old", "1 job(s) would change, 1 removed"} {
		if !strings.Contains(text, want) {
			t.Errorf("the preview page lacks %q", want)
		}
	}

	// The same job in two clusters: each named with its cluster, each
	// with its own id.
	code, _, page = c.do("POST", "/ui/preview", url.Values{"csrf": {csrf}, "repository": {"main"}, "ref": {"clusters"}}, nil)
	text = html.UnescapeString(page)
	for _, want := range []string{`id="preview-default-web"`, `id="preview-us-default-web"`, "changed: default/web", "changed: us:default/web", "us:default/old"} {
		if code != http.StatusOK || !strings.Contains(text, want) {
			t.Errorf("the preview of a job in two clusters (%d) lacks %q", code, want)
		}
	}

	code, _, page = c.do("POST", "/ui/preview", url.Values{"csrf": {csrf}, "repository": {"main"}, "ref": {"nope"}}, nil)
	if code != http.StatusNotFound || !strings.Contains(page, `id="preview-error"`) || !strings.Contains(html.UnescapeString(page), "no preview of main at nope") {
		t.Fatalf("a preview of an unknown ref: %d\n%.3000s", code, page)
	}
}
