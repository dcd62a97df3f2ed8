package reconcile

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// Fleet runs one Manager per Nomad cluster (SPEC section 16): each
// cluster has its own Nomad client, event stream, live-job cache, re-plan
// budget, detection and apply loops, so that a cluster that is down, slow
// or refusing holds only its own jobs. The git watcher is shared: the
// fleet runs it once and wakes every cluster's detection on a new head.
// The fleet answers the API's reconciler routes, sending each to the
// manager of the cluster concerned.
//
// Guarantee: a manager acts only on the jobs and deployments of its
// cluster (its reads of the replicated state are filtered by cluster, and a
// deployment of another cluster woken by a kick is left to its own
// manager), so two clusters never apply the same deployment.
type Fleet struct {
	*Query
	git      *gitwatch.Watcher
	logger   hclog.Logger
	managers []*Manager
	byName   map[string]*Manager
}

// NewFleet returns the fleet of managers, in configuration order; the
// first is the one a single-cluster caller (Default) sees. It registers
// the git watcher's metrics on reg once.
func NewFleet(managers []*Manager, git *gitwatch.Watcher, reg prometheus.Registerer, logger hclog.Logger) (*Fleet, error) {
	if len(managers) == 0 {
		return nil, fmt.Errorf("a fleet needs at least one cluster")
	}
	f := &Fleet{git: git, logger: logger.Named("fleet"), managers: managers, byName: map[string]*Manager{}}
	for _, m := range managers {
		if _, dup := f.byName[m.cluster]; dup {
			return nil, fmt.Errorf("cluster %q has two managers", m.cluster)
		}
		f.byName[m.cluster] = m
	}
	// A deployment that ends in a cluster wakes the detection of the
	// clusters that require it, by their promotion order at that moment
	// (a reload may change it).
	for _, r := range managers {
		for _, m := range managers {
			if r == m {
				continue
			}
			r.requiredBy = append(r.requiredBy, func() {
				if slices.Contains(m.promotion().Requires, r.cluster) {
					m.TriggerDetection()
				}
			})
		}
	}
	f.Query = &Query{server: managers[0].srv, client: managers[0].nomad, clusters: managers[0].clusterNames()}
	if reg != nil && git != nil {
		reg.MustRegister(newGitCollector(managers[0].core))
	}
	return f, nil
}

// Default returns the manager of the first cluster: with one cluster, the
// only one.
func (f *Fleet) Default() *Manager { return f.managers[0] }

// Managers returns the managers, in configuration order.
func (f *Fleet) Managers() []*Manager { return f.managers }

// Manager returns the manager of a cluster, or nil.
func (f *Fleet) Manager(cluster string) *Manager { return f.byName[structs.ClusterName(cluster)] }

// manager returns the manager of a cluster a request names, or ErrNotFound
// naming the clusters.
func (f *Fleet) manager(cluster string) (*Manager, error) {
	if m := f.Manager(cluster); m != nil {
		return m, nil
	}
	names := make([]string, 0, len(f.managers))
	for _, m := range f.managers {
		names = append(names, m.cluster)
	}
	return nil, fmt.Errorf("%w: no Nomad cluster %q (the clusters are %v)", structs.ErrNotFound, cluster, names)
}

// Run runs the git watcher once and every cluster's loops until ctx is
// cancelled; a change of leader resumes every cluster. kicks are routed to
// the managers, each of which takes those of its cluster.
func (f *Fleet) Run(ctx context.Context, kicks *KickQueue) {
	if f.git != nil {
		f.managers[0].seedVerifiedHeads()
	}
	var wg sync.WaitGroup
	run := func(fn func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx)
		}()
	}
	runWakers(run, f.git, f.TriggerDetection, kicks, func(taken []structs.Kick) {
		for _, m := range f.managers {
			m.kicked(taken)
		}
	})
	for _, m := range f.managers {
		run(func(ctx context.Context) { m.Run(ctx, nil) })
	}
	wg.Wait()
}

// TriggerDetection asks every cluster for a detection cycle.
func (f *Fleet) TriggerDetection() {
	for _, m := range f.managers {
		m.TriggerDetection()
	}
}

// Retry lifts the block of a job of a cluster ("" for the job's one
// cluster, as Query.JobCluster resolves it).
func (f *Fleet) Retry(ctx context.Context, cluster, namespace, jobID, actor string) (*structs.Block, error) {
	cluster, err := f.JobCluster(cluster, namespace, jobID)
	if err != nil {
		return nil, err
	}
	m, err := f.manager(cluster)
	if err != nil {
		return nil, err
	}
	return m.Retry(ctx, namespace, jobID, actor)
}

// deploymentManager returns the manager of a deployment's cluster.
func (f *Fleet) deploymentManager(id string) (*Manager, error) {
	d, err := f.server.State().Deployment(id)
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", id, err)
	}
	if d == nil {
		return nil, fmt.Errorf("%w: deployment %q", structs.ErrNotFound, id)
	}
	return f.manager(d.Cluster)
}

// PromoteDeployment promotes the canaries of a deployment in its cluster.
func (f *Fleet) PromoteDeployment(ctx context.Context, id, actor string) (*structs.PromoteResult, error) {
	m, err := f.deploymentManager(id)
	if err != nil {
		return nil, err
	}
	return m.PromoteDeployment(ctx, id, actor)
}

// NomadHealth reads the health of a deployment from its cluster's Nomad.
func (f *Fleet) NomadHealth(ctx context.Context, id string) (*structs.NomadHealth, error) {
	m, err := f.deploymentManager(id)
	if err != nil {
		return nil, err
	}
	return m.NomadHealth(ctx, id)
}

// Refresh fetches a watched repository now; every cluster's detection
// runs on what it finds.
func (f *Fleet) Refresh(ctx context.Context, name string) (*structs.RepoStatus, error) {
	st, err := f.managers[0].Refresh(ctx, name)
	if err == nil {
		// The first cluster's detection is asked for by the fetch (a new
		// head wakes every cluster through the watcher); the others'
		// are asked here, so a refresh that finds the same head still
		// shows its outcome in every cluster.
		for _, m := range f.managers[1:] {
			m.TriggerDetection()
		}
	}
	return st, err
}

// Push takes a verified git push; every cluster's detection runs on what
// the fetch finds.
func (f *Fleet) Push(ctx context.Context, p *structs.Push) (*structs.WebhookResult, error) {
	res, err := f.managers[0].Push(ctx, p)
	if err == nil && len(res.Matched) > 0 && len(f.managers) > 1 {
		for _, m := range f.managers[1:] {
			m.TriggerDetection()
		}
	}
	return res, err
}

// Preview answers what Nops would do with a repository at a ref, in every
// cluster, writing nothing: the ref is read from git once and each cluster
// previews its own jobs of it, all at once, under the first cluster's
// limits (which SetPreviewLimits gives every cluster).
func (f *Fleet) Preview(ctx context.Context, req *structs.PreviewRequest) (*structs.Preview, error) {
	return f.managers[0].previewIn(ctx, req, f.managers)
}

// Clusters returns what the leader sees of each Nomad cluster (GET
// /v1/clusters): its address, whether it answers, when it last did, its
// version and whether its event stream is up.
func (f *Fleet) Clusters() []*structs.ClusterStatus {
	out := make([]*structs.ClusterStatus, 0, len(f.managers))
	for _, m := range f.managers {
		out = append(out, m.ClusterStatus())
	}
	return out
}

// SetDefaults replaces the defaults of jobs that set no meta in every
// cluster.
func (f *Fleet) SetDefaults(d meta.Defaults) {
	for _, m := range f.managers {
		m.SetDefaults(d)
	}
}

// UpdateRepositories replaces the repositories watched and runs detection
// in every cluster. An invalid set changes nothing.
func (f *Fleet) UpdateRepositories(repos []gitwatch.RepoConfig, repoClusters map[string]string) (added, changed, removed []string, err error) {
	added, changed, removed, err = f.managers[0].UpdateRepositories(repos)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, m := range f.managers {
		m.setRepoClusters(repoClusters)
		m.TriggerDetection()
	}
	return added, changed, removed, nil
}

// SetReplanRate sets each cluster's budget of the periodic re-plan.
func (f *Fleet) SetReplanRate(perSecond int) {
	for _, m := range f.managers {
		m.SetReplanRate(perSecond)
	}
}

// SetFullPlanInterval sets each cluster's full re-plan interval.
func (f *Fleet) SetFullPlanInterval(d time.Duration) {
	for _, m := range f.managers {
		m.SetFullPlanInterval(d)
	}
}

// SetPreviewLimits bounds every cluster's previews.
func (f *Fleet) SetPreviewLimits(maxJobs int, timeout time.Duration) {
	for _, m := range f.managers {
		m.SetPreviewLimits(maxJobs, timeout)
	}
}
