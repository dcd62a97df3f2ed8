package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestDashboard_CommitContext: the deployment and approvals pages show a deployment's commit (subject, author, a link that opens apart)
// and its file diff coloured by line, everything escaped; a link that is
// no web URL is never a link. (The job page is checked with a real
// server's reconcilers, in the CLI's end-to-end test of the commit.)
func TestDashboard_CommitContext(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "nops"}
	commit := strings.Repeat("ab", 20)
	create := func(jobID, url string) *structs.Deployment {
		t.Helper()
		d := &structs.Deployment{ID: "00000000-0000-4000-8000-0000000000" + jobID[len(jobID)-2:], Namespace: "default", JobID: jobID,
			Repository: "ops", Commit: commit, File: "jobs/" + jobID + ".nomad.hcl", Policy: structs.PolicyApproval,
			State: structs.StateDetected, SpecHash: "spec", Diff: "+/- Job: \"web\"",
			CommitMessage: "Bump web to v2 <script>alert(1)</script>\n\nThe body & more.", CommitAuthor: "Ada Lovelace <ada@example.com>",
			CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), CommitURL: url,
			FileDiff: "--- a/jobs/web.nomad.hcl\n+++ b/jobs/web.nomad.hcl\n@@ -1,3 +1,3 @@\n job {\n-  image = \"web:1\"\n+  image = \"web:2\"\n" +
				"   DB_PASSWORD = \"(redacted)\" # <b>x</b>\n"}
		if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta, Deployment: d}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
			WriteMeta: meta, ID: d.ID, From: structs.StateDetected, To: structs.StatePendingApproval}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	link := "https://git.example.com/ops/jobs/commit/" + commit
	d := create("web-01", link)
	bad := create("api-02", "javascript:alert(1)")
	c := newClient(t, s.URL)
	get := func(path string) string {
		t.Helper()
		code, _, page := c.do("GET", path, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%.1000s", path, code, page)
		}
		if strings.Contains(page, "<script>alert") || strings.Contains(page, `href="javascript:`) || strings.Contains(page, "<b>x</b>") {
			t.Errorf("GET %s: unescaped text or a script link in the page", path)
		}
		return page
	}
	subject := "Bump web to v2 &lt;script&gt;alert(1)&lt;/script&gt;"
	author := "Ada Lovelace &lt;ada@example.com&gt;"
	anchor := `<a href="` + link + `" rel="noopener" class="commit-link">`
	lines := []string{`<span class="fd-file">--- a/jobs/web.nomad.hcl</span>`, `<span class="fd-hunk">@@ -1,3 &#43;1,3 @@</span>`,
		`<span class="fd-removed">-  image = &#34;web:1&#34;</span>`, `<span class="fd-added">&#43;  image = &#34;web:2&#34;</span>`,
		`<span class="fd-context">   DB_PASSWORD = &#34;(redacted)&#34; # &lt;b&gt;x&lt;/b&gt;</span>`}

	page := get("/ui/deployment/" + d.ID)
	for _, want := range append([]string{subject, author, anchor, "2026-01-02T03:04:05Z", "The body &amp; more.", `id="dep-filediff"`, "&#43;1 −1 lines"}, lines...) {
		if !strings.Contains(page, want) {
			t.Errorf("the deployment page lacks %q", want)
		}
	}
	page = get("/ui/approvals")
	for _, want := range append([]string{subject, author, anchor, "File diff of default/web-01 (&#43;1 −1)"}, lines...) {
		if !strings.Contains(page, want) {
			t.Errorf("the approvals page lacks %q", want)
		}
	}
	page = get("/ui/deployment/" + bad.ID)
	if !strings.Contains(page, subject) || strings.Contains(page, "alert(1)\"") {
		t.Errorf("the page of a deployment whose link is no web URL")
	}
}
