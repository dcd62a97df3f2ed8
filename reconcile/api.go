package reconcile

import (
	"context"
	"fmt"
	"sort"
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

// Push takes a git push the agent verified: for a watched repository and
// branch, it fetches at once and runs detection. A push that names no
// branch or repository is ErrInvalid and changes nothing.
func (m *Manager) Push(ctx context.Context, p *structs.Push) (*structs.WebhookResult, error) {
	if p == nil || p.Branch == "" || len(p.URLs) == 0 {
		return nil, fmt.Errorf("%w: a push names a branch and a repository URL", structs.ErrInvalid)
	}
	if m.git == nil {
		return &structs.WebhookResult{Matched: []string{}}, nil
	}
	matched := m.git.Match(p.URLs, p.Branch)
	if matched == nil {
		matched = []string{}
	}
	sort.Strings(matched)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, name := range matched {
		if err := m.fetchNow(ctx, name); err != nil {
			m.logger.Warn("webhook fetch failed", "repo", name, "delivery", p.Delivery, "error", err)
		}
	}
	return &structs.WebhookResult{Matched: matched, Branch: p.Branch}, nil
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
