package meta

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// Dispatch meta keys Nops passes to a hook run, for the keys the hook
// declares (SPEC section 5).
const (
	DispatchDeployment = "nops_deployment"
	DispatchJob        = "nops_job"
	DispatchCommit     = "nops_commit"
	DispatchPhase      = "nops_phase"
)

// DispatchMetaKeys returns the dispatch meta keys Nops passes to a hook run,
// in a fixed order. A hook may require no other key.
func DispatchMetaKeys() []string {
	return []string{DispatchDeployment, DispatchJob, DispatchCommit, DispatchPhase}
}

// ValidateHook returns why a parsed job cannot serve as a hook, or "" when
// it can. It is the one hook rule of Nops, used by detection and by
// `nops validate`: a hook must be a parameterized batch job that Nops can
// dispatch, so it may require no dispatch meta other than DispatchMetaKeys
// and no payload.
func ValidateHook(job *api.Job) string {
	typ := ""
	if job.Type != nil {
		typ = *job.Type
	}
	var why []string
	if typ != "batch" {
		why = append(why, fmt.Sprintf("its type is %q, not batch", typ))
	}
	if job.ParameterizedJob == nil {
		why = append(why, "it has no parameterized block")
	}
	if len(why) > 0 {
		return strings.Join(why, " and ")
	}
	var missing []string
	passed := DispatchMetaKeys()
	for _, k := range job.ParameterizedJob.MetaRequired {
		if !slices.Contains(passed, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("it requires dispatch meta %s, which Nops does not pass (it passes %s)",
			strings.Join(missing, ", "), strings.Join(passed, ", ")))
	}
	if job.ParameterizedJob.Payload == "required" {
		why = append(why, "it requires a payload, which Nops does not send")
	}
	return strings.Join(why, " and ")
}

// Declared is a hook as one file declares it: what resolving a hook name
// needs to know of it.
type Declared struct {
	// File is the path of the file that declares the hook.
	File string
	// Job is the hook as parsed.
	Job *api.Job
	// Meta is what Read made of the hook's meta keys.
	Meta *Job
}

// HookProblem resolves the hook name a managed job of namespace declares
// for phase. hook is the hook of that name that a file of the namespace
// declares, nil when none does. It returns "" when the hook can run, else
// the problem in the words a server shows on the job's status and fails its
// deployment with: the hook is missing, is not a valid hook (ValidateHook),
// or has invalid meta keys. Detection and `nops validate` both use it.
func HookProblem(phase structs.HookPhase, name, namespace string, hook *Declared) string {
	if hook == nil {
		return fmt.Sprintf("%s hook %q is not declared by any file in namespace %s", phase, name, namespace)
	}
	if why := ValidateHook(hook.Job); why != "" {
		return fmt.Sprintf("%s hook %q (%s) is not a valid hook: %s", phase, name, hook.File, why)
	}
	if hook.Meta != nil && len(hook.Meta.Problems) > 0 {
		return fmt.Sprintf("%s hook %q is invalid: %s", phase, name, strings.Join(hook.Meta.Problems, "; "))
	}
	return ""
}

// Considered reports whether detection looks at a job at all: a job that is
// neither managed nor a hook and whose meta keys have no problem is ignored,
// and so never conflicts with another file's job of the same ID.
func (j *Job) Considered() bool {
	return j.Kind != Ignored || len(j.Problems) > 0
}

// DuplicateProblem is the problem of job key (namespace/ID) when more than
// one file declares it, where naming those files: a server ignores them
// all.
func DuplicateProblem(key string, where []string) string {
	where = slices.Clone(where)
	sort.Strings(where)
	return fmt.Sprintf("job %s is declared by more than one file (%s): all are ignored", key, strings.Join(where, ", "))
}
