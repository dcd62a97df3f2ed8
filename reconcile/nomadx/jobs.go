package nomadx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// Parse turns the text of a job file into a canonicalized job, using Nomad's
// own parser (/v1/jobs/parse), so HCL2 functions and variables behave as in
// `nomad job run`. variables is the content of the job's variables file (empty
// for none). An error that is Nomad's verdict on the file matches
// ErrInvalidJob; any other (Nomad unreachable, no leader) does not.
func (c *Client) Parse(ctx context.Context, hcl, variables string) (*api.Job, error) {
	if strings.TrimSpace(hcl) == "" {
		return nil, &invalidJobError{errors.New("parse job: the job file is empty")}
	}
	req := &api.JobsParseRequest{
		JobHCL:       hcl,
		Variables:    variables,
		Canonicalize: true,
	}
	var job api.Job
	if _, err := c.api.Raw().Write("/v1/jobs/parse", req, &job, c.writeOpts(ctx, "jobs.parse", "")); err != nil {
		err = fmt.Errorf("parse job through Nomad: %w", err)
		if statusCode(err) == http.StatusBadRequest {
			return nil, &invalidJobError{err}
		}
		return nil, err
	}
	if job.ID == nil || *job.ID == "" {
		return nil, &invalidJobError{errors.New("parse job through Nomad: the job has no ID")}
	}
	return &job, nil
}

// Job returns the live job, or ErrJobNotFound.
func (c *Client) Job(ctx context.Context, ns, id string) (*api.Job, error) {
	ns = namespaceOrDefault(ns)
	job, _, err := c.api.Jobs().Info(id, c.queryOpts(ctx, "job.info", ns))
	if err != nil {
		return nil, fmt.Errorf("read job %q in namespace %q: %w", id, ns, notFoundAs(err, ErrJobNotFound))
	}
	return job, nil
}

// ListJobs returns the stubs (with ModifyIndex, JobModifyIndex and Meta) of
// every job in ns; ns "*" lists all namespaces.
func (c *Client) ListJobs(ctx context.Context, ns string) ([]*api.JobListStub, error) {
	stubs, _, err := c.listJobs(ctx, ns, 0)
	return stubs, err
}

// ListJobsSince is ListJobs from a state of Nomad at least as new as index:
// it waits (at most wait) until Nomad's job index reaches index. Nomad
// sends an event before the change it reports is visible to reads; a list
// made on that event passes the event's index.
func (c *Client) ListJobsSince(ctx context.Context, ns string, index uint64, wait time.Duration) ([]*api.JobListStub, error) {
	if index <= 1 {
		return c.ListJobs(ctx, ns)
	}
	stubs, _, err := c.listJobsWait(ctx, ns, index-1, wait)
	return stubs, err
}

// JobStub returns the stub (as ListJobs has it) of one job in ns, from a
// state of Nomad at least as new as index (waiting at most wait, as
// ListJobsSince), or nil when Nomad has no such job. It lists the jobs
// whose ID starts with id, which Nomad finds from its ID index.
func (c *Client) JobStub(ctx context.Context, ns, id string, index uint64, wait time.Duration) (*api.JobListStub, error) {
	ns = namespaceOrDefault(ns)
	q := c.queryOpts(ctx, "jobs.list", ns)
	q.Prefix = id
	if index > 1 {
		q.WaitIndex = index - 1
		q.WaitTime = wait
	}
	stubs, _, err := c.api.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q)
	if err != nil {
		return nil, fmt.Errorf("read the stub of job %q in namespace %q: %w", id, ns, err)
	}
	for _, s := range stubs {
		if s.ID == id && namespaceOrDefault(s.Namespace) == ns {
			return s, nil
		}
	}
	return nil, nil
}

func (c *Client) listJobs(ctx context.Context, ns string, index uint64) ([]*api.JobListStub, uint64, error) {
	return c.listJobsWait(ctx, ns, index, c.wait)
}

func (c *Client) listJobsWait(ctx context.Context, ns string, index uint64, wait time.Duration) ([]*api.JobListStub, uint64, error) {
	ns = namespaceOrDefault(ns)
	q := c.queryOpts(ctx, "jobs.list", ns)
	if index > 0 {
		q.WaitIndex = index
		q.WaitTime = wait
	}
	stubs, meta, err := c.api.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q)
	if err != nil {
		return nil, 0, fmt.Errorf("list jobs in namespace %q: %w", ns, err)
	}
	sort.Slice(stubs, func(i, j int) bool {
		if stubs[i].Namespace != stubs[j].Namespace {
			return stubs[i].Namespace < stubs[j].Namespace
		}
		return stubs[i].ID < stubs[j].ID
	})
	return stubs, meta.LastIndex, nil
}

// JobVersions returns every version Nomad keeps of the job, newest first.
func (c *Client) JobVersions(ctx context.Context, ns, id string) ([]*api.Job, error) {
	ns = namespaceOrDefault(ns)
	versions, _, _, err := c.api.Jobs().Versions(id, false, c.queryOpts(ctx, "job.versions", ns))
	if err != nil {
		return nil, fmt.Errorf("read versions of job %q in namespace %q: %w", id, ns, notFoundAs(err, ErrJobNotFound))
	}
	return versions, nil
}

// PlanResult is the outcome of a dry-run register.
type PlanResult struct {
	// Type is the diff type of the job: "None" when the cluster already runs
	// the spec, "Added" for a new job, "Edited" for a change.
	Type string
	// Diff is Nomad's raw diff. It may contain secrets: hash it (DiffHash),
	// never store, log or show it. Use Text or redact.Diff instead.
	Diff *api.JobDiff
	// Text is a redacted rendering of the diff in the style of
	// `nomad job plan`.
	Text string
	// Tree is the redacted diff as a tree, holding what Text shows.
	Tree *structs.PlanDiff
	// JobModifyIndex is the live job's modify index (0 for a new job), for
	// a check-and-set Register.
	JobModifyIndex uint64
	// Warnings are Nomad's warnings about the job, if any.
	Warnings string
	// FailedPlacements names the task groups the scheduler could not place,
	// with a short reason.
	FailedPlacements map[string]string
}

// InSync reports whether the plan shows no change.
func (p *PlanResult) InSync() bool { return p.Type == DiffTypeNone }

// Diff types Nomad uses.
const (
	DiffTypeNone    = "None"
	DiffTypeAdded   = "Added"
	DiffTypeDeleted = "Deleted"
	DiffTypeEdited  = "Edited"
)

// Plan runs a dry-run register of job with a diff against the live job.
//
// Nomad marks a group's scaling block "Edited" on every plan, even when
// nothing in it changed (the live policy carries server-side indexes); Plan
// drops such empty edits so that a job with a scaling block can be in sync.
func (c *Client) Plan(ctx context.Context, job *api.Job) (*PlanResult, error) {
	if job == nil || job.ID == nil || *job.ID == "" {
		return nil, errors.New("plan job: the job has no ID")
	}
	ns := namespaceOrDefault(deref(job.Namespace))
	resp, _, err := c.api.Jobs().PlanOpts(job, &api.PlanOptions{Diff: true}, c.writeOpts(ctx, "job.plan", ns))
	if err != nil {
		return nil, fmt.Errorf("plan job %q in namespace %q: %w", *job.ID, ns, err)
	}
	if resp.Diff == nil {
		return nil, fmt.Errorf("plan job %q in namespace %q: Nomad returned no diff", *job.ID, ns)
	}
	pruneEmptyEdits(resp.Diff)
	redacted := c.redactor.Diff(resp.Diff)
	res := &PlanResult{
		Type:           resp.Diff.Type,
		Diff:           resp.Diff,
		Text:           FormatDiff(redacted, false),
		Tree:           Tree(redacted),
		JobModifyIndex: resp.JobModifyIndex,
		Warnings:       resp.Warnings,
	}
	if len(resp.FailedTGAllocs) > 0 {
		res.FailedPlacements = make(map[string]string, len(resp.FailedTGAllocs))
		for tg, m := range resp.FailedTGAllocs {
			res.FailedPlacements[tg] = describeFailedPlacement(m)
		}
	}
	return res, nil
}

func describeFailedPlacement(m *api.AllocationMetric) string {
	if m == nil {
		return "placement failed"
	}
	var parts []string
	if m.NodesEvaluated == 0 {
		parts = append(parts, "no nodes were eligible for evaluation")
	}
	keys := func(in map[string]int) []string {
		out := make([]string, 0, len(in))
		for k, v := range in {
			out = append(out, fmt.Sprintf("%s: %d", k, v))
		}
		sort.Strings(out)
		return out
	}
	if len(m.DimensionExhausted) > 0 {
		parts = append(parts, "exhausted "+strings.Join(keys(m.DimensionExhausted), ", "))
	}
	if len(m.ConstraintFiltered) > 0 {
		parts = append(parts, "filtered by "+strings.Join(keys(m.ConstraintFiltered), ", "))
	}
	if len(parts) == 0 {
		return "placement failed"
	}
	return strings.Join(parts, "; ")
}

// KeepLiveCounts sets the count of every task group of job that has a scaling
// block to the count of the same group in live (when live has it), so a plan
// or register never fights an autoscaler. The count is kept within the
// scaling block's min and max, which Nomad enforces. job is modified in place;
// copy it first if it is shared.
func KeepLiveCounts(job, live *api.Job) {
	if job == nil || live == nil {
		return
	}
	liveCounts := make(map[string]int, len(live.TaskGroups))
	for _, tg := range live.TaskGroups {
		if tg != nil && tg.Name != nil && tg.Count != nil {
			liveCounts[*tg.Name] = *tg.Count
		}
	}
	for _, tg := range job.TaskGroups {
		if tg == nil || tg.Name == nil || tg.Scaling == nil {
			continue
		}
		count, ok := liveCounts[*tg.Name]
		if !ok {
			continue
		}
		if tg.Scaling.Min != nil && int64(count) < *tg.Scaling.Min {
			count = int(*tg.Scaling.Min)
		}
		if tg.Scaling.Max != nil && int64(count) > *tg.Scaling.Max {
			count = int(*tg.Scaling.Max)
		}
		tg.Count = &count
	}
}

// RegisterResult is Nomad's answer to a register.
type RegisterResult struct {
	EvalID         string
	JobModifyIndex uint64
	Warnings       string
}

// Register submits job with a check-and-set on its modify index: the job is
// only registered if its current JobModifyIndex is enforceIndex (0 means the
// job must not exist). A lost race gives an error matching ErrIndexMismatch.
func (c *Client) Register(ctx context.Context, job *api.Job, enforceIndex uint64) (*RegisterResult, error) {
	if job == nil || job.ID == nil || *job.ID == "" {
		return nil, errors.New("register job: the job has no ID")
	}
	ns := namespaceOrDefault(deref(job.Namespace))
	opts := &api.RegisterOptions{EnforceIndex: true, ModifyIndex: enforceIndex}
	resp, _, err := c.api.Jobs().RegisterOpts(job, opts, c.writeOpts(ctx, "job.register", ns))
	if err != nil {
		if strings.Contains(err.Error(), enforceIndexErrPrefix) {
			return nil, fmt.Errorf("register job %q in namespace %q: %w: %w", *job.ID, ns, ErrIndexMismatch, err)
		}
		return nil, fmt.Errorf("register job %q in namespace %q: %w", *job.ID, ns, err)
	}
	return &RegisterResult{
		EvalID:         resp.EvalID,
		JobModifyIndex: resp.JobModifyIndex,
		Warnings:       resp.Warnings,
	}, nil
}

// Deregister stops a job (and removes it from Nomad's state when purge is
// set). It returns the evaluation ID, empty for jobs without allocations.
func (c *Client) Deregister(ctx context.Context, ns, jobID string, purge bool) (string, error) {
	ns = namespaceOrDefault(ns)
	evalID, _, err := c.api.Jobs().Deregister(jobID, purge, c.writeOpts(ctx, "job.deregister", ns))
	if err != nil {
		return "", fmt.Errorf("stop job %q in namespace %q: %w", jobID, ns, notFoundAs(err, ErrJobNotFound))
	}
	return evalID, nil
}
