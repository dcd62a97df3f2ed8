package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// commitJob is a job whose file declares two variables, set by its
// variables file, and holds a planted secret in its env.
func commitJob(version string) string {
	job := testutil.ServiceJobHCL("web", managed(structs.PolicyAuto,
		testutil.WithEnv("DB_PASSWORD", "s3cret-planted"), testutil.WithEnv("API_TOKEN", "TOKEN_VAR"),
		testutil.WithMeta("version", version), testutil.WithMeta("image_tag", "TAG_VAR"))...)
	job = strings.Replace(job, `"TOKEN_VAR"`, "var.api_token", 1)
	job = strings.Replace(job, `"TAG_VAR"`, "var.image_tag", 1)
	return "variable \"image_tag\" {\n  type = string\n}\n\nvariable \"api_token\" {\n  type = string\n}\n\n" + job
}

func commitVars(tag, token string) string {
	return "image_tag = \"" + tag + "\"\napi_token = \"" + token + "\"\n"
}

// TestDetect_CommitContext: a deployment records its commit's message,
// author, time and link (web_url), and the redacted unified diff of its
// job file and variables file: the whole files for the first, then the
// change since the last completed deployment. No planted secret shows,
// on either side.
func TestDetect_CommitContext(t *testing.T) {
	t.Parallel()
	varsFile := jobsDir + "/web.vars.hcl"
	e := lcWorld(t, map[string]string{jobFile("web"): commitJob("v1"), varsFile: commitVars("1.0", "tok-planted-1")})
	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) {
		c.Repositories[0].WebURL = "https://git.example.com/ops/jobs"
	}))
	first := e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	if first.CommitSubject() != "initial jobs" || first.CommitAuthor != "Nops Test <test@nops.invalid>" ||
		first.CommitURL != "https://git.example.com/ops/jobs/commit/"+first.Commit || time.Since(first.CommitTime) > time.Hour {
		t.Fatalf("first deployment's commit: %q %q %q %v", first.CommitMessage, first.CommitAuthor, first.CommitURL, first.CommitTime)
	}
	for _, want := range []string{"--- /dev/null\n+++ b/" + jobFile("web") + "\n@@ -0,0 +1,", "--- /dev/null\n+++ b/" + varsFile + "\n@@ -0,0 +1,2 @@\n+image_tag = \"1.0\"\n+api_token = \"(redacted)\"\n",
		"+        \"DB_PASSWORD\" = \"(redacted)\"\n", "+    \"version\" = \"v1\"\n", "+variable \"api_token\" {\n+  type = string\n"} {
		if !strings.Contains(first.FileDiff, want) {
			t.Errorf("the first file diff does not show %q:\n%s", want, first.FileDiff)
		}
	}

	e.repo.WriteFile(jobFile("web"), commitJob("v2"))
	e.repo.WriteFile(varsFile, commitVars("2.0", "tok-planted-2"))
	head := e.repo.CommitAs("Ada Lovelace <ada@example.com>", "Bump web to v2\n\nThe new image and a new token.")
	d := e.waitNewDeployment("web", first.ID)
	d = e.waitDeployment(d.ID, structs.StateCompleted)
	if d.Commit != head || d.CommitSubject() != "Bump web to v2" || !strings.Contains(d.CommitMessage, "a new token") ||
		d.CommitAuthor != "Ada Lovelace <ada@example.com>" || d.CommitURL != "https://git.example.com/ops/jobs/commit/"+head {
		t.Fatalf("second deployment's commit: %s %q %q %q", d.Commit, d.CommitMessage, d.CommitAuthor, d.CommitURL)
	}
	want := []string{
		"--- a/" + jobFile("web") + "\n+++ b/" + jobFile("web") + "\n@@ ",
		"\n-    \"version\" = \"v1\"\n+    \"version\" = \"v2\"\n",
		"--- a/" + varsFile + "\n+++ b/" + varsFile + "\n@@ -1,2 +1,2 @@\n-image_tag = \"1.0\"\n-api_token = \"(redacted)\"\n+image_tag = \"2.0\"\n+api_token = \"(redacted)\"\n",
	}
	for _, w := range want {
		if !strings.Contains(d.FileDiff, w) {
			t.Errorf("the file diff does not show %q:\n%s", w, d.FileDiff)
		}
	}
	for _, dep := range []*structs.Deployment{first, d} {
		for _, secret := range []string{"s3cret-planted", "tok-planted"} {
			if strings.Contains(dep.FileDiff, secret) {
				t.Errorf("deployment %s: the file diff shows the secret %q:\n%s", dep.ID, secret, dep.FileDiff)
			}
		}
	}
	if strings.Contains(d.FileDiff, "DB_PASSWORD") {
		t.Errorf("an unchanged line far from the change is in the diff:\n%s", d.FileDiff)
	}
}
