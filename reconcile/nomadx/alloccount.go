package nomadx

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// AllocState is what the health counts (CountAllocations) read of an
// allocation, from a list or from an event of the stream.
type AllocState struct {
	// Cluster is the Nomad cluster the allocation was read from.
	Cluster              string
	ID, Namespace, JobID string
	JobVersion           uint64
	DesiredStatus        string
	ClientStatus         string
	// NextAllocation is the allocation that replaced it, if any.
	NextAllocation string
	// InDeployment is set when a deployment placed it; Judged says that
	// the deployment judged its health, and Healthy what it found.
	InDeployment, Judged, Healthy bool
	ModifyIndex                   uint64
}

// Key is the job key (cluster, namespace, job) of the allocation.
func (a AllocState) Key() string {
	return structs.JobKey(a.Cluster, namespaceOrDefault(a.Namespace), a.JobID)
}

// Wanted reports whether Nomad still wants the allocation and has not
// replaced it: one that does not is history to the counts.
func (a AllocState) Wanted() bool {
	return a.DesiredStatus == api.AllocDesiredStatusRun && a.NextAllocation == ""
}

// AllocStateOf reads the state of an allocation listed by a cluster.
func AllocStateOf(cluster string, a *api.AllocationListStub) AllocState {
	s := AllocState{Cluster: cluster, ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, JobVersion: a.JobVersion, DesiredStatus: a.DesiredStatus,
		ClientStatus: a.ClientStatus, NextAllocation: a.NextAllocation, ModifyIndex: a.ModifyIndex}
	if d := a.DeploymentStatus; d != nil {
		s.InDeployment = true
		if d.Healthy != nil {
			s.Judged, s.Healthy = true, *d.Healthy
		}
	}
	return s
}

// Allocations lists the allocations of namespace ns ("*" for every one),
// without their task states, and returns Nomad's index of the list.
func (c *Client) Allocations(ctx context.Context, ns string) ([]AllocState, uint64, error) {
	ns = namespaceOrDefault(ns)
	q := c.queryOpts(ctx, "allocations.list", ns)
	q.Params = map[string]string{"task_states": "false"}
	allocs, meta, err := c.api.Allocations().List(q)
	if err != nil {
		return nil, 0, fmt.Errorf("list allocations of namespace %q: %w", ns, err)
	}
	out := make([]AllocState, 0, len(allocs))
	for _, a := range allocs {
		if a != nil {
			out = append(out, AllocStateOf(c.cluster, a))
		}
	}
	var index uint64
	if meta != nil {
		index = meta.LastIndex
	}
	return out, index, nil
}

// CountAllocations counts allocations by job key, as structs.JobHealth
// describes; a job without any has no entry. Only what Nomad wants running
// counts: an allocation Nomad stopped or replaced is history. A failed or
// lost one counts only at the job's newest version among the allocations
// (a failure of a version since replaced is history too). A running one is
// healthy when the deployment that placed it judged it so, or, placed
// outside a deployment, when it runs; unhealthy when its deployment judged
// it so.
func CountAllocations(allocs []AllocState) map[string]*structs.JobHealth {
	newest := map[string]uint64{}
	for _, a := range allocs {
		if a.Wanted() {
			newest[a.Key()] = max(newest[a.Key()], a.JobVersion)
		}
	}
	out := map[string]*structs.JobHealth{}
	for _, a := range allocs {
		if !a.Wanted() {
			continue
		}
		key := a.Key()
		h := out[key]
		if h == nil {
			h = &structs.JobHealth{}
			out[key] = h
		}
		switch a.ClientStatus {
		case api.AllocClientStatusRunning:
			h.Running++
			switch {
			case !a.InDeployment || (a.Judged && a.Healthy):
				h.Healthy++
			case a.Judged:
				h.Unhealthy++
			}
		case api.AllocClientStatusPending, api.AllocClientStatusUnknown:
			h.Pending++
		case api.AllocClientStatusComplete:
			h.Complete++
		case api.AllocClientStatusFailed, api.AllocClientStatusLost:
			if a.JobVersion == newest[key] {
				h.Failed++
			}
		}
	}
	return out
}
