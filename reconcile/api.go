package reconcile

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nops-dev/nops/structs"
)

// RouteAdder adds an API route; write routes run on the leader.
type RouteAdder = func(pattern string, write bool, fn func(w http.ResponseWriter, r *http.Request) (any, error))

// JobDetail is the answer of GET /v1/job/{ns}/{id}.
type JobDetail struct {
	Status           *structs.JobStatus  `json:"status"`
	ActiveDeployment *structs.Deployment `json:"active_deployment"`
	LastDeployment   *structs.Deployment `json:"last_deployment"`
	Block            *structs.Block      `json:"block"`
	Pause            *structs.Pause      `json:"pause"`
	LastReconciled   *time.Time          `json:"last_reconciled"`
}

// Routes adds the reconcilers' API routes.
func (m *Manager) Routes(add RouteAdder) {
	add("GET /v1/jobs", false, m.httpJobs)
	add("GET /v1/job/{ns}/{id}", false, m.httpJob)
	add("POST /v1/job/{ns}/{id}/retry", true, m.httpRetry)
	add("POST /v1/deployment/{id}/promote", true, m.httpPromote)
	add("GET /v1/deployment/{id}/nomad", false, m.httpNomadHealth)
	add("GET /v1/repos", false, m.httpRepos)
	add("POST /v1/repo/{name}/refresh", true, m.httpRefresh)
	add("GET /v1/orphans", false, m.httpOrphans)
	add("GET /v1/status/cycle", false, m.httpCycle)
	add("POST /v1/webhook/git", true, m.httpWebhook)
}

// DeploymentRef names a deployment and its state.
type DeploymentRef struct {
	ID    string                  `json:"id"`
	State structs.DeploymentState `json:"state"`
}

// JobSummary is one job of GET /v1/jobs: its observed status with its
// active and last deployments and when the leader last reconciled it.
type JobSummary struct {
	*structs.JobStatus
	ActiveDeployment *DeploymentRef `json:"active_deployment"`
	LastDeployment   *DeploymentRef `json:"last_deployment"`
	LastReconciled   *time.Time     `json:"last_reconciled"`
}

func ref(d *structs.Deployment) *DeploymentRef {
	if d == nil {
		return nil
	}
	return &DeploymentRef{ID: d.ID, State: d.State}
}

func (m *Manager) httpJobs(_ http.ResponseWriter, r *http.Request) (any, error) {
	st := m.srv.State()
	list, err := st.JobStatuses()
	if err != nil {
		return nil, err
	}
	var reconciled *time.Time
	if c, err := st.DetectionCycle(); err == nil && c != nil {
		t := c.FinishedAt
		reconciled = &t
	}
	q := r.URL.Query()
	out := []*JobSummary{}
	for _, s := range list {
		if s.Orphan || (q.Get("namespace") != "" && s.Namespace != q.Get("namespace")) ||
			(q.Get("sync") != "" && string(s.Sync) != q.Get("sync")) {
			continue
		}
		sum := &JobSummary{JobStatus: s, LastReconciled: reconciled}
		if d, err := st.ActiveDeployment(s.Namespace, s.JobID); err == nil {
			sum.ActiveDeployment = ref(d)
		}
		if d, err := st.LastDeployment(s.Namespace, s.JobID); err == nil {
			sum.LastDeployment = ref(d)
		}
		out = append(out, sum)
	}
	return out, nil
}

func (m *Manager) httpJob(_ http.ResponseWriter, r *http.Request) (any, error) {
	st := m.srv.State()
	namespace, jobID := r.PathValue("ns"), r.PathValue("id")
	s, err := st.JobStatus(namespace, jobID)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("%w: job %s is not managed by Nops", structs.ErrNotFound, structs.JobKey(namespace, jobID))
	}
	out := &JobDetail{Status: s}
	if d, err := st.ActiveDeployment(namespace, jobID); err == nil && d != nil {
		out.ActiveDeployment = d.Public()
	}
	if d, err := st.LastDeployment(namespace, jobID); err == nil && d != nil {
		out.LastDeployment = d.Public()
	}
	if b, err := st.Block(namespace, jobID); err == nil && b != nil && b.Blocks(s.SpecHash, s.LiveModifyIndex) {
		out.Block = b
	}
	if p, err := st.Paused(namespace, jobID); err == nil {
		out.Pause = p
	}
	if c, err := st.DetectionCycle(); err == nil && c != nil {
		t := c.FinishedAt
		out.LastReconciled = &t
	}
	return out, nil
}

func (m *Manager) httpRetry(_ http.ResponseWriter, r *http.Request) (any, error) {
	req := &structs.RetryRequest{WriteMeta: actorMeta(r, m.now()), Namespace: r.PathValue("ns"), JobID: r.PathValue("id")}
	if _, err := m.srv.Apply(structs.RetryRequestType, req); err != nil {
		return nil, err
	}
	m.TriggerDetection()
	return m.srv.State().Block(req.Namespace, req.JobID)
}

func (m *Manager) httpPromote(_ http.ResponseWriter, r *http.Request) (any, error) {
	d, err := m.srv.State().Deployment(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("%w: deployment %q", structs.ErrNotFound, r.PathValue("id"))
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := m.Promote(ctx, d); err != nil {
		return nil, err
	}
	meta := actorMeta(r, m.now())
	if _, err := m.srv.Apply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: meta, Events: []*structs.Event{{
		Kind: structs.EventKindDeployment, Object: d.ID, Namespace: d.Namespace, JobID: d.JobID,
		From: string(d.State), To: string(d.State), Message: "canaries promoted",
	}}}); err != nil {
		return nil, err
	}
	m.TriggerApply()
	return map[string]string{"promoted": d.ID}, nil
}

func (m *Manager) httpRepos(_ http.ResponseWriter, _ *http.Request) (any, error) {
	list, err := m.srv.State().RepoStatuses()
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []*structs.RepoStatus{}
	}
	return list, nil
}

func (m *Manager) httpRefresh(_ http.ResponseWriter, r *http.Request) (any, error) {
	name := r.PathValue("name")
	if m.git == nil || !m.git.Has(name) {
		return nil, fmt.Errorf("%w: repository %q", structs.ErrNotFound, name)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := m.fetchNow(ctx, name); err != nil {
		return nil, fmt.Errorf("fetch %s: %w", name, err)
	}
	for _, s := range m.git.Status() {
		if s.Name == name {
			return &structs.RepoStatus{Name: s.Name, URL: s.URL, Branch: s.Branch, Path: s.Path, Head: s.Head,
				LastFetch: s.LastFetch.UTC(), FetchError: s.LastError, Files: s.Files}, nil
		}
	}
	return nil, nil
}

func (m *Manager) httpOrphans(_ http.ResponseWriter, _ *http.Request) (any, error) {
	list, err := m.srv.State().JobStatuses()
	if err != nil {
		return nil, err
	}
	out := []*structs.JobStatus{}
	for _, s := range list {
		if s.Orphan {
			out = append(out, s)
		}
	}
	return out, nil
}

func (m *Manager) httpCycle(_ http.ResponseWriter, _ *http.Request) (any, error) {
	c, err := m.srv.State().DetectionCycle()
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("%w: no detection cycle has completed yet", structs.ErrNotFound)
	}
	return c, nil
}

func actorMeta(r *http.Request, now time.Time) structs.WriteMeta {
	actor := strings.TrimSpace(r.Header.Get("X-Nops-Actor"))
	if actor == "" {
		actor = "anonymous"
	}
	if len(actor) > 128 {
		actor = actor[:128]
	}
	return structs.WriteMeta{Time: now.UTC(), Actor: actor}
}

// httpWebhook takes a push from GitHub, Gitea, GitLab or a generic sender,
// verifies its signature and, for a watched branch, fetches at once and
// runs detection. A bad signature changes nothing.
func (m *Manager) httpWebhook(_ http.ResponseWriter, r *http.Request) (any, error) {
	if m.cfg.WebhookSecret == "" {
		return nil, fmt.Errorf("%w: the git webhook is disabled: set webhook { secret_env = ... } in the server configuration", structs.ErrNotFound)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &tooLarge{limit: mbe.Limit}
		}
		return nil, fmt.Errorf("%w: read body: %v", structs.ErrInvalid, err)
	}
	if err := verifySignature(r.Header, body, m.cfg.WebhookSecret); err != nil {
		m.logger.Warn("webhook refused", "remote", r.RemoteAddr, "error", err)
		return nil, &unauthorized{msg: err.Error()}
	}
	push, err := parsePush(r.Header, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", structs.ErrInvalid, err)
	}
	if m.git == nil {
		return map[string]any{"matched": []string{}}, nil
	}
	matched := m.git.Match(push.urls, push.branch)
	sort.Strings(matched)
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	for _, name := range matched {
		if err := m.fetchNow(ctx, name); err != nil {
			m.logger.Warn("webhook fetch failed", "repo", name, "error", err)
		}
	}
	return map[string]any{"matched": matched, "branch": push.branch}, nil
}

// fetchNow fetches a repository at once. A new head already asks for a
// detection cycle (the watcher's notification), so it asks for one only
// when the fetch failed or found the same head, so that the repository's
// status shows the outcome: a push costs one cycle, not two.
func (m *Manager) fetchNow(ctx context.Context, name string) error {
	head := func() string {
		if s := m.git.Snapshot(name); s != nil {
			return s.Commit
		}
		return ""
	}
	before := head()
	err := m.git.FetchNow(ctx, name)
	if err != nil || head() == before {
		m.TriggerDetection()
	}
	return err
}

// tooLarge answers 413.
type tooLarge struct{ limit int64 }

func (e *tooLarge) Error() string {
	return fmt.Sprintf("request body too large: the limit is %d bytes", e.limit)
}
func (e *tooLarge) StatusCode() int { return http.StatusRequestEntityTooLarge }

// unauthorized answers 401.
type unauthorized struct{ msg string }

func (u *unauthorized) Error() string   { return u.msg }
func (u *unauthorized) StatusCode() int { return http.StatusUnauthorized }

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

type push struct {
	branch string
	urls   []string
}

func parsePush(h http.Header, body []byte) (*push, error) {
	var p struct {
		Ref        string `json:"ref"`
		Branch     string `json:"branch"`
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
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("webhook body is not a push event: %v", err)
	}
	out := &push{branch: strings.TrimPrefix(p.Ref, "refs/heads/")}
	if p.Branch != "" {
		out.branch = p.Branch
	}
	for _, u := range []string{p.Repository.CloneURL, p.Repository.HTMLURL, p.Repository.SSHURL, p.Repository.URL,
		p.Project.HTTPURL, p.Project.SSHURL, p.Project.WebURL, p.URL} {
		if u != "" {
			out.urls = append(out.urls, u)
		}
	}
	if out.branch == "" || strings.HasPrefix(p.Ref, "refs/tags/") {
		return nil, fmt.Errorf("webhook names no branch (ref %q)", p.Ref)
	}
	if len(out.urls) == 0 {
		return nil, fmt.Errorf("webhook names no repository URL")
	}
	return out, nil
}
