package agenthttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// The git webhook's request side: the agent proves the sender with the
// push's signature and parses its body, so that the reconcilers receive
// only a verified push (structs.Push) and never a request.

// verifyPush checks a push's signature against secret and parses its body.
// It answers ErrNotFound while no secret is configured, ErrUnauthorized for
// a missing or wrong signature, and ErrInvalid for a body that is not a
// push to a branch.
func verifyPush(h http.Header, body []byte, secret string) (*structs.Push, error) {
	if secret == "" {
		return nil, fmt.Errorf("%w: the git webhook is disabled: set webhook { secret_env = ... } in the server configuration", structs.ErrNotFound)
	}
	if err := verifySignature(h, body, secret); err != nil {
		return nil, fmt.Errorf("%w: %w", structs.ErrUnauthorized, err)
	}
	p, err := parsePush(h, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", structs.ErrInvalid, err)
	}
	return p, nil
}

// verifySignature checks a push's signature against the secret: the
// HMAC-SHA256 of the body in a GitHub, Gitea or Nops header, or GitLab's
// shared token, each compared in constant time.
func verifySignature(h http.Header, body []byte, secret string) error {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	want := mac.Sum(nil)
	check := func(hexSig string) error {
		got, err := hex.DecodeString(strings.TrimSpace(hexSig))
		if err != nil || !hmac.Equal(got, want) {
			return fmt.Errorf("webhook signature does not match")
		}
		return nil
	}
	switch {
	case h.Get("X-Hub-Signature-256") != "":
		return check(strings.TrimPrefix(h.Get("X-Hub-Signature-256"), "sha256="))
	case h.Get("X-Gitea-Signature") != "":
		return check(h.Get("X-Gitea-Signature"))
	case h.Get("X-Nops-Signature") != "":
		return check(strings.TrimPrefix(h.Get("X-Nops-Signature"), "sha256="))
	case h.Get("X-Gitlab-Token") != "":
		// GitLab sends the shared secret itself.
		if subtle.ConstantTimeCompare([]byte(h.Get("X-Gitlab-Token")), []byte(secret)) != 1 {
			return fmt.Errorf("webhook token does not match")
		}
		return nil
	}
	return fmt.Errorf("webhook carries no signature (X-Hub-Signature-256, X-Gitea-Signature, X-Gitlab-Token or X-Nops-Signature)")
}

// pushBody is what the providers' push events share: GitHub and Gitea name
// the repository, GitLab the project; a generic sender may give a branch
// and a URL.
type pushBody struct {
	Ref        string `json:"ref"`
	Branch     string `json:"branch"`
	After      string `json:"after"`
	Repository struct {
		CloneURL string `json:"clone_url"`
		HTMLURL  string `json:"html_url"`
		SSHURL   string `json:"ssh_url"`
		URL      string `json:"url"`
	} `json:"repository"`
	Project struct {
		HTTPURL string `json:"git_http_url"`
		SSHURL  string `json:"git_ssh_url"`
		WebURL  string `json:"web_url"`
	} `json:"project"`
	URL string `json:"url"`
}

// parsePush reads a push event: it must name a branch (not a tag) and at
// least one repository URL.
func parsePush(h http.Header, body []byte) (*structs.Push, error) {
	var p pushBody
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("webhook body is not a push event: %w", err)
	}
	out := &structs.Push{Branch: strings.TrimPrefix(p.Ref, "refs/heads/"), After: p.After}
	if p.Branch != "" {
		out.Branch = p.Branch
	}
	for _, u := range []string{p.Repository.CloneURL, p.Repository.HTMLURL, p.Repository.SSHURL, p.Repository.URL,
		p.Project.HTTPURL, p.Project.SSHURL, p.Project.WebURL, p.URL} {
		if u != "" {
			out.URLs = append(out.URLs, u)
		}
	}
	if out.Branch == "" || strings.HasPrefix(p.Ref, "refs/tags/") {
		return nil, fmt.Errorf("webhook names no branch (ref %q)", p.Ref)
	}
	if len(out.URLs) == 0 {
		return nil, fmt.Errorf("webhook names no repository URL")
	}
	out.Provider, out.Delivery = deliveryID(h)
	return out, nil
}

// deliveryID returns the provider and the ID of the delivery a push
// carries (SPEC §19), or two empty strings.
func deliveryID(h http.Header) (provider, id string) {
	for _, p := range []struct{ provider, header string }{
		{"github", "X-GitHub-Delivery"},
		{"gitlab", "X-Gitlab-Event-UUID"},
		{"gitea", "X-Gitea-Delivery"},
		{"generic", "X-Request-UUID"},
	} {
		if v := strings.TrimSpace(h.Get(p.header)); v != "" {
			return p.provider, v
		}
	}
	return "", ""
}
