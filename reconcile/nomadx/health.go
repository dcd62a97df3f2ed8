package nomadx

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// LatestDeployment returns the most recent Nomad deployment of a job, or nil
// when the job has none.
func (c *Client) LatestDeployment(ctx context.Context, ns, jobID string) (*api.Deployment, error) {
	ns = namespaceOrDefault(ns)
	d, _, err := c.api.Jobs().LatestDeployment(jobID, c.queryOpts(ctx, "job.deployment", ns))
	if err != nil {
		return nil, fmt.Errorf("read latest deployment of job %q in namespace %q: %w", jobID, ns, notFoundAs(err, ErrJobNotFound))
	}
	return d, nil
}

// Deployment returns a Nomad deployment, or ErrDeploymentNotFound.
func (c *Client) Deployment(ctx context.Context, id string) (*api.Deployment, error) {
	if id == "" {
		return nil, fmt.Errorf("read deployment: empty deployment ID")
	}
	d, _, err := c.api.Deployments().Info(id, c.queryOpts(ctx, "deployment.info", ""))
	if err != nil {
		return nil, fmt.Errorf("read deployment %q: %w", id, notFoundAs(err, ErrDeploymentNotFound))
	}
	if d == nil {
		return nil, fmt.Errorf("read deployment %q: %w", id, ErrDeploymentNotFound)
	}
	return d, nil
}

// PromoteDeployment promotes every canary of a Nomad deployment.
func (c *Client) PromoteDeployment(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("promote deployment: empty deployment ID")
	}
	d, err := c.Deployment(ctx, id)
	if err != nil {
		return fmt.Errorf("promote deployment: %w", err)
	}
	if _, _, err := c.api.Deployments().PromoteAll(id, c.writeOpts(ctx, "deployment.promote", d.Namespace)); err != nil {
		return fmt.Errorf("promote deployment %q: %w", id, err)
	}
	return nil
}

// JobAllocations returns the allocations of the current instance of a job.
func (c *Client) JobAllocations(ctx context.Context, ns, jobID string) ([]*api.AllocationListStub, error) {
	ns = namespaceOrDefault(ns)
	allocs, _, err := c.api.Jobs().Allocations(jobID, false, c.queryOpts(ctx, "job.allocations", ns))
	if err != nil {
		return nil, fmt.Errorf("list allocations of job %q in namespace %q: %w", jobID, ns, notFoundAs(err, ErrJobNotFound))
	}
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].CreateIndex < allocs[j].CreateIndex })
	return allocs, nil
}

// HealthState is where a registered job version stands.
type HealthState string

const (
	// HealthPending: the new version is still being rolled out.
	HealthPending HealthState = "pending"
	// HealthHealthy: the new version is healthy (or has nothing to run).
	HealthHealthy HealthState = "healthy"
	// HealthFailed: the new version failed; it will not become healthy.
	HealthFailed HealthState = "failed"
	// HealthAwaitingPromotion: canaries are placed and healthy and wait for
	// a person to promote them; a caller pauses its timeout meanwhile.
	HealthAwaitingPromotion HealthState = "awaiting_promotion"
)

// HealthResult is the answer of Health.
type HealthResult struct {
	State HealthState
	// DeploymentID is the Nomad deployment tracking the version, if any.
	DeploymentID string
	// Message says why, in words for an operator.
	Message string
}

// Health tells whether version of a job, registered with evaluation evalID,
// is healthy:
//
//   - if the register created a Nomad deployment for that version, it is
//     healthy when the deployment is successful and failed when the
//     deployment failed or was cancelled; canaries that are placed and healthy
//     but not promoted (and not auto-promoted) report
//     HealthAwaitingPromotion;
//   - otherwise (batch and system jobs), it is healthy when every allocation
//     of the version is running or complete, and failed when one failed;
//   - a periodic or parameterized job, which has no allocations of its own,
//     is healthy once registered;
//   - a job that was stopped, removed, or changed to a newer version before
//     this one became healthy has failed.
//
// evalID may be empty (for example after a failover); the job's evaluations
// are then consulted instead.
func (c *Client) Health(ctx context.Context, ns, jobID string, version uint64, evalID string) (HealthResult, error) {
	return c.HealthOf(ctx, ns, jobID, nil, version, evalID)
}

// HealthOf is Health with the live job, when the caller has just read it
// (job nil: it is read here). A periodic or parameterized job is judged
// from the job alone, with no other request: Nomad makes no evaluation,
// hence no deployment, when such a job is registered.
func (c *Client) HealthOf(ctx context.Context, ns, jobID string, job *api.Job, version uint64, evalID string) (HealthResult, error) {
	ns = namespaceOrDefault(ns)
	if job == nil {
		var err error
		if job, err = c.Job(ctx, ns, jobID); err != nil {
			if isJobNotFound(err) {
				return HealthResult{State: HealthFailed, Message: fmt.Sprintf("job %q no longer exists in Nomad", jobID)}, nil
			}
			return HealthResult{}, err
		}
	}
	if deref(job.Stop) {
		return HealthResult{State: HealthFailed, Message: fmt.Sprintf("job %q was stopped", jobID)}, nil
	}
	current := deref(job.Version)
	if current < version {
		return HealthResult{State: HealthPending, Message: fmt.Sprintf("Nomad still shows job version %d, waiting for version %d", current, version)}, nil
	}
	if job.IsPeriodic() || job.IsParameterized() {
		return HealthResult{State: HealthHealthy, Message: "periodic or parameterized job: healthy once registered"}, nil
	}

	// A Nomad deployment for this version decides.
	deployments, _, err := c.api.Jobs().Deployments(jobID, false, c.queryOpts(ctx, "job.deployments", ns))
	if err != nil {
		return HealthResult{}, fmt.Errorf("list deployments of job %q in namespace %q: %w", jobID, ns, err)
	}
	var dep *api.Deployment
	for _, d := range deployments {
		if d.JobVersion != version || d.JobCreateIndex != deref(job.CreateIndex) {
			continue
		}
		if dep == nil || d.CreateIndex > dep.CreateIndex {
			dep = d
		}
	}
	if dep != nil {
		return deploymentHealth(dep, job, version), nil
	}

	// No deployment yet: the evaluation may still create one.
	if evalID != "" {
		eval, _, err := c.api.Evaluations().Info(evalID, c.queryOpts(ctx, "evaluation.info", ns))
		switch {
		case isNotFound(err):
			// Garbage collected: it finished long ago.
		case err != nil:
			return HealthResult{}, fmt.Errorf("read evaluation %q: %w", evalID, err)
		default:
			if res, done, err := c.evalHealth(ctx, eval, job, version); done || err != nil {
				return res, err
			}
		}
	} else {
		evals, _, err := c.api.Jobs().Evaluations(jobID, c.queryOpts(ctx, "job.evaluations", ns))
		if err != nil {
			return HealthResult{}, fmt.Errorf("list evaluations of job %q in namespace %q: %w", jobID, ns, err)
		}
		for _, e := range evals {
			if e.JobModifyIndex < deref(job.JobModifyIndex) {
				continue
			}
			if res, done, err := c.evalHealth(ctx, e, job, version); done || err != nil {
				return res, err
			}
		}
	}

	res, err := c.allocationHealth(ctx, ns, jobID, version)
	if err != nil {
		return HealthResult{}, err
	}
	if res.State != HealthHealthy && current > version {
		return HealthResult{State: HealthFailed, Message: fmt.Sprintf("job was changed to version %d before version %d became healthy", current, version)}, nil
	}
	return res, nil
}

// evalHealth judges from an evaluation; done is false when the allocations
// must decide.
func (c *Client) evalHealth(ctx context.Context, eval *api.Evaluation, job *api.Job, version uint64) (HealthResult, bool, error) {
	switch eval.Status {
	case api.EvalStatusPending:
		return HealthResult{State: HealthPending, Message: fmt.Sprintf("evaluation %s is pending", structs.ShortID(eval.ID))}, true, nil
	case api.EvalStatusBlocked:
		return HealthResult{State: HealthPending, Message: fmt.Sprintf("evaluation %s is blocked waiting for capacity", structs.ShortID(eval.ID))}, true, nil
	case api.EvalStatusFailed:
		return HealthResult{State: HealthFailed, Message: fmt.Sprintf("evaluation %s failed: %s", structs.ShortID(eval.ID), eval.StatusDescription)}, true, nil
	case api.EvalStatusComplete:
		if eval.DeploymentID != "" {
			d, err := c.Deployment(ctx, eval.DeploymentID)
			if err != nil {
				return HealthResult{}, true, err
			}
			if d.JobVersion == version {
				return deploymentHealth(d, job, version), true, nil
			}
		}
		if len(eval.FailedTGAllocs) > 0 {
			groups := make([]string, 0, len(eval.FailedTGAllocs))
			for g, m := range eval.FailedTGAllocs {
				groups = append(groups, fmt.Sprintf("%s (%s)", g, describeFailedPlacement(m)))
			}
			sort.Strings(groups)
			return HealthResult{State: HealthPending, Message: "waiting to place task groups: " + strings.Join(groups, ", ")}, true, nil
		}
	}
	return HealthResult{}, false, nil
}

func deploymentHealth(d *api.Deployment, job *api.Job, version uint64) HealthResult {
	res := HealthResult{DeploymentID: d.ID}
	switch d.Status {
	case api.DeploymentStatusSuccessful:
		res.State = HealthHealthy
		res.Message = fmt.Sprintf("deployment %s successful", structs.ShortID(d.ID))
		return res
	case api.DeploymentStatusFailed, api.DeploymentStatusCancelled:
		res.State = HealthFailed
		res.Message = fmt.Sprintf("deployment %s %s: %s", structs.ShortID(d.ID), d.Status, d.StatusDescription)
		return res
	}

	// Canaries placed and healthy, waiting for a person.
	autoPromote := map[string]bool{}
	if job != nil && deref(job.Version) == version {
		for _, tg := range job.TaskGroups {
			if tg != nil && tg.Name != nil && tg.Update != nil && deref(tg.Update.AutoPromote) {
				autoPromote[*tg.Name] = true
			}
		}
	}
	var waiting []string
	ready := true
	for name, s := range d.TaskGroups {
		if s == nil || s.DesiredCanaries == 0 || s.Promoted {
			continue
		}
		if autoPromote[name] {
			ready = false
			continue
		}
		if len(s.PlacedCanaries) < s.DesiredCanaries || s.HealthyAllocs < s.DesiredCanaries {
			ready = false
			continue
		}
		waiting = append(waiting, name)
	}
	if ready && len(waiting) > 0 {
		sort.Strings(waiting)
		res.State = HealthAwaitingPromotion
		res.Message = fmt.Sprintf("deployment %s: canaries of %s are healthy and wait for promotion", structs.ShortID(d.ID), strings.Join(waiting, ", "))
		return res
	}

	res.State = HealthPending
	res.Message = fmt.Sprintf("deployment %s %s", structs.ShortID(d.ID), d.Status)
	if d.StatusDescription != "" {
		res.Message += ": " + d.StatusDescription
	}
	return res
}

// allocationHealth judges a version without a Nomad deployment from its
// allocations.
func (c *Client) allocationHealth(ctx context.Context, ns, jobID string, version uint64) (HealthResult, error) {
	allocs, err := c.JobAllocations(ctx, ns, jobID)
	if err != nil {
		return HealthResult{}, err
	}
	var total, done int
	for _, a := range allocs {
		if a.JobVersion != version {
			continue
		}
		if a.ClientStatus == api.AllocClientStatusFailed {
			return HealthResult{State: HealthFailed, Message: fmt.Sprintf("allocation %s failed: %s", structs.ShortID(a.ID), allocFailure(a))}, nil
		}
		if a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		total++
		if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusComplete {
			done++
		}
	}
	switch {
	case total == 0:
		return HealthResult{State: HealthHealthy, Message: fmt.Sprintf("no allocations to wait for at version %d", version)}, nil
	case done == total:
		return HealthResult{State: HealthHealthy, Message: fmt.Sprintf("%d allocations running or complete", total)}, nil
	default:
		return HealthResult{State: HealthPending, Message: fmt.Sprintf("%d of %d allocations running or complete", done, total)}, nil
	}
}

// allocFailure summarises why an allocation failed from its task events.
func allocFailure(a *api.AllocationListStub) string {
	names := make([]string, 0, len(a.TaskStates))
	for name := range a.TaskStates {
		names = append(names, name)
	}
	sort.Strings(names)
	var reasons []string
	for _, name := range names {
		ts := a.TaskStates[name]
		if ts == nil || !ts.Failed {
			continue
		}
		msg := "failed"
		for i := len(ts.Events) - 1; i >= 0; i-- {
			e := ts.Events[i]
			if e == nil {
				continue
			}
			if m := firstNonEmpty(e.DisplayMessage, e.Message); m != "" {
				msg = e.Type + ": " + m
				break
			}
		}
		reasons = append(reasons, fmt.Sprintf("task %q %s", name, msg))
	}
	if len(reasons) == 0 {
		return firstNonEmpty(a.ClientDescription, "allocation failed")
	}
	return strings.Join(reasons, "; ")
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func isJobNotFound(err error) bool {
	return errors.Is(err, ErrJobNotFound)
}
