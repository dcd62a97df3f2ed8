package reconcile

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// record writes what the cycle saw (step 9): the statuses of jobs whose
// declaration is invalid or duplicated, the end of the waiting deployments
// of jobs git no longer manages, every changed status, and the cycle.
func (m *Detector) record(ctx context.Context, c *cycle) error {
	for key, errs := range c.problems {
		if _, ok := c.statuses[key]; ok {
			continue
		}
		c.statuses[key] = errs
	}
	for key, s := range c.conflicts {
		c.statuses[key] = s
	}
	if err := m.supersedeUnmanaged(c.managed, c.conflicts, c.problems, c.incomplete); err != nil {
		return err
	}
	if err := m.recordStatuses(ctx, c.statuses, c.live, c.incomplete, c.now); err != nil {
		return err
	}
	if _, err := m.srv.Apply(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{
		WriteMeta: m.meta(),
		Cycle: &structs.DetectionCycle{Cluster: m.cluster, Leader: m.srv.NodeID(), StartedAt: c.started, FinishedAt: m.now(),
			Jobs: c.res.jobs, Drifted: c.res.drifted, Created: c.res.created},
	}); err != nil {
		return fmt.Errorf("record detection cycle: %w", err)
	}
	return nil
}

// settle ends a waiting deployment (superseded or completed). When the
// deployment moved on before it could (an approval, a rejection, the
// apply loop starting it), it reports moved and returns the job's active
// deployment then: nil, or the one that moved on, which then runs.
func (m *Detector) settle(d *structs.Deployment, to structs.DeploymentState, reason string) (moved bool, after *structs.Deployment, err error) {
	err = m.transition(d, to, reason, "")
	if err == nil {
		return false, nil, nil
	}
	if !errors.Is(err, structs.ErrConflict) {
		return false, nil, err
	}
	m.logger.Debug("waiting deployment moved on before detection could settle it", "deployment", d.ID, "error", err)
	active, err := m.srv.State().ActiveDeployment(d.Cluster, d.Namespace, d.JobID)
	return true, active, err
}

// supersedeUnmanaged supersedes the waiting deployments of jobs that git no
// longer declares as managed: removed (only with a complete view of git),
// declared twice, or invalid. Nothing can revalidate them any more, and an
// approval must not deploy what git no longer asks for.
func (m *Detector) supersedeUnmanaged(managed map[string]*declared, conflicts, problems map[string]*structs.JobStatus, incomplete bool) error {
	active, err := m.activeDeployments()
	if err != nil {
		return fmt.Errorf("read active deployments: %w", err)
	}
	for _, d := range active {
		key := d.Key()
		if !d.State.Waiting() || managed[key] != nil {
			continue
		}
		var reason string
		switch {
		case conflicts[key] != nil:
			reason = "the job is declared by more than one file"
		case problems[key] != nil:
			reason = "the job's declaration in git is invalid: " + strings.Join(problems[key].Errors, "; ")
		case !m.managesNamespace(d.Namespace):
			reason = "the job's namespace is no longer managed"
		case incomplete:
			continue
		default:
			reason = "the job is no longer declared as managed in git"
		}
		if _, _, err := m.settle(d, structs.StateSuperseded, reason); err != nil {
			return err
		}
	}
	return nil
}

// recordRepos writes the status of each repository of the core's cluster
// when it changed: a repository's status, its parse errors included, is
// its own cluster's to write, as each cluster parses only the files of
// other clusters' repositories that may concern it.
func (m *Detector) recordRepos(parseErrs map[string][]string) error {
	if m.git == nil {
		return nil
	}
	list, err := m.srv.State().RepoStatuses()
	if err != nil {
		return fmt.Errorf("read repository statuses: %w", err)
	}
	current := map[string]*structs.RepoStatus{}
	for _, r := range list {
		current[r.Name] = r
	}
	var changed []*structs.RepoStatus
	for _, s := range m.git.Status() {
		if m.repoCluster(s.Name) != m.cluster {
			continue
		}
		r := &structs.RepoStatus{Name: s.Name, URL: s.URL, Branch: s.Branch, Path: s.Path, Head: s.Head,
			LastFetch: s.LastFetch.UTC(), FetchError: s.LastError, Refused: s.Refused, ParseErrors: parseErrs[s.Name], Files: s.Files}
		if old := current[s.Name]; old != nil {
			o := *old
			o.ModifyIndex = 0
			o.LastFetch = r.LastFetch
			if reflect.DeepEqual(&o, r) && r.LastFetch.Sub(old.LastFetch) < time.Minute {
				continue
			}
		}
		changed = append(changed, r)
	}
	if len(changed) == 0 {
		return nil
	}
	_, err = m.srv.Apply(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: m.meta(), Repos: changed})
	if err != nil {
		return fmt.Errorf("record repository status: %w", err)
	}
	return nil
}

// recordStatuses writes the observed status of the jobs that changed, marks
// orphans and forgets jobs that are gone from both git and Nomad. While any
// file fails to parse, jobs missing from git are left as they were.
func (m *Detector) recordStatuses(ctx context.Context, statuses map[string]*structs.JobStatus,
	live map[string]*api.JobListStub, anyParseError bool, now time.Time,
) error {
	stored, err := m.jobStatuses()
	if err != nil {
		return fmt.Errorf("read job statuses: %w", err)
	}
	old := map[string]*structs.JobStatus{}
	for _, s := range stored {
		old[s.Key()] = s
	}
	var upserts []*structs.JobStatus
	var deletes, fresh []string
	for key, s := range statuses {
		o := old[key]
		if o != nil {
			// The health pass (health.go) records the counts, in this
			// same loop: a cycle keeps the last ones.
			s.Health = o.Health
		} else {
			fresh = append(fresh, key)
		}
		if o != nil && sameStatus(o, s) {
			continue
		}
		s.ObservedAt = now
		upserts = append(upserts, s)
	}
	if !anyParseError {
		for key, o := range old {
			if _, ok := statuses[key]; ok {
				continue
			}
			deployed, err := m.everRegistered(o.Namespace, o.JobID)
			if err != nil {
				return err
			}
			if live[key] != nil && deployed {
				if !o.Orphan {
					c := *o
					c.Orphan, c.Sync, c.Blocked, c.Hold, c.DriftSummary, c.Drift = true, "", false, "", "", nil
					c.Errors = nil
					c.ObservedAt = now
					upserts = append(upserts, &c)
				}
				continue
			}
			deletes = append(deletes, key)
		}
	}
	sort.Slice(upserts, func(i, j int) bool { return upserts[i].Key() < upserts[j].Key() })
	sort.Strings(deletes)
	if len(upserts) > 0 {
		if _, err := m.srv.Apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: m.meta(), Statuses: upserts}); err != nil {
			return fmt.Errorf("record job status: %w", err)
		}
	}
	if len(deletes) > 0 {
		if _, err := m.srv.Apply(structs.JobStatusDeleteRequestType, &structs.JobStatusDeleteRequest{WriteMeta: m.meta(), Keys: deletes}); err != nil {
			return fmt.Errorf("forget job status: %w", err)
		}
	}
	// A job that starts to be managed has allocations no event told of.
	m.countFresh(ctx, fresh)
	return nil
}

func (m *Detector) everRegistered(namespace, jobID string) (bool, error) {
	list, _, err := m.srv.State().Deployments(m.fsmFilter(namespace, jobID))
	if err != nil {
		return false, fmt.Errorf("read deployments of %s: %w", m.key(namespace, jobID), err)
	}
	for _, d := range list {
		if d.Registered || d.State == structs.StateCompleted {
			return true, nil
		}
	}
	return false, nil
}

func sameStatus(a, b *structs.JobStatus) bool {
	x, y := *a, *b
	x.ObservedAt, y.ObservedAt = time.Time{}, time.Time{}
	x.CreateIndex, y.CreateIndex = 0, 0
	x.ModifyIndex, y.ModifyIndex = 0, 0
	if len(x.Errors) == 0 {
		x.Errors = nil
	}
	if len(y.Errors) == 0 {
		y.Errors = nil
	}
	return reflect.DeepEqual(x, y)
}
