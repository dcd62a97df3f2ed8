package meta

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

func job(typ string, meta map[string]string) *api.Job {
	id := "web"
	return &api.Job{ID: &id, Type: &typ, Meta: meta}
}

var defaults = Defaults{Policy: structs.PolicyAuto, ApplyTimeout: 15 * time.Minute, HookTimeout: 10 * time.Minute}

func TestRead_KindPolicyHooksAndTimeoutsFromMeta(t *testing.T) {
	cases := []struct {
		name     string
		meta     map[string]string
		kind     Kind
		policy   structs.Policy
		pre      []string
		post     []string
		apply    time.Duration
		hook     time.Duration
		problems []string
	}{
		{name: "no meta", kind: Ignored, policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute},
		{name: "managed false is ignored", meta: map[string]string{KeyManaged: "false", KeyPolicy: "bogus"}, kind: Ignored,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute},
		{name: "managed with defaults", meta: map[string]string{KeyManaged: "true"}, kind: Managed,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute},
		{name: "managed with every key", meta: map[string]string{KeyManaged: "true", KeyPolicy: "approval",
			KeyPreHooks: "backup, migrate", KeyPostHooks: "smoke", KeyApplyTimeout: "5m"}, kind: Managed,
			policy: structs.PolicyApproval, pre: []string{"backup", "migrate"}, post: []string{"smoke"},
			apply: 5 * time.Minute, hook: 10 * time.Minute},
		{name: "hook with timeout", meta: map[string]string{KeyRole: "hook", KeyHookTimeout: "30s"}, kind: Hook,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 30 * time.Second},
		{name: "bad policy", meta: map[string]string{KeyManaged: "true", KeyPolicy: "sometimes"}, kind: Managed,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute,
			problems: []string{`jobs/web.nomad.hcl: meta nops_policy = "sometimes": must be auto, approval or none`}},
		{name: "bad and negative timeouts", meta: map[string]string{KeyManaged: "true", KeyApplyTimeout: "soon"}, kind: Managed,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute,
			problems: []string{`jobs/web.nomad.hcl: meta nops_apply_timeout = "soon": is not a Go duration`}},
		{name: "zero hook timeout", meta: map[string]string{KeyRole: "hook", KeyHookTimeout: "0s"}, kind: Hook,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute,
			problems: []string{`meta nops_hook_timeout = "0s": must be more than zero`}},
		{name: "both managed and hook", meta: map[string]string{KeyManaged: "true", KeyRole: "hook"}, kind: Managed,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute,
			problems: []string{`meta nops_role = "hook": a job cannot be both managed`}},
		{name: "unknown role", meta: map[string]string{KeyRole: "sidecar"}, kind: Ignored,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute,
			problems: []string{`meta nops_role = "sidecar": the only role is "hook"`}},
		{name: "hook list with a duplicate and a blank", meta: map[string]string{KeyManaged: "true", KeyPreHooks: "a,,a"}, kind: Managed,
			policy: structs.PolicyAuto, pre: []string{"a"}, apply: 15 * time.Minute, hook: 10 * time.Minute,
			problems: []string{`meta nops_pre_hooks = "a,,a": has an empty hook name`, `meta nops_pre_hooks = "a,,a": names hook a twice`}},
		{name: "hook takes no managed keys", meta: map[string]string{KeyRole: "hook", KeyPolicy: "auto"}, kind: Hook,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: 10 * time.Minute,
			problems: []string{`meta nops_policy = "auto": only a managed job takes this key`}},
		{name: "managed takes no hook timeout", meta: map[string]string{KeyManaged: "true", KeyHookTimeout: "1m"}, kind: Managed,
			policy: structs.PolicyAuto, apply: 15 * time.Minute, hook: time.Minute,
			problems: []string{`meta nops_hook_timeout = "1m": only a hook takes this key`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Read("jobs/web.nomad.hcl", job("service", tc.meta), defaults)
			if got.Kind != tc.kind || got.Policy != tc.policy || got.ApplyTimeout != tc.apply || got.HookTimeout != tc.hook {
				t.Fatalf("got kind %v policy %s apply %s hook %s", got.Kind, got.Policy, got.ApplyTimeout, got.HookTimeout)
			}
			if strings.Join(got.PreHooks, ",") != strings.Join(tc.pre, ",") || strings.Join(got.PostHooks, ",") != strings.Join(tc.post, ",") {
				t.Fatalf("hooks pre %v post %v", got.PreHooks, got.PostHooks)
			}
			if len(got.Problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d", got.Problems, len(tc.problems))
			}
			for i, want := range tc.problems {
				if !strings.Contains(got.Problems[i], want) || !strings.HasPrefix(got.Problems[i], "jobs/web.nomad.hcl: ") {
					t.Fatalf("problem %q does not name file, key and value as %q", got.Problems[i], want)
				}
			}
		})
	}
}

// TestRead_ApprovalKeys covers the approval rules' keys (SPEC section 20):
// nops_approvals defaults to 1, nops_approval_ttl to the server's TTL, and
// a bad value is a problem that names file, key and value, as detection
// and nops validate both report it.
func TestRead_ApprovalKeys(t *testing.T) {
	withTTL := Defaults{Policy: structs.PolicyApproval, ApplyTimeout: time.Minute, HookTimeout: time.Minute, ApprovalTTL: 72 * time.Hour}
	cases := []struct {
		name      string
		meta      map[string]string
		defaults  Defaults
		approvals int
		ttl       time.Duration
		problem   string
	}{
		{name: "defaults: one approval, no TTL", meta: map[string]string{KeyManaged: "true"}, defaults: defaults, approvals: 1},
		{name: "the server's TTL", meta: map[string]string{KeyManaged: "true"}, defaults: withTTL, approvals: 1, ttl: 72 * time.Hour},
		{name: "two approvals and a TTL of a day", meta: map[string]string{KeyManaged: "true", KeyApprovals: "2", KeyApprovalTTL: "24h"},
			defaults: withTTL, approvals: 2, ttl: 24 * time.Hour},
		{name: "zero approvals", meta: map[string]string{KeyManaged: "true", KeyApprovals: "0"}, defaults: defaults, approvals: 1,
			problem: `meta nops_approvals = "0": must be a whole number from 1 to 100`},
		{name: "not a number", meta: map[string]string{KeyManaged: "true", KeyApprovals: "two"}, defaults: defaults, approvals: 1,
			problem: `meta nops_approvals = "two": must be a whole number`},
		{name: "too many", meta: map[string]string{KeyManaged: "true", KeyApprovals: "101"}, defaults: defaults, approvals: 1,
			problem: `meta nops_approvals = "101": must be a whole number from 1 to 100`},
		{name: "a TTL that is no duration", meta: map[string]string{KeyManaged: "true", KeyApprovalTTL: "3 days"}, defaults: withTTL,
			approvals: 1, ttl: 72 * time.Hour, problem: `meta nops_approval_ttl = "3 days": is not a Go duration`},
		{name: "a negative TTL", meta: map[string]string{KeyManaged: "true", KeyApprovalTTL: "-1h"}, defaults: defaults,
			approvals: 1, problem: `meta nops_approval_ttl = "-1h": must be more than zero`},
		{name: "a hook takes neither key", meta: map[string]string{KeyRole: "hook", KeyApprovals: "2"}, defaults: defaults,
			approvals: 2, problem: `meta nops_approvals = "2": only a managed job takes this key`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Read("jobs/web.nomad.hcl", job("service", tc.meta), tc.defaults)
			if got.Approvals != tc.approvals || got.ApprovalTTL != tc.ttl {
				t.Fatalf("approvals %d TTL %s, want %d and %s", got.Approvals, got.ApprovalTTL, tc.approvals, tc.ttl)
			}
			switch {
			case tc.problem == "" && len(got.Problems) > 0:
				t.Fatalf("problems %q, want none", got.Problems)
			case tc.problem != "" && (len(got.Problems) != 1 || !strings.Contains(got.Problems[0], tc.problem) ||
				!strings.HasPrefix(got.Problems[0], "jobs/web.nomad.hcl: ")):
				t.Fatalf("problems %q, want one naming the file and %q", got.Problems, tc.problem)
			}
		})
	}
}
