package client

import (
	"context"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

func jobPath(namespace, jobID string) string {
	if namespace == "" {
		namespace = "default"
	}
	return "/v1/job/" + seg(namespace) + "/" + seg(jobID)
}

// Jobs lists every managed job: its observed status with its active and
// last deployments and when the leader last reconciled it.
func (c *Client) Jobs(ctx context.Context, q *QueryOptions) ([]*structs.JobSummary, *QueryMeta, error) {
	var out []*structs.JobSummary
	meta, err := c.get(ctx, "/v1/jobs", nil, q, &out)
	return out, meta, err
}

// Job returns one managed job with its hold, block and deployments. An
// empty namespace means "default".
func (c *Client) Job(ctx context.Context, namespace, jobID string, q *QueryOptions) (*structs.JobDetail, *QueryMeta, error) {
	var out structs.JobDetail
	meta, err := c.get(ctx, jobPath(namespace, jobID), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// RetryJob lifts the block of a job, so the next detection cycle may create
// a deployment for it again, and returns the block as stored after the
// lift (nil when the job had none).
func (c *Client) RetryJob(ctx context.Context, namespace, jobID string) (*structs.Block, error) {
	var out *structs.Block
	err := c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/retry", nil, nil, &out)
	return out, err
}

// PauseJob pauses one job and returns every pause.
func (c *Client) PauseJob(ctx context.Context, namespace, jobID, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/pause", nil, &structs.ReasonRequest{Reason: reason}, &out)
	return out, err
}

// ResumeJob ends the pause of one job and returns every pause left.
func (c *Client) ResumeJob(ctx context.Context, namespace, jobID, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/resume", nil, &structs.ReasonRequest{Reason: reason}, &out)
	return out, err
}

// DeployNow stores a request to lift a closed sync window for the job's
// next deployment, and returns it.
func (c *Client) DeployNow(ctx context.Context, namespace, jobID string) (*structs.WindowLift, error) {
	var out *structs.WindowLift
	err := c.write(ctx, http.MethodPost, jobPath(namespace, jobID)+"/deploy-now", nil, nil, &out)
	return out, err
}

// Pauses lists the current pauses.
func (c *Client) Pauses(ctx context.Context, q *QueryOptions) ([]*structs.Pause, *QueryMeta, error) {
	var out []*structs.Pause
	meta, err := c.get(ctx, "/v1/pauses", nil, q, &out)
	return out, meta, err
}

// PauseAll pauses every job and returns every pause.
func (c *Client) PauseAll(ctx context.Context, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := c.write(ctx, http.MethodPost, "/v1/pause", nil, &structs.ReasonRequest{Reason: reason}, &out)
	return out, err
}

// ResumeAll ends the pause of every job and returns the pauses left (those
// of single jobs).
func (c *Client) ResumeAll(ctx context.Context, reason string) ([]*structs.Pause, error) {
	var out []*structs.Pause
	err := c.write(ctx, http.MethodPost, "/v1/resume", nil, &structs.ReasonRequest{Reason: reason}, &out)
	return out, err
}

// Orphans lists the jobs Nops deployed that git no longer declares.
func (c *Client) Orphans(ctx context.Context, q *QueryOptions) ([]*structs.JobStatus, *QueryMeta, error) {
	var out []*structs.JobStatus
	meta, err := c.get(ctx, "/v1/orphans", nil, q, &out)
	return out, meta, err
}

// Repos lists the observed status of every repository.
func (c *Client) Repos(ctx context.Context, q *QueryOptions) ([]*structs.RepoStatus, *QueryMeta, error) {
	var out []*structs.RepoStatus
	meta, err := c.get(ctx, "/v1/repos", nil, q, &out)
	return out, meta, err
}

// RefreshRepo asks the leader to fetch a repository now and returns its
// status after the fetch.
func (c *Client) RefreshRepo(ctx context.Context, name string) (*structs.RepoStatus, error) {
	var out structs.RepoStatus
	if err := c.write(ctx, http.MethodPost, "/v1/repo/"+seg(name)+"/refresh", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
