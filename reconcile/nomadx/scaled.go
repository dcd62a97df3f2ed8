package nomadx

import (
	"bytes"
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"
)

// JobAtIndex returns the version of a job that Nomad registered at
// jobModifyIndex, from the versions Nomad keeps (six by default). It returns
// nil when that version is no longer kept, and ErrJobNotFound when the job
// is gone.
func (c *Client) JobAtIndex(ctx context.Context, ns, id string, jobModifyIndex uint64) (*api.Job, error) {
	versions, err := c.JobVersions(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	for _, v := range versions {
		if v != nil && v.JobModifyIndex != nil && *v.JobModifyIndex == jobModifyIndex {
			return v, nil
		}
	}
	return nil, nil
}

// OnlyScaledCounts returns nil when two versions of a job differ at most in
// the counts of task groups that have a scaling block in both: the change an
// autoscaler (or `nomad job scale`) makes. Otherwise its error says what else
// differs: a stop, a change of a scaling block, the count of a group without
// one, or any other field.
func OnlyScaledCounts(before, after *api.Job) error {
	if before == nil || after == nil {
		return fmt.Errorf("a version of the job is missing")
	}
	if deref(before.Stop) != deref(after.Stop) {
		return fmt.Errorf("the job was stopped or started")
	}
	scaled := func(j *api.Job) map[string]bool {
		out := map[string]bool{}
		for _, tg := range j.TaskGroups {
			if tg != nil && tg.Name != nil && tg.Scaling != nil {
				out[*tg.Name] = true
			}
		}
		return out
	}
	sb, sa := scaled(before), scaled(after)
	if len(sb) != len(sa) {
		return fmt.Errorf("the task groups with a scaling block changed")
	}
	for name := range sb {
		if !sa[name] {
			return fmt.Errorf("the task groups with a scaling block changed")
		}
	}
	if !bytes.Equal(canonicalJob(before, true), canonicalJob(after, true)) {
		return fmt.Errorf("more than the counts left to an autoscaler changed")
	}
	return nil
}
