package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nops-dev/nops/structs"
)

// Jobs is the part of the API on the managed jobs: their status, their
// blocks and pauses, and the orphans Nops no longer manages. Get it with
// Client.Jobs, and with Jobs.InCluster for the jobs of one Nomad cluster.
type Jobs struct {
	c *Client
	// cluster, when set, is sent as ?cluster= with every request, and in
	// the body of PauseAll and ResumeAll.
	cluster string
}

// InCluster returns the client of the jobs of one Nomad cluster (SPEC
// section 16): every request names it (?cluster=), as the job's cluster
// on a job's routes (needed only when the same namespace and ID exist in
// more than one cluster) and as the filter of List and Orphans; PauseAll
// and ResumeAll pause and resume every job of that cluster alone. A
// QueryOptions.Cluster of a read takes precedence. "" is every cluster.
func (j *Jobs) InCluster(name string) *Jobs { return &Jobs{c: j.c, cluster: name} }

// query returns the query of a request of the jobs of j's cluster.
func (j *Jobs) query() url.Values {
	v := url.Values{}
	if j.cluster != "" {
		v.Set("cluster", j.cluster)
	}
	return v
}

// Jobs returns the client of the managed jobs: their status, their blocks
// and pauses, and the orphans Nops no longer manages.
func (c *Client) Jobs() *Jobs { return &Jobs{c: c} }

func jobPath(namespace, jobID string) string {
	if namespace == "" {
		namespace = "default"
	}
	return "/v1/job/" + seg(namespace) + "/" + seg(jobID)
}

// List lists every managed job: its observed status with its active and
// last deployments and when the leader last reconciled it.
func (j *Jobs) List(ctx context.Context, q *QueryOptions) ([]*structs.JobSummary, *QueryMeta, error) {
	var out []*structs.JobSummary
	meta, err := j.c.get(ctx, "/v1/jobs", j.query(), q, &out)
	return out, meta, err
}

// Info returns one managed job with its hold, block and deployments. An
// empty namespace means "default".
func (j *Jobs) Info(ctx context.Context, namespace, jobID string, q *QueryOptions) (*structs.JobDetail, *QueryMeta, error) {
	var out structs.JobDetail
	meta, err := j.c.get(ctx, jobPath(namespace, jobID), j.query(), q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// Retry lifts the block of a job, so the next detection cycle may create
// a deployment for it again, and returns the block as stored after the
// lift (nil when the job had none).
func (j *Jobs) Retry(ctx context.Context, namespace, jobID string) (*structs.Block, error) {
	var out *structs.Block
	err := j.c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/retry", j.query(), nil, &out)
	return out, err
}

// Pause pauses one job and returns every pause.
func (j *Jobs) Pause(ctx context.Context, namespace, jobID, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := j.c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/pause", j.query(), &structs.ReasonRequest{Reason: reason}, &out)
	return out, err
}

// Resume ends the pause of one job and returns every pause left.
func (j *Jobs) Resume(ctx context.Context, namespace, jobID, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := j.c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/resume", j.query(), &structs.ReasonRequest{Reason: reason}, &out)
	return out, err
}

// DeployNow stores a request to lift a closed sync window for the job's
// next deployment, and returns it.
func (j *Jobs) DeployNow(ctx context.Context, namespace, jobID string) (*structs.WindowLift, error) {
	var out *structs.WindowLift
	err := j.c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/deploy-now", j.query(), nil, &out)
	return out, err
}

// Pauses lists the current pauses.
func (j *Jobs) Pauses(ctx context.Context, q *QueryOptions) ([]*structs.Pause, *QueryMeta, error) {
	var out []*structs.Pause
	meta, err := j.c.get(ctx, "/v1/pauses", nil, q, &out)
	return out, meta, err
}

// PauseAll pauses every job (of the Nomad cluster of InCluster, when
// set) and returns every pause.
func (j *Jobs) PauseAll(ctx context.Context, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := j.c.write(ctx, http.MethodPost, "/v1/pause", nil, &structs.PauseAllRequest{Reason: reason, Cluster: j.cluster}, &out)
	return out, err
}

// ResumeAll ends the pause of every job (of the Nomad cluster of
// InCluster, when set: the pause PauseAll set on it) and returns the
// pauses left.
func (j *Jobs) ResumeAll(ctx context.Context, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := j.c.write(ctx, http.MethodPost, "/v1/resume", nil, &structs.PauseAllRequest{Reason: reason, Cluster: j.cluster}, &out)
	return out, err
}

// Orphans lists the jobs Nops deployed that git no longer declares.
func (j *Jobs) Orphans(ctx context.Context, q *QueryOptions) ([]*structs.JobStatus, *QueryMeta, error) {
	var out []*structs.JobStatus
	meta, err := j.c.get(ctx, "/v1/orphans", j.query(), q, &out)
	return out, meta, err
}
