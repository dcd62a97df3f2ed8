// Package validate judges a directory of Nomad job files offline, as a Nops
// server judges the same files committed to a repository: which files are
// job files, whether each parses, and the verdict a server gives every job
// they declare (SPEC section 4), in the same words a server shows on a job's
// status. It is the library behind `nops validate`.
//
// Guarantees: a file is read through Nomad when a Nomad client is given, as
// a server reads it, and else from its literal HCL, where the values that
// need Nomad to be known are listed as unresolved rather than judged. The
// meta rules are those of package structs/meta that detection uses, so the
// two cannot drift apart. Nothing is written anywhere.
package validate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// parsedFile is one job file as `nops validate` read it: its result, and
// the job it declares (nil when it did not parse or declares none). A job
// read from the file's literal HCL (no Nomad) lists in unresolved the meta
// keys, and the parts of the hook shape ("type", "parameterized.*"), whose
// values need Nomad to be known.
type parsedFile struct {
	res        *FileResult
	job        *api.Job
	unresolved []string
}

// FileResult is the verdict on one job file: its parse errors and the
// problems of the job it declares.
type FileResult struct {
	File      string   `json:"file"`
	Variables string   `json:"variables,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	JobID     string   `json:"job_id,omitempty"`
	Role      string   `json:"role,omitempty"`
	CheckedBy string   `json:"checked_by"`
	Errors    []string `json:"errors"`
	// Unresolved lists the meta keys (and "type", "parameterized.*") whose
	// values need Nomad to be known: read offline, they were not judged.
	Unresolved []string `json:"unresolved_meta,omitempty"`
}

// JobVerdict is what a server's detection makes of one job that it looks at
// (a managed job, a hook, or a job whose meta keys have a problem): valid,
// or the problems a server shows on the job's status, in the same words.
type JobVerdict struct {
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

// Files reads every job file, through nomad when it is set (as a server
// does) and else from the file's literal HCL, and judges the jobs they
// declare. checkedBy is what each file's result says checked it. It returns
// the result of every file, in the order of files, and the verdict of every
// job, sorted by job key; an error, not a verdict, when Nomad gave none
// (unreachable, or a permission denied).
func Files(ctx context.Context, nomad *nomadx.Client, files []gitwatch.JobFile, checkedBy string) ([]*FileResult, []*JobVerdict, error) {
	parsed := make([]*parsedFile, 0, len(files))
	results := make([]*FileResult, 0, len(files))
	for _, f := range files {
		p, err := readJob(ctx, nomad, f, checkedBy)
		if err != nil {
			return nil, nil, err
		}
		parsed = append(parsed, p)
		results = append(results, p.res)
	}
	return results, judge(parsed), nil
}

// readJob reads the job of one file: through Nomad when nomad is set, as a
// server does, else from the file's literal HCL. A file Nomad refuses gets
// the parse error a server shows on the repository's status (with the file
// named in place of Nomad's "input.hcl"). It returns an error, not a
// verdict, when Nomad gave none (unreachable, or a permission denied).
func readJob(ctx context.Context, nomad *nomadx.Client, f gitwatch.JobFile, checkedBy string) (*parsedFile, error) {
	res := &FileResult{File: f.Path, Variables: f.VarsPath, CheckedBy: checkedBy, Errors: []string{}}
	p := &parsedFile{res: res}
	if nomad != nil {
		job, err := nomad.Parse(ctx, f.Content, f.Vars)
		switch {
		case err == nil:
			p.job = job
		case errors.Is(err, nomadx.ErrInvalidJob):
			res.Errors = append(res.Errors, parseProblem(f.Path, err))
		default:
			return nil, fmt.Errorf("validate %s: %w", f.Path, err)
		}
		return p, nil
	}
	job, unresolved, problems := literalJob(f.Path, []byte(f.Content))
	switch {
	case len(problems) > 0:
		res.Errors = append(res.Errors, problems...)
	case job == nil:
		res.Errors = append(res.Errors, "no job block")
	default:
		p.job, p.unresolved, res.Unresolved = job, unresolved, unresolved
	}
	return p, nil
}

// parseProblem is how a server words a file Nomad refuses to parse, with
// Nomad's name for the file it parsed ("input.hcl") replaced by its path.
func parseProblem(path string, err error) string {
	return strings.ReplaceAll(fmt.Sprintf("%s: %v", path, err), "input.hcl:", path+":")
}

// judge gives every job the verdict a server gives it (SPEC section 4,
// steps 3, 4 and 6), with the rules of package structs/meta that detection
// uses: the meta keys (meta.Read), which jobs count (Job.Considered), two
// files declaring one job (meta.DuplicateProblem: all are ignored, and a
// hook so declared is missing to the jobs that name it), and the hooks of a
// managed job resolved among the hooks of its namespace (meta.HookProblem),
// and its dependencies (nops_depends_on) judged among every job the files
// declare (meta.DependencyProblems: missing, unmanaged, cycle).
// A hook's own problems, which a server shows only on the jobs that declare
// it, are its verdict too. Every problem is also added to the errors of the
// files that declare the job. Verdicts are sorted by job key.
func judge(files []*parsedFile) []*JobVerdict {
	type entry struct {
		f *parsedFile
		m *meta.Job
	}
	byKey := map[string][]entry{}
	graph := meta.DependencyGraph{Managed: map[string]meta.DependencyNode{}, Declared: map[string]bool{}}
	for _, f := range files {
		if f.job == nil {
			continue
		}
		m := meta.Read(f.res.File, f.job, meta.Defaults{Policy: structs.PolicyAuto})
		f.res.Role = roleOf(m.Kind)
		f.res.Namespace, f.res.JobID = meta.Identity(f.job)
		// A job of another cluster (nops_cluster) is another job, even
		// with the same namespace and ID.
		key := structs.JobKey(f.job.Meta[meta.KeyCluster], f.res.Namespace, f.res.JobID)
		graph.Declared[key] = true
		if !m.Considered() {
			continue
		}
		byKey[key] = append(byKey[key], entry{f, m})
	}
	// As a server does: a job declared twice, or whose declaration has a
	// problem, counts as managed (but depends on nothing), unless it is a
	// hook.
	for key, es := range byKey {
		e := es[0]
		switch {
		case len(es) > 1 || (len(e.m.Problems) > 0 && e.m.Kind != meta.Hook):
			graph.Managed[key] = meta.DependencyNode{File: e.f.res.File}
		case e.m.Kind == meta.Managed:
			graph.Managed[key] = meta.DependencyNode{File: e.f.res.File, Value: e.f.job.Meta[meta.KeyDependsOn],
				DependsOn: e.m.Dependencies(e.f.job.Meta[meta.KeyCluster], e.f.res.Namespace)}
		}
	}
	depProblems := meta.DependencyProblems(graph)
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
	out := make([]*JobVerdict, 0, len(keys))
	for _, key := range keys {
		es := byKey[key]
		first := es[0]
		v := &JobVerdict{Namespace: first.f.res.Namespace, JobID: first.f.res.JobID, Role: roleOf(first.m.Kind), Problems: []string{}}
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
					if p := meta.HookProblem(phase.name, name, v.Namespace, hooks[structs.JobKey("", v.Namespace, name)]); p != "" {
						v.Problems = append(v.Problems, p)
					}
				}
			}
			v.Problems = append(v.Problems, depProblems[key]...)
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
