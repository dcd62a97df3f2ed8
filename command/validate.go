package command

import (
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/meta"
	"github.com/nops-dev/nops/structs"
)

// jobFacts is what `nops validate` learned of the job declared in one file:
// from Nomad's parse when Nomad is reachable (Source "nomad"), else from the
// literal values of the file's HCL (Source "syntax"), in which case a meta
// value, or the type, that uses a variable or a function is listed in
// Unresolved instead.
type jobFacts struct {
	Source        string
	ID            string
	Namespace     string
	Type          string
	Parameterized bool
	Meta          map[string]string
	Unresolved    []string
}

// apiJob returns the job as the meta rules read it.
func (f *jobFacts) apiJob() *api.Job {
	job := &api.Job{ID: &f.ID, Namespace: &f.Namespace, Meta: f.Meta}
	if f.Type != "" {
		job.Type = &f.Type
	}
	if f.Parameterized {
		job.ParameterizedJob = &api.ParameterizedJobConfig{}
	}
	return job
}

// kindOf returns what the meta keys make of a job, for display.
func kindOf(f *jobFacts) string {
	switch meta.Read("", f.apiJob(), meta.Defaults{Policy: structs.PolicyAuto}).Kind {
	case meta.Managed:
		return "managed"
	case meta.Hook:
		return "hook"
	}
	return ""
}

// checkMetaKeys returns the problems of the nops_* meta keys of the job in
// file (SPEC section 2), each naming the file, the key and the value, with
// the rules of package reconcile/meta, so that the CLI and detection judge a
// job alike. A hook must also be a parameterized batch job. Values listed as
// unresolved are not judged: they need Nomad.
func checkMetaKeys(file string, f *jobFacts) []string {
	job := f.apiJob()
	m := meta.Read(file, job, meta.Defaults{Policy: structs.PolicyAuto})
	problems := m.Problems
	if m.Kind == meta.Hook && !unresolved(f, "type") {
		if why := meta.ValidateHook(job); why != "" {
			problems = append(problems, fmt.Sprintf("%s: hook %s cannot run as a hook: %s", file, f.ID, why))
		}
	}
	return problems
}

func unresolved(f *jobFacts, key string) bool {
	for _, k := range f.Unresolved {
		if k == key {
			return true
		}
	}
	return false
}
