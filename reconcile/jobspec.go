package reconcile

import (
	"bytes"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/klauspost/compress/s2"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs/meta"
)

// jobSpec is the parse of one job file as the detector keeps it between
// cycles (the parse cache) and hands it to each cycle. A canonicalized
// api.Job is a few KB of small objects, and kept for every managed job it
// was the largest part of the leader's heap, while a cycle over jobs in
// sync reads only their identity and meta. So a jobSpec holds as is what
// every cycle reads of every job (identity, meta, spec hash, whether a
// group scales) and the whole job only as its JSON, compressed (s2),
// decoded when a cycle needs it: a plan, a deployment, a hook.
type jobSpec struct {
	// namespace and id are the job's identity (meta.Identity), meta its
	// meta (what meta.Read reads).
	namespace, id string
	meta          map[string]string
	// specHash is the job's spec hash without hooks, computed once.
	specHash string
	// scaling says a group of the job has a scaling block.
	scaling bool
	// packed is the s2 block of the job's JSON (encodeJob), against
	// jobDict.
	packed []byte
}

// jobDict is the dictionary the kept jobs are packed against (s2): the JSON
// of two canonicalized jobs, a batch job and a service job with the blocks
// most services have (a network port, a service with a check, a task with
// resources and an environment). A job's JSON is mostly the field names and
// the defaults Canonicalize fills in, the same in every job: packed against
// them, a job takes about a third of what it takes alone (a parameterized
// batch job 369 bytes rather than 1,262, a small service 797 rather than
// 1,860). It is built once, from the linked api package, and never
// changes; a packed job is only read by the process that packed it.
var jobDict = newJobDict()

func newJobDict() *s2.Dict {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	batch := &api.Job{ID: str("batch"), Name: str("batch"), Type: str("batch"),
		Meta:             map[string]string{"nops_managed": "true", "nops_policy": "auto"},
		ParameterizedJob: &api.ParameterizedJobConfig{},
		TaskGroups: []*api.TaskGroup{{Name: str("batch"), Tasks: []*api.Task{{Name: "batch", Driver: "raw_exec",
			Config: map[string]any{"command": "/bin/true"}}}}}}
	service := &api.Job{ID: str("web"), Name: str("web"), Type: str("service"), Datacenters: []string{"dc1"},
		TaskGroups: []*api.TaskGroup{{Name: str("web"), Count: num(2),
			Networks: []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http", To: 8080}}}},
			Services: []*api.Service{{Name: "web", PortLabel: "http",
				Checks: []api.ServiceCheck{{Type: "http", Path: "/health", Interval: 10 * time.Second, Timeout: 2 * time.Second}}}},
			Tasks: []*api.Task{{Name: "web", Driver: "docker", Config: map[string]any{"image": "nginx", "ports": []string{"http"}},
				Env: map[string]string{"PORT": "8080"}, Resources: &api.Resources{CPU: num(200), MemoryMB: num(256)}}}}}}
	var dict []byte
	for _, j := range []*api.Job{batch, service} {
		j.Canonicalize()
		raw, err := encodeJob(j)
		if err != nil {
			// Jobs built above, of JSON-safe values only.
			panic("reconcile: job dictionary: " + err.Error())
		}
		dict = append(dict, raw...)
	}
	return s2.MakeDict(dict, nil)
}

// newJobSpec keeps a parsed job. j is not kept (its meta map is).
func newJobSpec(j *api.Job) (*jobSpec, error) {
	raw, err := encodeJob(j)
	if err != nil {
		return nil, err
	}
	namespace, id := meta.Identity(j)
	return &jobSpec{
		namespace: namespace, id: id, meta: j.Meta,
		specHash: nomadx.SpecHash(j, nil),
		scaling:  hasScaling(j),
		// Encode writes into a buffer of the largest size an encoding
		// can take: keep only what it used.
		packed: bytes.Clone(jobDict.Encode(nil, raw)),
	}, nil
}

// job returns the whole job, decoded anew: the caller owns it and may
// change it.
func (s *jobSpec) job() (*api.Job, error) {
	raw, err := jobDict.Decode(nil, s.packed)
	if err != nil {
		return nil, fmt.Errorf("unpack job: %w", err)
	}
	return decodeJob(raw)
}
