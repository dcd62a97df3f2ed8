package reconcile

import (
	"bytes"
	"fmt"

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
	// packed is the s2 block of the job's JSON (encodeJob).
	packed []byte
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
		// EncodeBetter writes into a buffer of the largest size an
		// encoding can take: keep only what it used.
		packed: bytes.Clone(s2.EncodeBetter(nil, raw)),
	}, nil
}

// job returns the whole job, decoded anew: the caller owns it and may
// change it.
func (s *jobSpec) job() (*api.Job, error) {
	raw, err := s2.Decode(nil, s.packed)
	if err != nil {
		return nil, fmt.Errorf("unpack job: %w", err)
	}
	return decodeJob(raw)
}
