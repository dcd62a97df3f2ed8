package nopstest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nops-dev/nops/structs"
)

// FakeReconciler stands in for the leader's reconcilers behind the API of
// a server started WithoutReconcilers (see WithReconciler), for the tests
// of the client, the CLI and the dashboard: it answers what its fields
// hold and records each call, so a test sees what reached the server and
// with which arguments. It is safe for concurrent use once the server
// runs; its fields must not change then.
type FakeReconciler struct {
	// JobList answers Jobs, filtered as the real one filters.
	JobList []*structs.JobSummary
	// Details answers Job, by job key (namespace/job ID); a missing key
	// is structs.ErrNotFound.
	Details map[string]*structs.JobDetail
	// Blocks answers Retry, by job key; a missing key answers nil.
	Blocks map[string]*structs.Block
	// RepoList answers Repos, and Refresh of one of its names.
	RepoList []*structs.RepoStatus
	// ClusterList answers Clusters.
	ClusterList []*structs.ClusterStatus
	// OrphanList answers Orphans.
	OrphanList []*structs.JobStatus
	// LastCycle answers Cycle; nil is structs.ErrNotFound.
	LastCycle *structs.DetectionCycle
	// Health answers NomadHealth for every deployment.
	Health *structs.NomadHealth
	// Previews answer Preview, by "repository@ref"; a missing one is
	// structs.ErrNotFound.
	Previews map[string]*structs.Preview

	mu    sync.Mutex
	calls []string
}

func (f *FakeReconciler) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// Calls returns the calls so far, oldest first, as "Method args".
func (f *FakeReconciler) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Jobs answers JobList, of namespace and sync when they are set.
func (f *FakeReconciler) Jobs(cluster, namespace string, sync structs.SyncState) ([]*structs.JobSummary, error) {
	f.record("Jobs %q %q", namespace, sync)
	out := []*structs.JobSummary{}
	for _, j := range f.JobList {
		if (cluster == "" || j.Cluster == cluster) && (namespace == "" || j.Namespace == namespace) && (sync == "" || j.Sync == sync) {
			out = append(out, j)
		}
	}
	return out, nil
}

// Job answers Details[job key].
func (f *FakeReconciler) Job(cluster, namespace, jobID string) (*structs.JobDetail, error) {
	f.record("Job %s", structs.JobKey(cluster, namespace, jobID))
	if d, ok := f.Details[structs.JobKey(cluster, namespace, jobID)]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("%w: job %s is not managed by Nops", structs.ErrNotFound, structs.JobKey(cluster, namespace, jobID))
}

// JobCluster answers the cluster named, else the default cluster.
func (f *FakeReconciler) JobCluster(cluster, _, _ string) (string, error) {
	return structs.ClusterName(cluster), nil
}

// Clusters answers ClusterList.
func (f *FakeReconciler) Clusters() []*structs.ClusterStatus {
	f.record("Clusters")
	return append([]*structs.ClusterStatus{}, f.ClusterList...)
}

// Retry answers Blocks[job key].
func (f *FakeReconciler) Retry(_ context.Context, cluster, namespace, jobID, actor string) (*structs.Block, error) {
	f.record("Retry %s by %s", structs.JobKey(cluster, namespace, jobID), actor)
	return f.Blocks[structs.JobKey(cluster, namespace, jobID)], nil
}

// PromoteDeployment answers that id was promoted.
func (f *FakeReconciler) PromoteDeployment(_ context.Context, id, actor string) (*structs.PromoteResult, error) {
	f.record("PromoteDeployment %s by %s", id, actor)
	return &structs.PromoteResult{Promoted: id}, nil
}

// NomadHealth answers Health.
func (f *FakeReconciler) NomadHealth(_ context.Context, id string) (*structs.NomadHealth, error) {
	f.record("NomadHealth %s", id)
	if f.Health == nil {
		return &structs.NomadHealth{}, nil
	}
	return f.Health, nil
}

// Repos answers RepoList.
func (f *FakeReconciler) Repos() ([]*structs.RepoStatus, error) {
	f.record("Repos")
	return append([]*structs.RepoStatus{}, f.RepoList...), nil
}

// Refresh answers the repository of RepoList named name.
func (f *FakeReconciler) Refresh(_ context.Context, name string) (*structs.RepoStatus, error) {
	f.record("Refresh %s", name)
	for _, r := range f.RepoList {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: repository %q", structs.ErrNotFound, name)
}

// Orphans answers OrphanList.
func (f *FakeReconciler) Orphans(_ string) ([]*structs.JobStatus, error) {
	f.record("Orphans")
	return append([]*structs.JobStatus{}, f.OrphanList...), nil
}

// Cycle answers LastCycle.
func (f *FakeReconciler) Cycle() (*structs.DetectionCycle, error) {
	f.record("Cycle")
	if f.LastCycle == nil {
		return nil, fmt.Errorf("%w: no detection cycle has completed yet", structs.ErrNotFound)
	}
	return f.LastCycle, nil
}

// Push records a verified push and matches no repository.
func (f *FakeReconciler) Push(_ context.Context, p *structs.Push) (*structs.WebhookResult, error) {
	f.record("Push %s %s", strings.Join(p.Branches, ","), strings.Join(p.URLs, ","))
	return &structs.WebhookResult{Matched: []string{}, Branches: p.Branches}, nil
}

// Preview answers (a copy of) Previews[repository@ref].
func (f *FakeReconciler) Preview(_ context.Context, req *structs.PreviewRequest) (*structs.Preview, error) {
	f.record("Preview %s@%s", req.Repository, req.Ref)
	p, ok := f.Previews[req.Repository+"@"+req.Ref]
	if !ok {
		return nil, fmt.Errorf("%w: no preview of %s at %s", structs.ErrNotFound, req.Repository, req.Ref)
	}
	c := *p
	return &c, nil
}
