package reconcile

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// Query answers the reconcilers' reads of the HTTP API (SPEC section 10)
// from the replicated state and, for a deployment's health, from Nomad.
// It changes nothing and runs on every server. Errors wrap the structs
// sentinels (ErrNotFound, ErrUpstream) that the agent maps to status codes.
type Query struct {
	server Server
	client *nomadx.Client
	// clusters are the names of the configured Nomad clusters.
	clusters []string
}

// Jobs lists the managed jobs that are not orphans, with their active and
// last deployments, optionally of one cluster, one namespace and one sync
// state (empty matches all).
func (q *Query) Jobs(cluster, namespace string, sync structs.SyncState) ([]*structs.JobSummary, error) {
	st := q.server.State()
	list, err := st.JobStatuses()
	if err != nil {
		return nil, fmt.Errorf("job statuses: %w", err)
	}
	// Each cluster's jobs were last reconciled by its own last cycle.
	reconciled := map[string]*time.Time{}
	out := []*structs.JobSummary{}
	for _, s := range list {
		if s.Orphan || (cluster != "" && s.Cluster != cluster) || (namespace != "" && s.Namespace != namespace) || (sync != "" && s.Sync != sync) {
			continue
		}
		// The list leaves the drift's diff out: the job's page has it.
		c := *s
		c.Drift = nil
		at, seen := reconciled[c.Cluster]
		if !seen {
			if at, err = lastReconciled(st, c.Cluster); err != nil {
				return nil, err
			}
			reconciled[c.Cluster] = at
		}
		sum := &structs.JobSummary{JobStatus: &c, LastReconciled: at}
		active, last, err := deploymentsOf(st, s.Cluster, s.Namespace, s.JobID)
		if err != nil {
			return nil, err
		}
		sum.ActiveDeployment, sum.LastDeployment = ref(active), ref(last)
		out = append(out, sum)
	}
	return out, nil
}

// lastReconciled is when the last detection cycle of a cluster finished;
// nil before the first.
func lastReconciled(st *fsm.StateStore, cluster string) (*time.Time, error) {
	c, err := st.ClusterDetectionCycle(cluster)
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
func deploymentsOf(st *fsm.StateStore, cluster, namespace, jobID string) (active, last *structs.Deployment, err error) {
	if active, err = st.ActiveDeployment(cluster, namespace, jobID); err != nil {
		return nil, nil, fmt.Errorf("read active deployment of %s: %w", structs.JobKey(cluster, namespace, jobID), err)
	}
	if last, err = st.LastDeployment(cluster, namespace, jobID); err != nil {
		return nil, nil, fmt.Errorf("read last deployment of %s: %w", structs.JobKey(cluster, namespace, jobID), err)
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
func (q *Query) Job(cluster, namespace, jobID string) (*structs.JobDetail, error) {
	st := q.server.State()
	cluster, err := q.JobCluster(cluster, namespace, jobID)
	if err != nil {
		return nil, err
	}
	s, err := st.JobStatus(cluster, namespace, jobID)
	if err != nil {
		return nil, fmt.Errorf("job status: %w", err)
	}
	if s == nil {
		return nil, fmt.Errorf("%w: job %s is not managed by Nops", structs.ErrNotFound, structs.JobKey(cluster, namespace, jobID))
	}
	out := &structs.JobDetail{Status: s}
	active, last, err := deploymentsOf(st, cluster, namespace, jobID)
	if err != nil {
		return nil, err
	}
	if active != nil {
		out.ActiveDeployment = active.Public()
	}
	if last != nil {
		out.LastDeployment = last.Public()
	}
	b, err := st.Block(cluster, namespace, jobID)
	if err != nil {
		return nil, fmt.Errorf("read block of %s: %w", structs.JobKey(cluster, namespace, jobID), err)
	}
	if b != nil && b.Blocks(s.SpecHash, s.LiveModifyIndex) {
		out.Block = b
	}
	if out.Pause, err = st.Paused(cluster, namespace, jobID); err != nil {
		return nil, fmt.Errorf("read pause of %s: %w", structs.JobKey(cluster, namespace, jobID), err)
	}
	if out.LastReconciled, err = lastReconciled(st, cluster); err != nil {
		return nil, err
	}
	return out, nil
}

// Repos lists the observed status of every watched repository.
func (q *Query) Repos() ([]*structs.RepoStatus, error) {
	list, err := q.server.State().RepoStatuses()
	if err != nil {
		return nil, fmt.Errorf("repository statuses: %w", err)
	}
	if list == nil {
		list = []*structs.RepoStatus{}
	}
	return list, nil
}

// Orphans lists the jobs Nops deployed that git no longer declares, of one
// cluster when cluster is not empty.
func (q *Query) Orphans(cluster string) ([]*structs.JobStatus, error) {
	list, err := q.server.State().JobStatuses()
	if err != nil {
		return nil, fmt.Errorf("job statuses: %w", err)
	}
	out := []*structs.JobStatus{}
	for _, s := range list {
		if s.Orphan && (cluster == "" || s.Cluster == cluster) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Cycle returns the last completed detection cycle; ErrNotFound before the
// first.
func (q *Query) Cycle() (*structs.DetectionCycle, error) {
	c, err := q.server.State().DetectionCycle()
	if err != nil {
		return nil, fmt.Errorf("detection cycle: %w", err)
	}
	if c == nil {
		return nil, fmt.Errorf("%w: no detection cycle has completed yet", structs.ErrNotFound)
	}
	return c, nil
}

// JobCluster returns the cluster of a job a request names by namespace and
// ID (SPEC section 16): the cluster it names, else the one cluster whose
// jobs hold that namespace and ID. A job of that namespace and ID in more
// than one cluster is ambiguous (ErrInvalid, naming the clusters). One in
// none is of the only configured cluster, else of the default cluster when
// one is configured (a job Nops does not manage is then not found there);
// else it is ErrInvalid too: no configured cluster is the job's, and the
// request must name one.
func (q *Query) JobCluster(cluster, namespace, jobID string) (string, error) {
	if cluster != "" {
		return cluster, nil
	}
	list, err := q.server.State().JobStatuses()
	if err != nil {
		return "", fmt.Errorf("job statuses: %w", err)
	}
	var in []string
	for _, s := range list {
		if s.Namespace == namespace && s.JobID == jobID {
			in = append(in, structs.ClusterName(s.Cluster))
		}
	}
	switch {
	case len(in) == 1:
		return in[0], nil
	case len(in) > 1:
		sort.Strings(in)
		return "", fmt.Errorf("%w: job %s/%s is in clusters %s: name one with ?cluster=", structs.ErrInvalid, namespace, jobID, strings.Join(in, ", "))
	case len(q.clusters) == 0 || slices.Contains(q.clusters, structs.DefaultCluster):
		return structs.DefaultCluster, nil
	case len(q.clusters) == 1:
		return q.clusters[0], nil
	}
	return "", fmt.Errorf("%w: job %s/%s is in none of the Nomad clusters (%s): name one with ?cluster=",
		structs.ErrInvalid, namespace, jobID, strings.Join(q.clusters, ", "))
}
