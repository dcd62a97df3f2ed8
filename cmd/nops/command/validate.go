package command

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// parsedFile is one job file as `nops validate` read it: its result, and
// the job it declares (nil when it did not parse or declares none). A job
// read from the file's literal HCL (no Nomad) lists in unresolved the meta
// keys, and the parts of the hook shape ("type", "parameterized.*"), whose
// values need Nomad to be known.
type parsedFile struct {
	res        *fileResult
	job        *api.Job
	unresolved []string
}

// jobVerdict is what a server's detection makes of one job that it looks at
// (a managed job, a hook, or a job whose meta keys have a problem): valid,
// or the problems a server shows on the job's status, in the same words.
type jobVerdict struct {
	Namespace string `json:"namespace"`
	JobID     string `json:"job_id"`
	// Role is "managed", "hook", or "" for a job that is neither but has a
	// meta problem, or that files declare in different roles.
	Role     string   `json:"role,omitempty"`
	Files    []string `json:"files"`
	Valid    bool     `json:"valid"`
	Problems []string `json:"problems"`
}

// roleOf names what the meta keys make of a job, for display.
func roleOf(k meta.Kind) string {
	switch k {
	case meta.Managed:
		return "managed"
	case meta.Hook:
		return "hook"
	}
	return ""
}

// hookShapeUnresolved reports whether a literal read left the type or the
// parameterized block of a job unknown: whether it can serve as a hook then
// needs Nomad.
func (p *parsedFile) hookShapeUnresolved() bool {
	for _, k := range p.unresolved {
		if k == "type" || strings.HasPrefix(k, "parameterized") {
			return true
		}
	}
	return false
}

// judge gives every job the verdict a server gives it (SPEC section 4,
// steps 3, 4 and 6), with the rules of package structs/meta that detection
// uses: the meta keys (meta.Read), which jobs count (Job.Considered), two
// files declaring one job (meta.DuplicateProblem: all are ignored, and a
// hook so declared is missing to the jobs that name it), and the hooks of a
// managed job resolved among the hooks of its namespace (meta.HookProblem).
// A hook's own problems, which a server shows only on the jobs that declare
// it, are its verdict too. Every problem is also added to the errors of the
// files that declare the job. Verdicts are sorted by job key.
func judge(files []*parsedFile) []*jobVerdict {
	type entry struct {
		f *parsedFile
		m *meta.Job
	}
	byKey := map[string][]entry{}
	for _, f := range files {
		if f.job == nil {
			continue
		}
		m := meta.Read(f.res.File, f.job, meta.Defaults{Policy: structs.PolicyAuto})
		f.res.Role = roleOf(m.Kind)
		f.res.Namespace, f.res.JobID = meta.Identity(f.job)
		if !m.Considered() {
			continue
		}
		key := structs.JobKey(f.res.Namespace, f.res.JobID)
		byKey[key] = append(byKey[key], entry{f, m})
	}
	hooks := map[string]*meta.Declared{}
	for key, es := range byKey {
		if len(es) != 1 || es[0].m.Kind != meta.Hook {
			continue
		}
		job := es[0].f.job
		if es[0].f.hookShapeUnresolved() {
			// Given the benefit of the doubt: its shape needs Nomad.
			job = &api.Job{Type: ptr("batch"), ParameterizedJob: &api.ParameterizedJobConfig{}}
		}
		hooks[key] = &meta.Declared{File: es[0].f.res.File, Job: job, Meta: es[0].m}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*jobVerdict, 0, len(keys))
	for _, key := range keys {
		es := byKey[key]
		first := es[0]
		v := &jobVerdict{Namespace: first.f.res.Namespace, JobID: first.f.res.JobID, Role: roleOf(first.m.Kind), Problems: []string{}}
		for _, e := range es {
			v.Files = append(v.Files, e.f.res.File)
			if e.m.Kind != first.m.Kind {
				v.Role = ""
			}
		}
		switch {
		case len(es) > 1:
			v.Problems = append(v.Problems, meta.DuplicateProblem(key, v.Files))
		case first.m.Kind == meta.Hook:
			v.Problems = append(v.Problems, first.m.Problems...)
			if !first.f.hookShapeUnresolved() {
				if why := meta.ValidateHook(first.f.job); why != "" {
					v.Problems = append(v.Problems, fmt.Sprintf("%s: hook %s cannot run as a hook: %s", first.f.res.File, v.JobID, why))
				}
			}
		case len(first.m.Problems) > 0:
			v.Problems = append(v.Problems, first.m.Problems...)
		default:
			for _, phase := range []struct {
				name  structs.HookPhase
				hooks []string
			}{{structs.PhasePre, first.m.PreHooks}, {structs.PhasePost, first.m.PostHooks}} {
				for _, name := range phase.hooks {
					if p := meta.HookProblem(phase.name, name, v.Namespace, hooks[structs.JobKey(v.Namespace, name)]); p != "" {
						v.Problems = append(v.Problems, p)
					}
				}
			}
		}
		v.Valid = len(v.Problems) == 0
		for _, e := range es {
			e.f.res.Errors = append(e.f.res.Errors, v.Problems...)
		}
		out = append(out, v)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
