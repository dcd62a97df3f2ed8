package reconcile

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/klauspost/compress/s2"

	"github.com/nops-dev/nops/reconcile/nomadx"
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

// TestJobSpec: the kept parse gives back the whole job, a fresh copy each
// time, equal to the parsed one; it holds as is only the identity and meta
// a cycle reads of every job.
func TestJobSpec(t *testing.T) {
	name, ns, typ, image := "web", "prod", "service", "nginx:1.27"
	count := 3
	job := &api.Job{ID: &name, Namespace: &ns, Type: &typ, Meta: map[string]string{"nops_managed": "true"},
		TaskGroups: []*api.TaskGroup{{Name: &name, Count: &count, Tasks: []*api.Task{{Name: "web", Driver: "docker",
			Config: map[string]any{"image": image}}}}}}
	s, want, got := packed(t, job)
	if s.id != name || s.namespace != ns || s.meta["nops_managed"] != "true" {
		t.Fatalf("kept identity %q/%q and meta %v, want %s/%s and the job's", s.namespace, s.id, s.meta, ns, name)
	}
	if s.scaling {
		t.Fatal("a job without a scaling block is said to scale")
	}
	if s.specHash != nomadx.SpecHash(job, nil) {
		t.Fatal("the kept spec hash is not the job's")
	}
	got.TaskGroups[0].Tasks[0].Config["image"] = "changed"
	*got.ID = "changed"
	again, err := s.job()
	if err != nil {
		t.Fatal(err)
	}
	if *again.ID != name || again.TaskGroups[0].Tasks[0].Config["image"] != image {
		t.Fatal("changing one unpacked job changed the next")
	}
	if len(s.packed) >= len(want) || cap(s.packed) >= len(want) {
		t.Errorf("packed job of %d bytes (capacity %d) for %d of JSON", len(s.packed), cap(s.packed), len(want))
	}

	// Against the dictionary of canonical jobs, a canonicalized job packs
	// to well under what it packs to alone.
	job.Canonicalize()
	canon, raw, _ := packed(t, job)
	if alone := len(s2.Encode(nil, raw)); len(canon.packed)*2 > alone {
		t.Errorf("a canonicalized job of %d bytes of JSON packed to %d bytes, %d without the dictionary", len(raw), len(canon.packed), alone)
	} else {
		t.Logf("a canonicalized job of %d bytes of JSON packed to %d bytes, %d without the dictionary", len(raw), len(canon.packed), alone)
	}

	scaled, err := newJobSpec(&api.Job{ID: &name, TaskGroups: []*api.TaskGroup{{Scaling: &api.ScalingPolicy{}}}})
	if err != nil || !scaled.scaling {
		t.Fatal("a job with a scaling block is not said to scale")
	}
}

// TestJobSpec_LargeJob: a job whose JSON is many times the dictionary's
// 64 KB window packs and unpacks whole.
func TestJobSpec_LargeJob(t *testing.T) {
	name := "big"
	job := &api.Job{ID: &name, Meta: map[string]string{}}
	for i := range 300 {
		g := fmt.Sprintf("group-%03d", i)
		job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{Name: &g,
			Tasks: []*api.Task{{Name: g, Driver: "docker", Config: map[string]any{"image": "nginx:" + g}}}})
		job.Meta[g] = strings.Repeat(g, 20)
	}
	job.Canonicalize()
	s, want, _ := packed(t, job)
	if len(want) < 4*65536 || len(s.packed) >= len(want) {
		t.Fatalf("a job of %d bytes of JSON packed to %d: want a job well past the dictionary's window, packed smaller", len(want), len(s.packed))
	}
}

// packed keeps job as a jobSpec and unpacks it, failing the test unless
// the unpacked job's JSON is the job's; it returns the spec, the job's JSON
// and the unpacked job.
func packed(t *testing.T, job *api.Job) (*jobSpec, []byte, *api.Job) {
	t.Helper()
	want, err := encodeJob(job)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newJobSpec(job)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.job()
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := encodeJob(got); string(raw) != string(want) {
		t.Fatalf("the unpacked job (%d bytes of JSON) differs from the packed one:\n%s\nwant\n%s", len(raw), raw, want)
	}
	return s, want, got
}
