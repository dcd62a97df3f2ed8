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
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
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
	// the limit) answers 413, a push that says it is neither JSON nor a
	// form 415, and a form without a payload 400: none fetches anything.
	big := append(bytes.Clone(body), bytes.Repeat([]byte(" "), 2<<20)...)
	for _, tc := range []struct {
		contentType string
		body        []byte
		want        int
	}{
		{"application/json", big, http.StatusRequestEntityTooLarge},
		{"text/plain", body, http.StatusUnsupportedMediaType},
		// A form delivery carries its payload in the payload field.
		{"application/x-www-form-urlencoded", body, http.StatusBadRequest},
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
		Matched  []string `json:"matched"`
		Branches []string `json:"branches"`
		Message  string   `json:"message"`
	}
	if err := json.Unmarshal([]byte(raw), &answer); err != nil || len(answer.Matched) != 1 || answer.Matched[0] != "main" ||
		len(answer.Branches) != 1 || answer.Branches[0] != "main" || answer.Message != "" {
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
	if code != http.StatusOK || json.Unmarshal([]byte(raw), &answer) != nil || len(answer.Matched) != 0 ||
		!strings.Contains(answer.Message, "no watched repository follows branch feature") {
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

// providerDelivery is one provider's push event: its payload in
// agent/http/testdata/webhook, the repository URLs and the commit in it
// (rewritten to the test's repository and commit), and how it is signed.
type providerDelivery struct {
	name, file string
	urls       []string // longest first
	commit     string
	headers    func(secret string, body []byte, delivery string) map[string]string
}

func hubSHA256(header, event, eventHeader, deliveryHeader string) func(string, []byte, string) map[string]string {
	return func(secret string, body []byte, delivery string) map[string]string {
		h := map[string]string{header: githubSignature(secret, body), deliveryHeader: delivery}
		if eventHeader != "" {
			h[eventHeader] = event
		}
		return h
	}
}

var providerDeliveries = []providerDelivery{
	{"GitHub", "github-push.json", []string{"https://github.com/acme/ops.git", "git@github.com:acme/ops.git", "git://github.com/acme/ops.git", "https://github.com/acme/ops"},
		"8f9a6c1e2b7d4a03c5e1f0b2d9a7c6e5b4a39281", hubSHA256("X-Hub-Signature-256", "push", "X-GitHub-Event", "X-GitHub-Delivery")},
	{"GitLab", "gitlab-push.json", []string{"https://gitlab.example/platform/ops.git", "git@gitlab.example:platform/ops.git", "https://gitlab.example/platform/ops"},
		"da1560886d4f094c3e6c9ef40349f7d38b5d27d7", func(secret string, _ []byte, delivery string) map[string]string {
			return map[string]string{"X-Gitlab-Token": secret, "X-Gitlab-Event": "Push Hook", "X-Gitlab-Event-UUID": delivery, "X-GitHub-Event": ""}
		}},
	{"Gitea", "gitea-push.json", []string{"https://gitea.example/platform/ops.git", "git@gitea.example:platform/ops.git", "https://gitea.example/platform/ops"},
		"bffeb74224043ba2feb48d137756c8a9331c449a", func(secret string, body []byte, delivery string) map[string]string {
			return map[string]string{"X-Gitea-Signature": strings.TrimPrefix(githubSignature(secret, body), "sha256="),
				"X-Gitea-Event": "push", "X-Gitea-Delivery": delivery, "X-GitHub-Event": ""}
		}},
	{"Bitbucket Cloud", "bitbucket-cloud-push.json", []string{"https://bitbucket.org/acme/ops"},
		"7d1e5b3a9c0f2e4d6b8a1c3e5f7a9b0d2c4e6f81", hubSHA256("X-Hub-Signature", "repo:push", "X-Event-Key", "X-Request-UUID")},
	{"Bitbucket Server", "bitbucket-server-push.json", []string{"ssh://git@bitbucket.acme.example:7999/plat/ops.git", "https://bitbucket.acme.example/scm/plat/ops.git"},
		"178864a7d521b6f5e720b386b2c2b0ef8563e0dc", hubSHA256("X-Hub-Signature", "repo:refs_changed", "X-Event-Key", "X-Request-Id")},
	{"generic", "generic-push.json", []string{"https://git.acme.example/platform/ops.git"},
		"0e5a8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f10", hubSHA256("X-Nops-Signature", "", "", "X-Request-UUID")},
}

// webhookAnswer decodes the webhook's answer (the zero answer when it is
// not one).
func webhookAnswer(raw string) structs.WebhookResult {
	var a structs.WebhookResult
	_ = json.Unmarshal([]byte(raw), &a)
	return a
}

// payloadFor reads a provider's push payload and points it at repoURL and
// commit.
func (d providerDelivery) payloadFor(t *testing.T, repoURL, commit string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "agent", "http", "testdata", "webhook", d.file))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	for _, u := range d.urls {
		s = strings.ReplaceAll(s, u, repoURL)
	}
	if !strings.Contains(s, d.commit) {
		t.Fatalf("%s payload does not carry commit %s", d.name, d.commit)
	}
	return []byte(strings.ReplaceAll(s, d.commit, commit))
}

// TestWebhook_EveryProvider: a push of each provider (GitHub, GitLab,
// Gitea, Bitbucket Cloud and Server, generic), in its own payload and
// signature scheme, fetches the new commit at once and deploys it to a
// real Nomad; the same payload for a repository Nops does not watch
// answers 200, changes nothing and says so; a provider's ping is answered
// and changes nothing. Not parallel: it sets an environment variable.
func TestWebhook_EveryProvider(t *testing.T) {
	const secret = "provider-secret"
	e, url := webhookWorld(t, secret)
	for i, d := range providerDeliveries {
		c := e.commit(d.name+": more replicas", map[string]string{
			jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2+i%2))...),
		})
		// A push of another repository, then of ours.
		other := d.payloadFor(t, "https://git.example/someone/else.git", c)
		code, raw := postWebhook(t, e.s.URL, other, d.headers(secret, other, fmt.Sprintf("other-%d", i)))
		if a := webhookAnswer(raw); code != http.StatusOK || !strings.Contains(a.Message, "no watched repository follows branch main") || a.Matched == nil || len(a.Matched) != 0 {
			t.Fatalf("%s push of a repository not watched: %d %s", d.name, code, raw)
		}
		body := d.payloadFor(t, url, c)
		code, raw = postWebhook(t, e.s.URL, body, d.headers(secret, body, fmt.Sprintf("ours-%d", i)))
		if a := webhookAnswer(raw); code != http.StatusOK || !slices.Equal(a.Matched, []string{"main"}) || a.Message != "" {
			t.Fatalf("%s push: %d %s", d.name, code, raw)
		}
		e.waitHead(c)
		e.waitFor(func() (bool, string) {
			l := e.deploymentsOf("web")
			return len(l) > 0 && l[0].Commit == c && l[0].State == structs.StateCompleted,
				fmt.Sprintf("%s: newest deployment of web is of %s, %s", d.name, l[0].Commit, l[0].State)
		})
		if j := e.nomadJob("web"); groupCount(j) != 2+i%2 {
			t.Fatalf("%s: Nomad job count %d, want %d", d.name, groupCount(j), 2+i%2)
		}
	}
	// Pings: GitHub's when a hook is made, Bitbucket Server's "test
	// connection". Both answer 200 and fetch nothing.
	fetched := e.repoStatus().LastFetch
	ping := []byte(`{"zen":"Design for failure.","hook_id":12345678}`)
	for _, h := range []map[string]string{
		{"X-GitHub-Event": "ping", "X-Hub-Signature-256": githubSignature(secret, ping)},
		{"X-GitHub-Event": "", "X-Event-Key": "diagnostics:ping", "X-Hub-Signature": githubSignature(secret, ping)},
	} {
		if code, raw := postWebhook(t, e.s.URL, ping, h); code != http.StatusOK || !strings.HasPrefix(webhookAnswer(raw).Message, "ping") {
			t.Fatalf("ping %v: %d %s", h, code, raw)
		}
	}
	e.settle()
	if r := e.repoStatus(); !r.LastFetch.Equal(fetched) {
		t.Fatalf("a ping fetched: last fetch %v, was %v", r.LastFetch, fetched)
	}
}

// TestWebhook_GitHubFormDelivery: GitHub's form content type
// (application/x-www-form-urlencoded, the payload in a payload field,
// signed over the whole form body) deploys like a JSON delivery. Not
// parallel: it sets an environment variable.
func TestWebhook_GitHubFormDelivery(t *testing.T) {
	const secret = "form-secret"
	e, url := webhookWorld(t, secret)
	c := e.commit("three replicas", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(3))...),
	})
	payload := providerDeliveries[0].payloadFor(t, url, c)
	form := []byte(neturl.Values{"payload": {string(payload)}}.Encode())
	// What a hostile page can make a browser send: a form post, from
	// another origin, or with no signature (a page cannot add headers to
	// a form post). Neither fetches.
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"cross-site, signed", map[string]string{"Origin": "https://evil.example", "X-Hub-Signature-256": githubSignature(secret, form)}, http.StatusForbidden},
		{"unsigned", map[string]string{}, http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest("POST", e.s.URL+"/v1/webhook/git", bytes.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("%s form post: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	if r := e.repoStatus(); r.Head == c {
		t.Fatalf("a refused form post fetched %s", c)
	}
	req, err := http.NewRequest("POST", e.s.URL+"/v1/webhook/git", bytes.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", "form-1")
	req.Header.Set("X-Hub-Signature-256", githubSignature(secret, form))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if a := webhookAnswer(string(raw)); resp.StatusCode != http.StatusOK || !slices.Equal(a.Matched, []string{"main"}) {
		t.Fatalf("form delivery: %d %s", resp.StatusCode, raw)
	}
	e.waitHead(c)
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf("web")
		return len(l) > 0 && l[0].Commit == c && l[0].State == structs.StateCompleted,
			fmt.Sprintf("newest deployment of web is of %s, %s", l[0].Commit, l[0].State)
	})
}
