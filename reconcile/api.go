package reconcile

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
)

// The reconcilers' part of the HTTP API (SPEC section 10), as plain
// methods: the agent routes the requests, checks their tokens, decodes
// their input and encodes these answers. Errors wrap the structs
// sentinels (ErrNotFound, ErrInvalid, ErrUnauthorized, ErrUpstream) that
// the agent maps to status codes.

// Jobs lists the managed jobs that are not orphans, with their active and
// last deployments, optionally of one namespace and one sync state (empty
// matches all).
func (m *Manager) Jobs(namespace string, sync structs.SyncState) ([]*structs.JobSummary, error) {
	st := m.srv.State()
	list, err := st.JobStatuses()
	if err != nil {
		return nil, fmt.Errorf("job statuses: %w", err)
	}
	reconciled, err := lastReconciled(st)
	if err != nil {
		return nil, err
	}
	out := []*structs.JobSummary{}
	for _, s := range list {
		if s.Orphan || (namespace != "" && s.Namespace != namespace) || (sync != "" && s.Sync != sync) {
			continue
		}
		sum := &structs.JobSummary{JobStatus: s, LastReconciled: reconciled}
		active, last, err := deploymentsOf(st, s.Namespace, s.JobID)
		if err != nil {
			return nil, err
		}
		sum.ActiveDeployment, sum.LastDeployment = ref(active), ref(last)
		out = append(out, sum)
	}
	return out, nil
}

// lastReconciled is when the last detection cycle finished; nil before the
// first.
func lastReconciled(st *fsm.StateStore) (*time.Time, error) {
	c, err := st.DetectionCycle()
	if err != nil {
		return nil, fmt.Errorf("read detection cycle: %w", err)
	}
	if c == nil {
		return nil, nil
	}
	t := c.FinishedAt
	return &t, nil
}

// deploymentsOf reads a job's active and last deployments (nil for none).
func deploymentsOf(st *fsm.StateStore, namespace, jobID string) (active, last *structs.Deployment, err error) {
	if active, err = st.ActiveDeployment(namespace, jobID); err != nil {
		return nil, nil, fmt.Errorf("read active deployment of %s: %w", structs.JobKey(namespace, jobID), err)
	}
	if last, err = st.LastDeployment(namespace, jobID); err != nil {
		return nil, nil, fmt.Errorf("read last deployment of %s: %w", structs.JobKey(namespace, jobID), err)
	}
	return active, last, nil
}

func ref(d *structs.Deployment) *structs.DeploymentRef {
	if d == nil {
		return nil
	}
	return &structs.DeploymentRef{ID: d.ID, State: d.State}
}

// Job returns one managed job with what holds it and its deployments
// (without their specs); ErrNotFound when Nops does not manage it.
func (m *Manager) Job(namespace, jobID string) (*structs.JobDetail, error) {
	st := m.srv.State()
	s, err := st.JobStatus(namespace, jobID)
	if err != nil {
		return nil, fmt.Errorf("job status: %w", err)
	}
	if s == nil {
		return nil, fmt.Errorf("%w: job %s is not managed by Nops", structs.ErrNotFound, structs.JobKey(namespace, jobID))
	}
	out := &structs.JobDetail{Status: s}
	active, last, err := deploymentsOf(st, namespace, jobID)
	if err != nil {
		return nil, err
	}
	if active != nil {
		out.ActiveDeployment = active.Public()
	}
	if last != nil {
		out.LastDeployment = last.Public()
	}
	b, err := st.Block(namespace, jobID)
	if err != nil {
		return nil, fmt.Errorf("read block of %s: %w", structs.JobKey(namespace, jobID), err)
	}
	if b != nil && b.Blocks(s.SpecHash, s.LiveModifyIndex) {
		out.Block = b
	}
	if out.Pause, err = st.Paused(namespace, jobID); err != nil {
		return nil, fmt.Errorf("read pause of %s: %w", structs.JobKey(namespace, jobID), err)
	}
	if out.LastReconciled, err = lastReconciled(st); err != nil {
		return nil, err
	}
	return out, nil
}

// Retry lifts the block of a job, on behalf of actor, and asks for a
// detection cycle; it returns the block as stored after the lift. It runs
// on the leader.
func (m *Manager) Retry(_ context.Context, namespace, jobID, actor string) (*structs.Block, error) {
	req := &structs.RetryRequest{WriteMeta: m.actorMeta(actor), Namespace: namespace, JobID: jobID}
	if _, err := m.srv.Apply(structs.RetryRequestType, req); err != nil {
		return nil, fmt.Errorf("retry %s: %w", structs.JobKey(namespace, jobID), err)
	}
	m.TriggerDetection()
	b, err := m.srv.State().Block(namespace, jobID)
	if err != nil {
		return nil, fmt.Errorf("block of %s: %w", structs.JobKey(namespace, jobID), err)
	}
	return b, nil
}

// PromoteDeployment promotes in Nomad the canaries of the deployment with
// ID id, records the promotion by actor in the audit log and asks for an
// apply pass. It runs on the leader.
func (m *Manager) PromoteDeployment(ctx context.Context, id, actor string) (*structs.PromoteResult, error) {
	d, err := m.srv.State().Deployment(id)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", id, err)
	}
	if d == nil {
		return nil, fmt.Errorf("%w: deployment %q", structs.ErrNotFound, id)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.Promote(ctx, d); err != nil {
		return nil, err
	}
	if _, err := m.srv.Apply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: m.actorMeta(actor), Events: []*structs.Event{{
		Kind: structs.EventKindDeployment, Object: d.ID, Namespace: d.Namespace, JobID: d.JobID,
		From: string(d.State), To: string(d.State), Message: "canaries promoted",
	}}}); err != nil {
		return nil, fmt.Errorf("record the promotion of %s: %w", d.ID, err)
	}
	m.TriggerApply()
	return &structs.PromoteResult{Promoted: d.ID}, nil
}

// Repos lists the observed status of every watched repository.
func (m *Manager) Repos() ([]*structs.RepoStatus, error) {
	list, err := m.srv.State().RepoStatuses()
	if err != nil {
		return nil, fmt.Errorf("repository statuses: %w", err)
	}
	if list == nil {
		list = []*structs.RepoStatus{}
	}
	return list, nil
}

// Refresh fetches a watched repository now and returns its status as the
// watcher sees it after the fetch; ErrNotFound when it is not watched.
func (m *Manager) Refresh(ctx context.Context, name string) (*structs.RepoStatus, error) {
	if m.git == nil || !m.git.Has(name) {
		return nil, fmt.Errorf("%w: repository %q", structs.ErrNotFound, name)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
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
	return nil, fmt.Errorf("%w: repository %q is no longer watched", structs.ErrNotFound, name)
}

// Orphans lists the jobs Nops deployed that git no longer declares.
func (m *Manager) Orphans() ([]*structs.JobStatus, error) {
	list, err := m.srv.State().JobStatuses()
	if err != nil {
		return nil, fmt.Errorf("job statuses: %w", err)
	}
	out := []*structs.JobStatus{}
	for _, s := range list {
		if s.Orphan {
			out = append(out, s)
		}
	}
	return out, nil
}

// Cycle returns the last completed detection cycle; ErrNotFound before the
// first.
func (m *Manager) Cycle() (*structs.DetectionCycle, error) {
	c, err := m.srv.State().DetectionCycle()
	if err != nil {
		return nil, fmt.Errorf("detection cycle: %w", err)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: no detection cycle has completed yet", structs.ErrNotFound)
	}
	return c, nil
}

// actorMeta stamps a write of the API with the manager's clock and the actor
// the agent established for the request.
func (m *Manager) actorMeta(actor string) structs.WriteMeta {
	if actor == "" {
		actor = "anonymous"
	}
	return structs.WriteMeta{Time: m.now(), Actor: actor}
}

// Webhook takes a push from GitHub, Gitea, GitLab or a generic sender: its
// headers and its whole body (the agent bounds its size). It verifies the
// signature (ErrUnauthorized when it does not match) and, for a watched
// branch, fetches at once and runs detection. A refused push changes
// nothing; ErrNotFound while no webhook secret is configured.
func (m *Manager) Webhook(ctx context.Context, h http.Header, body []byte) (*structs.WebhookResult, error) {
	if m.cfg.WebhookSecret == "" {
		return nil, fmt.Errorf("%w: the git webhook is disabled: set webhook { secret_env = ... } in the server configuration", structs.ErrNotFound)
	}
	if err := verifySignature(h, body, m.cfg.WebhookSecret); err != nil {
		return nil, fmt.Errorf("%w: %w", structs.ErrUnauthorized, err)
	}
	push, err := parsePush(h, body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", structs.ErrInvalid, err)
	}
	if m.git == nil {
		return &structs.WebhookResult{Matched: []string{}}, nil
	}
	matched := m.git.Match(push.urls, push.branch)
	if matched == nil {
		matched = []string{}
	}
	sort.Strings(matched)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, name := range matched {
		if err := m.fetchNow(ctx, name); err != nil {
			m.logger.Warn("webhook fetch failed", "repo", name, "error", err)
		}
	}
	return &structs.WebhookResult{Matched: matched, Branch: push.branch}, nil
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
