package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/structs"
)

// The reconcilers' part of the HTTP API (SPEC section 10), as plain
// methods: the agent routes the requests, checks their tokens, decodes
// their input and encodes these answers. Errors wrap the structs
// sentinels (ErrNotFound, ErrInvalid, ErrUnauthorized, ErrUpstream) that
// the agent maps to status codes.

// Retry lifts the block of a job, on behalf of actor, and asks for a
// detection cycle; it returns the block as stored after the lift. It runs
// on the leader.
func (m *Manager) Retry(_ context.Context, namespace, jobID, actor string) (*structs.Block, error) {
	req := &structs.RetryRequest{WriteMeta: m.actorMeta(actor), Cluster: m.cluster, Namespace: namespace, JobID: jobID}
	if _, err := m.srv.Apply(structs.RetryRequestType, req); err != nil {
		return nil, fmt.Errorf("retry %s: %w", m.key(namespace, jobID), err)
	}
	m.TriggerDetection()
	b, err := m.srv.State().Block(m.cluster, namespace, jobID)
	if err != nil {
		return nil, fmt.Errorf("block of %s: %w", m.key(namespace, jobID), err)
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
	if err := m.applier.Promote(ctx, d); err != nil {
		return nil, err
	}
	if _, err := m.srv.Apply(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: m.actorMeta(actor), Events: []*structs.Event{{
		Kind: structs.EventKindDeployment, Object: d.ID, Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID,
		From: string(d.State), To: string(d.State), Message: "canaries promoted",
	}}}); err != nil {
		return nil, fmt.Errorf("record the promotion of %s: %w", d.ID, err)
	}
	m.TriggerApply()
	return &structs.PromoteResult{Promoted: d.ID}, nil
}

// Refresh fetches a watched repository now and returns its status as the
// watcher sees it after the fetch; ErrNotFound when it is not watched.
func (m *Manager) Refresh(ctx context.Context, name string) (*structs.RepoStatus, error) {
	if m.git == nil || !m.git.Has(name) {
		return nil, fmt.Errorf("%w: repository %q", structs.ErrNotFound, name)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := m.fetchNow(ctx, name, time.Now()); err != nil {
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
// branch or repository is ErrInvalid and changes nothing; one that no
// watched repository follows changes nothing and says so.
func (m *Manager) Push(ctx context.Context, p *structs.Push) (*structs.WebhookResult, error) {
	if p == nil || len(p.Branches) == 0 || len(p.URLs) == 0 {
		return nil, fmt.Errorf("%w: a push names a branch and a repository URL", structs.ErrInvalid)
	}
	if dup, err := m.recordDelivery(p.Provider, p.Delivery); err != nil || dup {
		return &structs.WebhookResult{Matched: []string{}, Duplicate: dup}, err
	}
	if m.git == nil {
		return &structs.WebhookResult{Matched: []string{}}, nil
	}
	matched := []string{}
	for _, b := range p.Branches {
		for _, name := range m.git.Match(p.URLs, b) {
			if !slices.Contains(matched, name) {
				matched = append(matched, name)
			}
		}
	}
	sort.Strings(matched)
	if len(matched) == 0 {
		urls := make([]string, len(p.URLs))
		for i, u := range p.URLs {
			urls[i] = gitwatch.SafeURL(u)
		}
		msg := fmt.Sprintf("no watched repository follows branch %s of %s: nothing to do",
			strings.Join(p.Branches, ", "), strings.Join(urls, ", "))
		m.logger.Info("webhook push matches no watched repository", "branches", p.Branches, "urls", urls, "delivery", p.Delivery)
		return &structs.WebhookResult{Matched: matched, Branches: p.Branches, Message: msg}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// The repositories a push matches are fetched at once: each cluster's
	// detection waits only for its own repositories' fetch, not for those
	// of the repositories named before them. Blocks on one branch of one
	// URL share a clone, and one fetch answers for all of them: each is
	// asked as of the push's receipt.
	asked := time.Now()
	var wg sync.WaitGroup
	for _, name := range matched {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.fetchNow(ctx, name, asked); err != nil {
				m.logger.Warn("webhook fetch failed", "repo", name, "delivery", p.Delivery, "error", err)
			}
		}()
	}
	wg.Wait()
	return &structs.WebhookResult{Matched: matched, Branches: p.Branches}, nil
}

// recordDelivery records the delivery ID of a verified push through Raft
// and reports whether it was already handled (SPEC §19). A push without a
// delivery ID is not recorded.
func (m *Manager) recordDelivery(provider, id string) (duplicate bool, err error) {
	if id == "" {
		return false, nil
	}
	if len(id) > structs.MaxWebhookDeliveryID {
		return false, fmt.Errorf("%w: webhook delivery ID of %d characters: at most %d", structs.ErrInvalid, len(id), structs.MaxWebhookDeliveryID)
	}
	// A replay this server's state already holds costs no log entry; one
	// that races the first delivery is refused by the FSM.
	seen, err := m.srv.State().WebhookDelivery(provider, id)
	if err != nil {
		return false, fmt.Errorf("read webhook deliveries: %w", err)
	}
	if seen == nil {
		_, err = m.srv.Apply(structs.WebhookDeliveryRequestType, &structs.WebhookDeliveryRequest{
			WriteMeta: structs.WriteMeta{Time: m.now(), Actor: "webhook"}, Provider: provider, ID: id})
	}
	if seen != nil || errors.Is(err, structs.ErrDuplicate) {
		m.logger.Info("webhook delivery already handled", "provider", provider, "delivery", id)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("record webhook delivery: %w", err)
	}
	return false, nil
}

// fetchNow fetches a repository at once, asked for at asked
// (gitwatch.Watcher.FetchNowAsked). A new head already asks for a
// detection cycle (the watcher's notification), so it asks for one only
// when the fetch failed or found the same head, so that the repository's
// status shows the outcome: a push costs one cycle, not two.
func (m *Manager) fetchNow(ctx context.Context, name string, asked time.Time) error {
	head := func() string {
		if s := m.git.Snapshot(name); s != nil {
			return s.Commit
		}
		return ""
	}
	before := head()
	err := m.git.FetchNowAsked(ctx, name, asked)
	if err != nil || head() == before {
		m.TriggerDetection()
	}
	return err
}
