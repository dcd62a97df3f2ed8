package agenthttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// The git webhook's request side: the agent proves the sender with the
// push's signature and parses its body, so that the reconcilers receive
// only a verified push (structs.Push) and never a request.
//
// Providers (SPEC §19), told apart by their headers:
//
//	GitHub          X-Hub-Signature-256 (HMAC-SHA256), X-GitHub-Event, X-GitHub-Delivery;
//	                JSON or application/x-www-form-urlencoded (payload=…) bodies
//	GitLab          X-Gitlab-Token (the secret itself), X-Gitlab-Event, X-Gitlab-Event-UUID
//	Gitea, Forgejo  X-Gitea-Signature or X-Forgejo-Signature (hex HMAC-SHA256), X-Gitea-Event, X-Gitea-Delivery
//	Bitbucket       X-Hub-Signature (sha256=, HMAC-SHA256), X-Event-Key; Cloud's repo:push
//	                (X-Request-UUID) and Server's repo:refs_changed (X-Request-Id)
//	generic         X-Nops-Signature ([sha256=]hex, HMAC-SHA256), X-Request-UUID;
//	                {"repository": URL or name, "ref", "after"}
//
// A verified delivery that is not a push to a branch (a ping, another
// event, a tag, a deleted branch) is answered 200 with what it was, and
// changes nothing: a provider shows any other answer as a failed delivery.

// formPayloadField is the form field a GitHub form delivery carries its
// payload in (the route's body limit bounds the body itself).
const formPayloadField = "payload"

// verifyPush checks a push's signature against secret and parses its body.
// It answers ErrNotFound while no secret is configured, ErrUnauthorized for
// a missing or wrong signature, and ErrInvalid for a body that is not a
// push event. A verified delivery that is nothing to act on gives no push
// and a note that says what it was.
func verifyPush(h http.Header, body []byte, secret string) (push *structs.Push, note string, err error) {
	if secret == "" {
		return nil, "", fmt.Errorf("%w: the git webhook is disabled: set webhook { secret_env = ... } in the server configuration", structs.ErrNotFound)
	}
	if err := verifySignature(h, body, secret); err != nil {
		return nil, "", fmt.Errorf("%w: %w", structs.ErrUnauthorized, err)
	}
	p, note, err := parsePush(h, body)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", structs.ErrInvalid, err)
	}
	return p, note, nil
}

// verifySignature checks a push's signature against the secret: the
// HMAC-SHA256 of the body in a GitHub, Bitbucket, Gitea, Forgejo or Nops
// header, or GitLab's shared token, each compared in constant time.
func verifySignature(h http.Header, body []byte, secret string) error {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	want := mac.Sum(nil)
	check := func(header, hexSig string) error {
		got, err := hex.DecodeString(strings.TrimSpace(hexSig))
		if err != nil || !hmac.Equal(got, want) {
			return fmt.Errorf("webhook signature (%s) does not match", header)
		}
		return nil
	}
	prefixed := func(header string) error {
		v := strings.TrimSpace(h.Get(header))
		algo, sig, ok := strings.Cut(v, "=")
		if !ok || algo != "sha256" {
			return fmt.Errorf("webhook signature (%s) is not sha256=<hex>: configure the sender to sign with HMAC-SHA256", header)
		}
		return check(header, sig)
	}
	switch {
	case h.Get("X-Hub-Signature-256") != "":
		return prefixed("X-Hub-Signature-256")
	case h.Get("X-Gitea-Signature") != "":
		return check("X-Gitea-Signature", h.Get("X-Gitea-Signature"))
	case h.Get("X-Forgejo-Signature") != "":
		return check("X-Forgejo-Signature", h.Get("X-Forgejo-Signature"))
	case h.Get("X-Hub-Signature") != "":
		// Bitbucket Cloud and Server sign with HMAC-SHA256 under the
		// name GitHub gave its SHA-1 signature.
		return prefixed("X-Hub-Signature")
	case h.Get("X-Nops-Signature") != "":
		// sha256=<hex>, or the bare hex earlier releases documented.
		return check("X-Nops-Signature", strings.TrimPrefix(strings.TrimSpace(h.Get("X-Nops-Signature")), "sha256="))
	case h.Get("X-Gitlab-Token") != "":
		// GitLab sends the shared secret itself.
		if subtle.ConstantTimeCompare([]byte(h.Get("X-Gitlab-Token")), []byte(secret)) != 1 {
			return fmt.Errorf("webhook token (X-Gitlab-Token) does not match")
		}
		return nil
	}
	return fmt.Errorf("webhook carries no signature (X-Hub-Signature-256, X-Hub-Signature, X-Gitea-Signature, X-Forgejo-Signature, X-Gitlab-Token or X-Nops-Signature)")
}

// pushBody is what the providers' push events share: GitHub, Gitea and
// Bitbucket name the repository, GitLab the project too; Bitbucket lists
// its changes of refs; a generic sender gives the repository as a string.
type pushBody struct {
	Ref     string `json:"ref"`
	Branch  string `json:"branch"`
	After   string `json:"after"`
	Deleted bool   `json:"deleted"`
	// Repository is an object, or a generic sender's URL or name.
	Repository json.RawMessage `json:"repository"`
	Project    struct {
		HTTPURL string `json:"git_http_url"`
		SSHURL  string `json:"git_ssh_url"`
		WebURL  string `json:"web_url"`
	} `json:"project"`
	URL string `json:"url"`
	// Push is Bitbucket Cloud's list of changed refs.
	Push struct {
		Changes []struct {
			New *struct {
				Type   string `json:"type"`
				Name   string `json:"name"`
				Target struct {
					Hash string `json:"hash"`
				} `json:"target"`
			} `json:"new"`
		} `json:"changes"`
	} `json:"push"`
	// Changes is Bitbucket Server's list of changed refs.
	Changes []struct {
		RefID  string `json:"refId"`
		ToHash string `json:"toHash"`
		Type   string `json:"type"`
	} `json:"changes"`
}

// repositoryBody is a provider's repository object.
type repositoryBody struct {
	CloneURL string `json:"clone_url"`
	HTMLURL  string `json:"html_url"`
	SSHURL   string `json:"ssh_url"`
	URL      string `json:"url"`
	HTTPURL  string `json:"git_http_url"`
	GitSSH   string `json:"git_ssh_url"`
	Homepage string `json:"homepage"`
	Links    struct {
		HTML struct {
			Href string `json:"href"`
		} `json:"html"`
		Clone []struct {
			Href string `json:"href"`
		} `json:"clone"`
	} `json:"links"`
}

// zeroCommit is the "after" of a push that deleted its branch.
const zeroCommit = "0000000000000000000000000000000000000000"

// parsePush reads a delivery: a push to at least one branch, naming at
// least one repository URL (or, from a generic sender, a repository's
// name); or a note saying what else it was.
func parsePush(h http.Header, body []byte) (*structs.Push, string, error) {
	if note := notAPush(h); note != "" {
		return nil, note, nil
	}
	body, err := payloadOf(h, body)
	if err != nil {
		return nil, "", err
	}
	var p pushBody
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, "", fmt.Errorf("webhook body is not a push event: %w", err)
	}
	out := &structs.Push{After: p.After}
	urls, err := repositoryURLs(p)
	if err != nil {
		return nil, "", err
	}
	out.URLs = urls
	switch {
	case len(p.Push.Changes) > 0: // Bitbucket Cloud
		for _, c := range p.Push.Changes {
			if c.New != nil && c.New.Type == "branch" && c.New.Name != "" {
				out.Branches = append(out.Branches, c.New.Name)
				out.After = c.New.Target.Hash
			}
		}
	case len(p.Changes) > 0: // Bitbucket Server
		for _, c := range p.Changes {
			if b, ok := strings.CutPrefix(c.RefID, "refs/heads/"); ok && b != "" && c.Type != "DELETE" {
				out.Branches = append(out.Branches, b)
				out.After = c.ToHash
			}
		}
	case p.Branch != "":
		out.Branches = []string{p.Branch}
	default:
		if b, ok := strings.CutPrefix(p.Ref, "refs/heads/"); ok && b != "" {
			if p.Deleted || p.After == zeroCommit {
				return nil, fmt.Sprintf("a deletion of branch %s: nothing to fetch", b), nil
			}
			out.Branches = []string{b}
		} else if t, ok := strings.CutPrefix(p.Ref, "refs/tags/"); ok {
			return nil, fmt.Sprintf("a push of tag %s: Nops follows branches, nothing to do", t), nil
		} else if p.Ref != "" && !strings.HasPrefix(p.Ref, "refs/") {
			out.Branches = []string{p.Ref}
		}
	}
	if len(out.Branches) == 0 {
		if len(p.Push.Changes) > 0 || len(p.Changes) > 0 {
			return nil, "a push of no branch (tags, or deleted branches): nothing to do", nil
		}
		return nil, "", fmt.Errorf("webhook names no branch (ref %q)", p.Ref)
	}
	if len(out.Branches) > 1 {
		out.After = "" // one commit per branch; the fetch finds each
	}
	if len(out.URLs) == 0 {
		return nil, "", fmt.Errorf("webhook names no repository URL")
	}
	out.Provider, out.Delivery = deliveryID(h)
	return out, "", nil
}

// payloadOf returns the JSON of a delivery: its body, or the payload field
// of a form delivery (GitHub's application/x-www-form-urlencoded).
func payloadOf(h http.Header, body []byte) ([]byte, error) {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	if mt != "application/x-www-form-urlencoded" {
		return body, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("webhook form body: %w", err)
	}
	payload := form.Get(formPayloadField)
	if payload == "" {
		return nil, fmt.Errorf("webhook form body has no %q field", formPayloadField)
	}
	return []byte(payload), nil
}

// repositoryURLs returns the repository URLs a push names: the provider's
// repository object and GitLab's project, or a generic sender's string.
func repositoryURLs(p pushBody) ([]string, error) {
	var out []string
	add := func(us ...string) {
		for _, u := range us {
			if u = strings.TrimSpace(u); u != "" && !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	if raw := strings.TrimSpace(string(p.Repository)); raw != "" && raw != "null" {
		if strings.HasPrefix(raw, `"`) {
			var s string
			if err := json.Unmarshal(p.Repository, &s); err != nil {
				return nil, fmt.Errorf("webhook repository: %w", err)
			}
			add(s)
		} else {
			var r repositoryBody
			if err := json.Unmarshal(p.Repository, &r); err != nil {
				return nil, fmt.Errorf("webhook repository is neither a URL nor a repository object: %w", err)
			}
			add(r.CloneURL, r.HTMLURL, r.SSHURL, r.URL, r.HTTPURL, r.GitSSH, r.Homepage, r.Links.HTML.Href)
			for _, c := range r.Links.Clone {
				add(c.Href)
			}
		}
	}
	add(p.Project.HTTPURL, p.Project.SSHURL, p.Project.WebURL, p.URL)
	return out, nil
}

// notAPush returns what a delivery is when its provider's event header
// says it is not a push of branches (a ping, a tag push, another event),
// or "" for a push or a sender that names no event.
func notAPush(h http.Header) string {
	if e := h.Get("X-GitHub-Event"); e != "" && e != "push" {
		if e == "ping" {
			return "ping: the webhook reaches Nops"
		}
		return fmt.Sprintf("a GitHub %s event: Nops acts on push events only", e)
	}
	if e := h.Get("X-Gitlab-Event"); e != "" && e != "Push Hook" {
		return fmt.Sprintf("a GitLab %s: Nops acts on push events of branches only", e)
	}
	for _, header := range []string{"X-Gitea-Event", "X-Forgejo-Event", "X-Gogs-Event"} {
		if e := h.Get(header); e != "" && e != "push" {
			return fmt.Sprintf("a %s event: Nops acts on push events only", e)
		}
	}
	if e := h.Get("X-Event-Key"); e != "" && e != "repo:push" && e != "repo:refs_changed" {
		if e == "diagnostics:ping" {
			return "ping: the webhook reaches Nops"
		}
		return fmt.Sprintf("a Bitbucket %s event: Nops acts on repo:push and repo:refs_changed only", e)
	}
	return ""
}

// deliveryID returns the provider and the ID of the delivery a push
// carries (SPEC §19), or two empty strings. Bitbucket's IDs (X-Request-UUID,
// X-Request-Id) are UUIDs, recorded under "generic", as the replicated
// table knows GitHub, GitLab, Gitea and generic senders.
func deliveryID(h http.Header) (provider, id string) {
	for _, p := range []struct{ provider, header string }{
		{"github", "X-GitHub-Delivery"},
		{"gitlab", "X-Gitlab-Event-UUID"},
		{"gitea", "X-Gitea-Delivery"},
		{"gitea", "X-Forgejo-Delivery"},
		{"generic", "X-Request-UUID"},
		{"generic", "X-Request-Id"},
	} {
		if v := strings.TrimSpace(h.Get(p.header)); v != "" {
			return p.provider, v
		}
	}
	return "", ""
}
