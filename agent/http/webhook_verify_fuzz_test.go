package agenthttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
)

// FuzzWebhookPayload sends arbitrary push bodies and signatures through the
// webhook's checks: never a panic; a forged signature never passes and a
// right one always does, for every provider's header; a body that parses
// names a branch and a repository URL.
func FuzzWebhookPayload(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main","after":"abc","repository":{"clone_url":"https://git.example/o/r.git"}}`), uint8(0), "sha256=00")
	f.Add([]byte(`{"ref":"refs/heads/main","project":{"git_http_url":"https://gitlab.example/o/r.git"}}`), uint8(3), "secret")
	f.Add([]byte(`{"ref":"refs/tags/v1","repository":{"ssh_url":"git@git.example:o/r.git"}}`), uint8(1), "")
	f.Add([]byte(`{"branch":"dev","url":"https://git.example/o/r"}`), uint8(2), "sha256=zz")
	f.Add([]byte(`[1,2,3]`), uint8(0), "sha256=")
	f.Add([]byte(`{"push":{"changes":[{"new":{"type":"branch","name":"main","target":{"hash":"abc"}}}]},"repository":{"links":{"html":{"href":"https://bitbucket.org/a/b"}}}}`), uint8(4), "sha256=00")
	f.Add([]byte(`{"changes":[{"refId":"refs/heads/main","toHash":"abc","type":"UPDATE"}],"repository":{"links":{"clone":[{"href":"https://b.example/scm/p/r.git"}]}}}`), uint8(5), "00")
	f.Add([]byte(`{"repository":"ops","ref":"main","after":"abc"}`), uint8(2), "sha256=00")
	f.Add([]byte(`{"ref":`), uint8(0), "\x00")
	const secret = "webhook-secret"
	names := []string{"X-Hub-Signature-256", "X-Gitea-Signature", "X-Nops-Signature", "X-Gitlab-Token", "X-Hub-Signature", "X-Forgejo-Signature"}
	f.Fuzz(func(t *testing.T, body []byte, kind uint8, sig string) {
		name := names[int(kind)%len(names)]
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		right := hex.EncodeToString(mac.Sum(nil))

		h := http.Header{}
		h.Set(name, sig)
		err := verifySignature(h, body, secret)
		if err == nil {
			given := strings.TrimPrefix(strings.TrimSpace(h.Get(name)), "sha256=")
			if name == "X-Gitlab-Token" {
				if h.Get(name) != secret {
					t.Fatalf("GitLab token %q passed", sig)
				}
			} else if !strings.EqualFold(given, right) {
				t.Fatalf("a forged %s %q passed", name, sig)
			}
		}
		good := http.Header{}
		switch name {
		case "X-Gitlab-Token":
			good.Set(name, secret)
		case "X-Gitea-Signature", "X-Forgejo-Signature":
			good.Set(name, right)
		default:
			good.Set(name, "sha256="+right)
		}
		if err := verifySignature(good, body, secret); err != nil {
			t.Fatalf("a right %s was refused: %v", name, err)
		}

		p, note, err := parsePush(good, body)
		if err != nil || note != "" {
			if p != nil {
				t.Fatalf("a push %+v came with note %q or error %v", p, note, err)
			}
			return
		}
		if len(p.Branches) == 0 || len(p.URLs) == 0 {
			t.Fatalf("a push without a branch or a URL was accepted: %+v", p)
		}
		for _, b := range p.Branches {
			if b == "" {
				t.Fatalf("a push of an empty branch name was accepted: %+v", p)
			}
		}
	})
}
