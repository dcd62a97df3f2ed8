package reconcile_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// webhookSecretEnv names the environment variable that holds the webhook
// secret in these tests.
const webhookSecretEnv = "NOPS_TEST_WEBHOOK_SECRET"

// githubSignature is the X-Hub-Signature-256 header GitHub sends.
func githubSignature(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// githubPush is the body of a GitHub push event for a branch of a
// repository.
func githubPush(cloneURL, branch, after string) []byte {
	b, _ := json.Marshal(map[string]any{
		"ref":        "refs/heads/" + branch,
		"after":      after,
		"repository": map[string]string{"clone_url": cloneURL},
	})
	return b
}

// postWebhook sends a push to the server's webhook with the given headers
// and returns the status code and body.
func postWebhook(t testing.TB, baseURL string, body []byte, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", baseURL+"/v1/webhook/git", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: 90 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/webhook/git: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// webhookOnly makes the server fetch the repository once at start and then
// only when told (a webhook), with secret from webhookSecretEnv.
func webhookOnly() nopstest.Option {
	return nopstest.WithConfig(func(c *config.Config) {
		c.Webhook.SecretEnv = webhookSecretEnv
		for i := range c.Repositories {
			c.Repositories[i].PollInterval = time.Hour
		}
	})
}

// webhookWorld sets the webhook secret and starts a world whose server
// fetches its repository, served over HTTP, at start and then only on a
// webhook; the repository's one job, web (policy auto), is deployed. It
// returns the world and the repository's URL.
func webhookWorld(t *testing.T, secret string) (*lcEnv, string) {
	t.Helper()
	t.Setenv(webhookSecretEnv, secret)
	e := lcWorld(t, map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	url := e.repo.ServeHTTP(t)
	e.serve(url, webhookOnly())
	e.s.WaitForDeployment("default", "web", structs.StateCompleted, lcWait)
	return e, url
}

// TestWebhook_SignedPushDeploys: a push with a bad signature is refused and
// fetches nothing; the same push signed with the secret fetches the new
// commit and deploys it. Not parallel: it sets an environment variable.
func TestWebhook_SignedPushDeploys(t *testing.T) {
	const secret = "push-hook-secret"
	e, url := webhookWorld(t, secret)
	head0 := e.repo.Head()
	e.waitHead(head0)

	c := e.commit("two replicas", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
	})
	body := githubPush(url, "main", c)

	for name, headers := range map[string]map[string]string{
		"wrong secret": {"X-Hub-Signature-256": githubSignature("not-the-secret", body)},
		"garbage":      {"X-Hub-Signature-256": "sha256=zz"},
		"unsigned":     {},
	} {
		code, raw := postWebhook(t, e.s.URL, body, headers)
		if code != http.StatusUnauthorized {
			t.Fatalf("%s push: %d %s, want 401", name, code, raw)
		}
	}
	// An oversize push (sent without a length, so the handler's read hits
	// the limit) answers 413, and a push that does not say it is JSON 415:
	// neither fetches anything.
	big := append(bytes.Clone(body), bytes.Repeat([]byte(" "), 2<<20)...)
	for _, tc := range []struct {
		contentType string
		body        []byte
		want        int
	}{
		{"application/json", big, http.StatusRequestEntityTooLarge},
		{"text/plain", body, http.StatusUnsupportedMediaType},
		{"application/x-www-form-urlencoded", body, http.StatusUnsupportedMediaType},
	} {
		req, err := http.NewRequest("POST", e.s.URL+"/v1/webhook/git", io.MultiReader(bytes.NewReader(tc.body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", tc.contentType)
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", githubSignature(secret, tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("%s push of %d bytes: %d %s, want %d", tc.contentType, len(tc.body), resp.StatusCode, raw, tc.want)
		}
	}
	if r := e.repoStatus(); r == nil || r.Head != head0 {
		t.Fatalf("a refused push fetched: %+v", r)
	}
	// A signature of another body does not pass either.
	other := githubPush(url, "main", strings.Repeat("0", 40))
	if code, raw := postWebhook(t, e.s.URL, body, map[string]string{"X-Hub-Signature-256": githubSignature(secret, other)}); code != http.StatusUnauthorized {
		t.Fatalf("push signed for another body: %d %s", code, raw)
	}
	e.settle()
	if r := e.repoStatus(); r.Head != head0 {
		t.Fatalf("repository head moved to %s after refused pushes, want %s", r.Head, head0)
	}
	e.wantDeployments("web", structs.StateCompleted)
	if j := e.nomadJob("web"); *j.Version != 0 {
		t.Fatalf("Nomad job version %d after refused pushes", *j.Version)
	}

	code, raw := postWebhook(t, e.s.URL, body, map[string]string{"X-Hub-Signature-256": githubSignature(secret, body)})
	if code != http.StatusOK {
		t.Fatalf("signed push: %d %s", code, raw)
	}
	var answer struct {
		Matched []string `json:"matched"`
		Branch  string   `json:"branch"`
	}
	if err := json.Unmarshal([]byte(raw), &answer); err != nil || len(answer.Matched) != 1 || answer.Matched[0] != "main" || answer.Branch != "main" {
		t.Fatalf("signed push answer %s (%v)", raw, err)
	}
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf("web")
		return len(l) == 2 && l[0].State == structs.StateCompleted && l[0].Commit == c,
			fmt.Sprintf("%d deployments, newest %s", len(l), l[0].State)
	})
	e.waitHead(c)
	if j := e.nomadJob("web"); *j.Version != 1 || groupCount(j) != 2 {
		t.Fatalf("Nomad job after the push: version %d count %d", *j.Version, groupCount(j))
	}

	// A push for another branch matches nothing.
	code, raw = postWebhook(t, e.s.URL, githubPush(url, "feature", c), map[string]string{
		"X-Hub-Signature-256": githubSignature(secret, githubPush(url, "feature", c))})
	answer.Matched = nil
	if code != http.StatusOK || json.Unmarshal([]byte(raw), &answer) != nil || len(answer.Matched) != 0 {
		t.Fatalf("push for another branch: %d %s", code, raw)
	}
}

// TestWebhook_ReplayedDeliveryChangesNothing: a signed push is handled
// once by its delivery ID; the same delivery again answers 200 with
// "duplicate": true, fetches nothing and writes no log entry, while a new delivery of the same
// push is handled. Not parallel: it sets an environment variable.
func TestWebhook_ReplayedDeliveryChangesNothing(t *testing.T) {
	const secret = "push-hook-secret"
	e, url := webhookWorld(t, secret)
	c := e.commit("two replicas", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
	})
	body := githubPush(url, "main", c)
	push := func(delivery string) (matched []string, duplicate bool) {
		t.Helper()
		code, raw := postWebhook(t, e.s.URL, body, map[string]string{
			"X-Hub-Signature-256": githubSignature(secret, body), "X-GitHub-Delivery": delivery})
		var answer struct {
			Matched   []string `json:"matched"`
			Duplicate bool     `json:"duplicate"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(raw), &answer) != nil {
			t.Fatalf("push of delivery %s: %d %s", delivery, code, raw)
		}
		return answer.Matched, answer.Duplicate
	}
	if matched, dup := push("delivery-1"); dup || len(matched) != 1 {
		t.Fatalf("first delivery: matched %v, duplicate %v", matched, dup)
	}
	e.waitHead(c)
	// The deployment writes events until it ends; count after that.
	e.waitFor(func() (bool, string) {
		list := e.deploymentsOf("web")
		if len(list) == 0 || list[0].Commit != c {
			return false, fmt.Sprintf("web has no deployment of %s yet", c)
		}
		if st := list[0].State; !st.Terminal() {
			return false, fmt.Sprintf("web's deployment of %s is %s, want one that ended", c, st)
		}
		return true, ""
	})
	e.settle()
	fetched := e.repoStatus().LastFetch
	events := len(e.s.Events(""))

	index := e.s.State().LatestIndex()
	if matched, dup := push("delivery-1"); !dup || len(matched) != 0 {
		t.Fatalf("replayed delivery: matched %v, duplicate %v; want a duplicate that matches nothing", matched, dup)
	}
	if now := e.s.State().LatestIndex(); now != index {
		t.Fatalf("a replayed delivery wrote to the log: index %d, was %d", now, index)
	}
	e.settle()
	if r := e.repoStatus(); !r.LastFetch.Equal(fetched) {
		t.Fatalf("a replayed delivery fetched again: last fetch %v, was %v", r.LastFetch, fetched)
	}
	if n := len(e.s.Events("")); n != events {
		t.Fatalf("a replayed delivery wrote %d events", n-events)
	}
	if d, err := e.s.State().WebhookDelivery("github", "delivery-1"); err != nil || d == nil {
		t.Fatalf("the delivery is not in the replicated state: %+v %v", d, err)
	}
	// Another delivery of the same push is handled.
	if matched, dup := push("delivery-2"); dup || len(matched) != 1 {
		t.Fatalf("another delivery: matched %v, duplicate %v", matched, dup)
	}
}
