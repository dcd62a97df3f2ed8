package reconcile

import (
	"math"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestCopyJob: a copy shares nothing with the cached parse, and a job that
// cannot be copied is an error, never the cached job itself.
func TestCopyJob(t *testing.T) {
	name := "web"
	job := &api.Job{ID: &name, Meta: map[string]string{"k": "v"}}
	c, err := copyJob(job)
	if err != nil {
		t.Fatalf("copyJob: %v", err)
	}
	c.Meta["k"] = "changed"
	if job.Meta["k"] != "v" {
		t.Fatalf("changing the copy changed the cached job: meta %v", job.Meta)
	}

	bad := &api.Job{ID: &name, TaskGroups: []*api.TaskGroup{{Scaling: &api.ScalingPolicy{
		Policy: map[string]any{"target": math.NaN()},
	}}}}
	got, err := copyJob(bad)
	if err == nil {
		t.Fatalf("copyJob of a job JSON cannot encode: no error")
	}
	if got != nil {
		t.Fatalf("copyJob failed (%v) but returned a job: %p (cached %p)", err, got, bad)
	}
}
