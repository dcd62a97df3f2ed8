package agenthttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nops-dev/nops/structs"
)

const testWebhookSecret = "webhook-secret"

// hmacHex is the hex HMAC-SHA256 of body under the test secret.
func hmacHex(body []byte) string {
	mac := hmac.New(sha256.New, []byte(testWebhookSecret))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func readPayload(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "webhook", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVerifyPush_Providers: a push event of every provider, in the
// provider's payload (testdata/webhook) and headers, signed by its scheme,
// gives the push's repository URLs, branches, commit and delivery; the
// same delivery with a signature of another secret, or none, is refused.
func TestVerifyPush_Providers(t *testing.T) {
	githubBody := readPayload(t, "github-push.json")
	form := []byte(url.Values{"payload": {string(githubBody)}}.Encode())
	for _, tc := range []struct {
		name   string
		body   []byte
		header func(sig string) http.Header
		sign   func(body []byte) string
		want   structs.Push
	}{
		{
			name: "GitHub", body: githubBody,
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/json", "X-GitHub-Event", "push",
					"X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-Hub-Signature-256", sig)
			},
			sign: func(b []byte) string { return "sha256=" + hmacHex(b) },
			want: structs.Push{URLs: []string{"https://github.com/acme/ops.git", "https://github.com/acme/ops", "git@github.com:acme/ops.git"},
				Branches: []string{"main"}, After: "8f9a6c1e2b7d4a03c5e1f0b2d9a7c6e5b4a39281",
				Provider: "github", Delivery: "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		},
		{
			name: "GitHub form delivery", body: form,
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/x-www-form-urlencoded", "X-GitHub-Event", "push",
					"X-GitHub-Delivery", "d-form", "X-Hub-Signature-256", sig)
			},
			sign: func(b []byte) string { return "sha256=" + hmacHex(b) },
			want: structs.Push{URLs: []string{"https://github.com/acme/ops.git", "https://github.com/acme/ops", "git@github.com:acme/ops.git"},
				Branches: []string{"main"}, After: "8f9a6c1e2b7d4a03c5e1f0b2d9a7c6e5b4a39281", Provider: "github", Delivery: "d-form"},
		},
		{
			name: "GitLab", body: readPayload(t, "gitlab-push.json"),
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/json", "X-Gitlab-Event", "Push Hook",
					"X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e", "X-Gitlab-Token", sig)
			},
			sign: func([]byte) string { return testWebhookSecret },
			want: structs.Push{URLs: []string{"git@gitlab.example:platform/ops.git", "https://gitlab.example/platform/ops.git", "https://gitlab.example/platform/ops"},
				Branches: []string{"main"}, After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
				Provider: "gitlab", Delivery: "13792a34-cac6-4fda-95a8-c58e00a3954e"},
		},
		{
			name: "Gitea", body: readPayload(t, "gitea-push.json"),
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/json", "X-Gitea-Event", "push",
					"X-Gitea-Delivery", "4b5c7f8e-1a2b-4c3d-9e8f-0a1b2c3d4e5f", "X-Gitea-Signature", sig)
			},
			sign: hmacHex,
			want: structs.Push{URLs: []string{"https://gitea.example/platform/ops.git", "https://gitea.example/platform/ops", "git@gitea.example:platform/ops.git"},
				Branches: []string{"main"}, After: "bffeb74224043ba2feb48d137756c8a9331c449a",
				Provider: "gitea", Delivery: "4b5c7f8e-1a2b-4c3d-9e8f-0a1b2c3d4e5f"},
		},
		{
			name: "Forgejo", body: readPayload(t, "gitea-push.json"),
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/json", "X-Forgejo-Event", "push",
					"X-Forgejo-Delivery", "f-1", "X-Forgejo-Signature", sig)
			},
			sign: hmacHex,
			want: structs.Push{URLs: []string{"https://gitea.example/platform/ops.git", "https://gitea.example/platform/ops", "git@gitea.example:platform/ops.git"},
				Branches: []string{"main"}, After: "bffeb74224043ba2feb48d137756c8a9331c449a", Provider: "gitea", Delivery: "f-1"},
		},
		{
			name: "Bitbucket Cloud", body: readPayload(t, "bitbucket-cloud-push.json"),
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/json", "X-Event-Key", "repo:push",
					"X-Request-UUID", "a1b2c3d4-0000-4000-8000-000000000001", "X-Hub-Signature", sig)
			},
			sign: func(b []byte) string { return "sha256=" + hmacHex(b) },
			want: structs.Push{URLs: []string{"https://bitbucket.org/acme/ops"}, Branches: []string{"main"},
				After: "7d1e5b3a9c0f2e4d6b8a1c3e5f7a9b0d2c4e6f81", Provider: "generic", Delivery: "a1b2c3d4-0000-4000-8000-000000000001"},
		},
		{
			name: "Bitbucket Server", body: readPayload(t, "bitbucket-server-push.json"),
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/json; charset=UTF-8", "X-Event-Key", "repo:refs_changed",
					"X-Request-Id", "e2b6c7a4-5f0d-4a3b-8c9e-1d2f3a4b5c6d", "X-Hub-Signature", sig)
			},
			sign: func(b []byte) string { return "sha256=" + hmacHex(b) },
			want: structs.Push{URLs: []string{"ssh://git@bitbucket.acme.example:7999/plat/ops.git", "https://bitbucket.acme.example/scm/plat/ops.git"},
				Branches: []string{"main"}, After: "178864a7d521b6f5e720b386b2c2b0ef8563e0dc",
				Provider: "generic", Delivery: "e2b6c7a4-5f0d-4a3b-8c9e-1d2f3a4b5c6d"},
		},
		{
			name: "generic", body: readPayload(t, "generic-push.json"),
			header: func(sig string) http.Header {
				return headers("Content-Type", "application/json", "X-Request-UUID", "g-1", "X-Nops-Signature", sig)
			},
			sign: func(b []byte) string { return "sha256=" + hmacHex(b) },
			want: structs.Push{URLs: []string{"https://git.acme.example/platform/ops.git"}, Branches: []string{"main"},
				After: "0e5a8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f10", Provider: "generic", Delivery: "g-1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note, err := verifyPush(tc.header(tc.sign(tc.body)), tc.body, testWebhookSecret)
			if err != nil || note != "" || got == nil {
				t.Fatalf("a signed push: %+v, note %q, error %v", got, note, err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Fatalf("push\n %+v\nwant\n %+v", *got, tc.want)
			}
			// Signed with another secret, or a signature of another body.
			forged := tc.header(tc.sign(append([]byte("x"), tc.body...)))
			if tc.name == "GitLab" {
				forged = tc.header("not-the-secret")
			}
			if p, _, err := verifyPush(forged, tc.body, testWebhookSecret); !errors.Is(err, structs.ErrUnauthorized) || p != nil {
				t.Fatalf("forged: push %+v, error %v", p, err)
			}
			unsigned := tc.header("")
			if p, _, err := verifyPush(unsigned, tc.body, testWebhookSecret); !errors.Is(err, structs.ErrUnauthorized) || p != nil {
				t.Fatalf("unsigned: push %+v, error %v", p, err)
			}
		})
	}
}

// TestVerifyPush_NothingToDo: a verified delivery that is no push of a
// branch (a ping, another event, a tag, a deleted branch) gives no push
// and says what it was; an unverified one is refused first.
func TestVerifyPush_NothingToDo(t *testing.T) {
	sha := func(b []byte) string { return "sha256=" + hmacHex(b) }
	tag := []byte(`{"ref":"refs/tags/v1","after":"8f9a6c1e2b7d4a03c5e1f0b2d9a7c6e5b4a39281","repository":{"clone_url":"https://git.example/o/r.git"}}`)
	deleted := []byte(`{"ref":"refs/heads/old","after":"0000000000000000000000000000000000000000","deleted":true,"repository":{"clone_url":"https://git.example/o/r.git"}}`)
	bbTag := []byte(`{"push":{"changes":[{"new":{"type":"tag","name":"v1","target":{"hash":"abc"}}},{"new":null}]},"repository":{"links":{"html":{"href":"https://bitbucket.org/a/b"}}}}`)
	ping := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
		want string
	}{
		{"GitHub ping", headers("X-GitHub-Event", "ping", "X-Hub-Signature-256", sha(ping)), ping, "ping"},
		{"GitHub pull request", headers("X-GitHub-Event", "pull_request", "X-Hub-Signature-256", sha(ping)), ping, "pull_request event"},
		{"GitHub tag", headers("X-GitHub-Event", "push", "X-Hub-Signature-256", sha(tag)), tag, "tag v1"},
		{"GitHub deleted branch", headers("X-GitHub-Event", "push", "X-Hub-Signature-256", sha(deleted)), deleted, "deletion of branch old"},
		{"GitLab tag push", headers("X-Gitlab-Event", "Tag Push Hook", "X-Gitlab-Token", testWebhookSecret), tag, "Tag Push Hook"},
		{"Gitea create", headers("X-Gitea-Event", "create", "X-Gitea-Signature", hmacHex(tag)), tag, "create event"},
		{"Bitbucket ping", headers("X-Event-Key", "diagnostics:ping", "X-Hub-Signature", sha(ping)), ping, "ping"},
		{"Bitbucket tag and deletion", headers("X-Event-Key", "repo:push", "X-Hub-Signature", sha(bbTag)), bbTag, "no branch"},
	} {
		p, note, err := verifyPush(tc.h, tc.body, testWebhookSecret)
		if err != nil || p != nil || !strings.Contains(note, tc.want) {
			t.Errorf("%s: push %+v, note %q, error %v; want a note with %q", tc.name, p, note, err, tc.want)
		}
	}
	// The signature is checked before the event: a forged ping is refused.
	if _, _, err := verifyPush(headers("X-GitHub-Event", "ping", "X-Hub-Signature-256", "sha256=00"), ping, testWebhookSecret); !errors.Is(err, structs.ErrUnauthorized) {
		t.Errorf("a forged ping: %v", err)
	}
}

// TestVerifyPush_Refusals: no secret configured, a SHA-1 signature, a form
// without its payload, and bodies that are no push each say what is wrong.
func TestVerifyPush_Refusals(t *testing.T) {
	body := []byte(`{"ref":"refs/heads/main","repository":{"clone_url":"https://git.example/o/r.git"}}`)
	noURL := []byte(`{"ref":"refs/heads/main"}`)
	noBranch := []byte(`{"repository":{"clone_url":"https://git.example/o/r.git"}}`)
	badRepo := []byte(`{"ref":"refs/heads/main","repository":[1]}`)
	emptyForm := []byte("other=1")
	sha := func(b []byte) string { return "sha256=" + hmacHex(b) }
	for _, tc := range []struct {
		name   string
		h      http.Header
		body   []byte
		secret string
		want   error
		says   string
	}{
		{"no secret configured", headers("X-Hub-Signature-256", sha(body)), body, "", structs.ErrNotFound, "disabled"},
		{"a SHA-1 signature", headers("X-Hub-Signature", "sha1=0123"), body, testWebhookSecret, structs.ErrUnauthorized, "HMAC-SHA256"},
		{"a form without its payload", headers("Content-Type", "application/x-www-form-urlencoded", "X-Hub-Signature-256", sha(emptyForm)), emptyForm, testWebhookSecret, structs.ErrInvalid, `"payload"`},
		{"no repository URL", headers("X-Hub-Signature-256", sha(noURL)), noURL, testWebhookSecret, structs.ErrInvalid, "no repository URL"},
		{"no branch", headers("X-Hub-Signature-256", sha(noBranch)), noBranch, testWebhookSecret, structs.ErrInvalid, "no branch"},
		{"a repository of another shape", headers("X-Hub-Signature-256", sha(badRepo)), badRepo, testWebhookSecret, structs.ErrInvalid, "repository"},
	} {
		p, note, err := verifyPush(tc.h, tc.body, tc.secret)
		if !errors.Is(err, tc.want) || p != nil || note != "" || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: push %+v, note %q, error %v; want %v saying %q", tc.name, p, note, err, tc.want, tc.says)
		}
	}
}
