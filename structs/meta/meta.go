// Package meta reads and validates the nops_* meta keys of a parsed job
// (SPEC sections 2 and 20), and owns the rules built on them that detection and
// `nops validate` share: what a hook must be (ValidateHook), how a managed
// job's hook names resolve (HookProblem), which jobs count (Considered) and
// how a duplicate declaration is worded (DuplicateProblem), and what the
// managed jobs' nops_depends_on make of them (DependencyProblems: missing,
// unmanaged, cycles; DependencyOrder). It is pure: the same input gives the
// same answer.
//
// Guarantee: every problem is reported, each naming the file, the key and
// the value, and a job with a problem is never treated as deployable.
package meta

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// Meta keys.
const (
	KeyManaged      = "nops_managed"
	KeyRole         = "nops_role"
	KeyPolicy       = "nops_policy"
	KeyPreHooks     = "nops_pre_hooks"
	KeyPostHooks    = "nops_post_hooks"
	KeyApplyTimeout = "nops_apply_timeout"
	KeyHookTimeout  = "nops_hook_timeout"
	KeyApprovals    = "nops_approvals"
	KeyApprovalTTL  = "nops_approval_ttl"
	KeyDependsOn    = "nops_depends_on"
	// KeyCluster names the Nomad cluster a managed job deploys to, over
	// its repository's cluster (SPEC section 16).
	KeyCluster = "nops_cluster"
)

// MaxApprovals bounds nops_approvals: past it, a deployment waits for more
// distinct approvers than a team has.
const MaxApprovals = 100

// Kind says what a parsed job is to Nops.
type Kind int

const (
	// Ignored: neither managed nor a hook.
	Ignored Kind = iota
	Managed
	Hook
)

// The server-wide timeouts a server has when its configuration sets none:
// its -apply-timeout and -hook-timeout flags default to them, and a
// deployment stored without an apply timeout is given DefaultApplyTimeout.
const (
	DefaultApplyTimeout = 15 * time.Minute
	DefaultHookTimeout  = 10 * time.Minute
)

// Defaults are the server-wide values for jobs that do not set a key.
// ApprovalTTL is approval { ttl }, 0 for none; nops_approvals defaults to
// 1 everywhere.
type Defaults struct {
	Policy       structs.Policy
	ApplyTimeout time.Duration
	HookTimeout  time.Duration
	ApprovalTTL  time.Duration
}

// Job is what the meta keys say of one job.
type Job struct {
	Kind         Kind
	Policy       structs.Policy
	PreHooks     []string
	PostHooks    []string
	ApplyTimeout time.Duration
	HookTimeout  time.Duration
	// Approvals is how many distinct identities must approve a deployment
	// of the job (nops_approvals, 1 by default), and ApprovalTTL how long
	// one may wait for them (nops_approval_ttl, 0 for no limit).
	Approvals   int
	ApprovalTTL time.Duration
	// DependsOn are the jobs whose deployments this job's wait for
	// (nops_depends_on, SPEC section 17), as written, in order; resolve
	// them against the job's namespace with Dependencies.
	DependsOn []Dependency
	// Problems are validation errors, each naming file, key and value.
	Problems []string
}

// Identity returns a parsed job's namespace ("default" when the file names
// none) and ID: what detection and nops validate key a job by.
func Identity(job *api.Job) (namespace, jobID string) {
	namespace = "default"
	if job.Namespace != nil && *job.Namespace != "" {
		namespace = *job.Namespace
	}
	if job.ID != nil {
		jobID = *job.ID
	}
	return namespace, jobID
}

// Read reads the meta keys of a job parsed from file.
func Read(file string, job *api.Job, d Defaults) *Job {
	m := job.Meta
	out := &Job{Policy: d.Policy, ApplyTimeout: d.ApplyTimeout, HookTimeout: d.HookTimeout,
		Approvals: 1, ApprovalTTL: d.ApprovalTTL}
	bad := func(key, value, why string) {
		out.Problems = append(out.Problems, fmt.Sprintf("%s: meta %s = %q: %s", file, key, value, why))
	}
	managed := m[KeyManaged] == "true"
	role, hasRole := m[KeyRole]
	switch {
	case hasRole && role != "hook":
		bad(KeyRole, role, `the only role is "hook"`)
	case hasRole && managed:
		bad(KeyRole, role, "a job cannot be both managed (nops_managed) and a hook")
	}
	switch {
	case managed:
		out.Kind = Managed
	case role == "hook":
		out.Kind = Hook
	default:
		return out
	}
	if v, ok := m[KeyPolicy]; ok {
		p, err := structs.ParsePolicy(v)
		if err != nil {
			bad(KeyPolicy, v, "must be auto, approval or none")
		} else {
			out.Policy = p
		}
	}
	out.PreHooks = hookList(m, KeyPreHooks, bad)
	out.PostHooks = hookList(m, KeyPostHooks, bad)
	if v, ok := m[KeyApplyTimeout]; ok {
		out.ApplyTimeout = duration(KeyApplyTimeout, v, bad, out.ApplyTimeout)
	}
	if v, ok := m[KeyHookTimeout]; ok {
		out.HookTimeout = duration(KeyHookTimeout, v, bad, out.HookTimeout)
	}
	if v, ok := m[KeyApprovals]; ok {
		out.Approvals = approvals(v, bad)
	}
	if v, ok := m[KeyApprovalTTL]; ok {
		out.ApprovalTTL = duration(KeyApprovalTTL, v, bad, out.ApprovalTTL)
	}
	out.DependsOn = dependsOn(m, bad)
	if out.Kind == Hook {
		for _, k := range []string{KeyPolicy, KeyPreHooks, KeyPostHooks, KeyApplyTimeout, KeyApprovals, KeyApprovalTTL, KeyDependsOn} {
			if v, ok := m[k]; ok {
				bad(k, v, "only a managed job takes this key, not a hook")
			}
		}
	}
	if out.Kind == Managed {
		if v, ok := m[KeyHookTimeout]; ok {
			bad(KeyHookTimeout, v, "only a hook takes this key")
		}
	}
	return out
}

func hookList(m map[string]string, key string, bad func(string, string, string)) []string {
	v, ok := m[key]
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		name := strings.TrimSpace(part)
		if name == "" {
			bad(key, v, "has an empty hook name")
			continue
		}
		if seen[name] {
			bad(key, v, fmt.Sprintf("names hook %s twice", name))
			continue
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

// approvals reads nops_approvals: a whole number from 1 to MaxApprovals.
func approvals(v string, bad func(string, string, string)) int {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > MaxApprovals {
		bad(KeyApprovals, v, fmt.Sprintf("must be a whole number from 1 to %d: the distinct identities that must approve", MaxApprovals))
		return 1
	}
	return n
}

func duration(key, v string, bad func(string, string, string), def time.Duration) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		bad(key, v, "is not a Go duration (like 10m)")
		return def
	}
	if d <= 0 {
		bad(key, v, "must be more than zero")
		return def
	}
	return d
}
