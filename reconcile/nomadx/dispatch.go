package nomadx

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// Dispatch runs a parameterized job with the given meta. The idempotency
// token makes the dispatch safe to repeat: while the child job exists, Nomad
// answers a dispatch with a known token with that child (and no new
// evaluation, so evalID is empty then).
func (c *Client) Dispatch(ctx context.Context, ns, jobID string, meta map[string]string, idempotencyToken string) (dispatchedJobID, evalID string, err error) {
	if idempotencyToken == "" {
		return "", "", fmt.Errorf("dispatch job %q: an idempotency token is required", jobID)
	}
	ns = namespaceOrDefault(ns)
	w := c.writeOpts(ctx, "job.dispatch", ns)
	w.IdempotencyToken = idempotencyToken
	resp, _, err := c.api.Jobs().Dispatch(jobID, meta, nil, "", w)
	if err != nil {
		return "", "", fmt.Errorf("dispatch job %q in namespace %q: %w", jobID, ns, notFoundAs(err, ErrJobNotFound))
	}
	return resp.DispatchedJobID, resp.EvalID, nil
}

// FindDispatched returns the ID of the child of parentJobID that was
// dispatched with token, or ErrJobNotFound when Nomad has none (never
// dispatched, or garbage collected).
func (c *Client) FindDispatched(ctx context.Context, ns, parentJobID, token string) (string, error) {
	if token == "" {
		return "", fmt.Errorf("find dispatched child of job %q: empty idempotency token", parentJobID)
	}
	ns = namespaceOrDefault(ns)
	q := c.queryOpts(ctx, "jobs.list", ns)
	q.Prefix = parentJobID + "/"
	stubs, _, err := c.api.Jobs().List(q)
	if err != nil {
		return "", fmt.Errorf("find dispatched child of job %q in namespace %q: %w", parentJobID, ns, err)
	}
	// Newest first: the run being looked for is usually recent.
	sort.Slice(stubs, func(i, j int) bool { return stubs[i].CreateIndex > stubs[j].CreateIndex })
	for _, s := range stubs {
		if s.ParentID != parentJobID {
			continue
		}
		child, err := c.Job(ctx, ns, s.ID)
		if err != nil {
			if errors.Is(err, ErrJobNotFound) {
				continue
			}
			return "", fmt.Errorf("find dispatched child of job %q: %w", parentJobID, err)
		}
		if deref(child.DispatchIdempotencyToken) == token {
			return s.ID, nil
		}
	}
	return "", fmt.Errorf("find dispatched child of job %q in namespace %q with token %q: %w", parentJobID, ns, token, ErrJobNotFound)
}

// DispatchOutcome is where a dispatched run stands.
type DispatchOutcome string

const (
	DispatchPending   DispatchOutcome = "pending"
	DispatchSucceeded DispatchOutcome = "succeeded"
	DispatchFailed    DispatchOutcome = "failed"
)

// DispatchedOutcome tells whether a dispatched child job finished: it
// succeeded when the job is dead and every allocation completed with no failed
// task, and failed as soon as one allocation failed (or when the job stopped
// without completing). The message explains a failure.
func (c *Client) DispatchedOutcome(ctx context.Context, ns, childJobID string) (DispatchOutcome, string, error) {
	ns = namespaceOrDefault(ns)
	job, err := c.Job(ctx, ns, childJobID)
	if err != nil {
		return "", "", err
	}
	allocs, err := c.JobAllocations(ctx, ns, childJobID)
	if err != nil {
		return "", "", err
	}
	complete := 0
	for _, a := range allocs {
		switch a.ClientStatus {
		case api.AllocClientStatusFailed:
			return DispatchFailed, fmt.Sprintf("allocation %s failed: %s", structs.ShortID(a.ID), allocFailure(a)), nil
		case api.AllocClientStatusLost:
			return DispatchFailed, fmt.Sprintf("allocation %s was lost", structs.ShortID(a.ID)), nil
		case api.AllocClientStatusComplete:
			for name, ts := range a.TaskStates {
				if ts != nil && ts.Failed {
					return DispatchFailed, fmt.Sprintf("allocation %s: task %q failed", structs.ShortID(a.ID), name), nil
				}
			}
			complete++
		}
	}
	if deref(job.Status) != "dead" {
		return DispatchPending, fmt.Sprintf("%d of %d allocations complete", complete, len(allocs)), nil
	}
	if deref(job.Stop) {
		return DispatchFailed, "the job was stopped before it completed", nil
	}
	if len(allocs) == 0 {
		return DispatchFailed, "the job finished without running any allocation", nil
	}
	if complete != len(allocs) {
		return DispatchFailed, fmt.Sprintf("the job finished with %d of %d allocations complete", complete, len(allocs)), nil
	}
	return DispatchSucceeded, fmt.Sprintf("%d allocations complete", complete), nil
}
