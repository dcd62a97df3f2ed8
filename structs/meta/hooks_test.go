package meta

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

func hookJob(typ string, pj *api.ParameterizedJobConfig) *api.Job {
	j := job(typ, map[string]string{KeyRole: "hook"})
	j.ParameterizedJob = pj
	return j
}

func TestValidateHook_RefusesWhatNopsCannotDispatch(t *testing.T) {
	cases := []struct {
		name string
		job  *api.Job
		want []string // "" for a valid hook
	}{
		{name: "parameterized batch", job: hookJob("batch", &api.ParameterizedJobConfig{})},
		{name: "requires only the keys Nops passes", job: hookJob("batch", &api.ParameterizedJobConfig{
			MetaRequired: []string{DispatchJob, DispatchPhase}, MetaOptional: []string{"extra"}, Payload: "optional"})},
		{name: "service without parameterized block", job: hookJob("service", nil),
			want: []string{`its type is "service", not batch`, "and it has no parameterized block"}},
		{name: "batch without parameterized block", job: hookJob("batch", nil), want: []string{"it has no parameterized block"}},
		{name: "no type", job: &api.Job{ParameterizedJob: &api.ParameterizedJobConfig{}}, want: []string{`its type is "", not batch`}},
		{name: "requires dispatch meta Nops does not pass", job: hookJob("batch", &api.ParameterizedJobConfig{
			MetaRequired: []string{"nops_job", "target", "region"}}),
			want: []string{"it requires dispatch meta target, region, which Nops does not pass (it passes nops_deployment, nops_job, nops_commit, nops_phase)"}},
		{name: "requires a payload", job: hookJob("batch", &api.ParameterizedJobConfig{Payload: "required"}),
			want: []string{"it requires a payload, which Nops does not send"}},
		{name: "both", job: hookJob("batch", &api.ParameterizedJobConfig{Payload: "required", MetaRequired: []string{"x"}}),
			want: []string{"dispatch meta x", " and it requires a payload"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			why := ValidateHook(tc.job)
			if len(tc.want) == 0 {
				if why != "" {
					t.Fatalf("valid hook refused: %s", why)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Fatalf("ValidateHook = %q, want it to contain %q", why, w)
				}
			}
		})
	}
}

func TestHookProblem_NamesPhaseHookAndReason(t *testing.T) {
	good := hookJob("batch", &api.ParameterizedJobConfig{})
	goodMeta := Read("hooks/backup.nomad.hcl", good, defaults)
	badMeta := hookJob("batch", &api.ParameterizedJobConfig{})
	badMeta.Meta[KeyPolicy] = "auto"
	cases := []struct {
		name string
		hook *Declared
		want string
	}{
		{name: "valid", hook: &Declared{File: "hooks/backup.nomad.hcl", Job: good, Meta: goodMeta}},
		{name: "missing", want: `pre hook "backup" is not declared by any file in namespace prod`},
		{name: "not a hook", hook: &Declared{File: "hooks/backup.nomad.hcl", Job: hookJob("service", nil)},
			want: `pre hook "backup" (hooks/backup.nomad.hcl) is not a valid hook: its type is "service", not batch and it has no parameterized block`},
		{name: "payload", hook: &Declared{File: "h.nomad", Job: hookJob("batch", &api.ParameterizedJobConfig{Payload: "required"})},
			want: `pre hook "backup" (h.nomad) is not a valid hook: it requires a payload, which Nops does not send`},
		{name: "bad meta", hook: &Declared{File: "h.nomad", Job: badMeta, Meta: Read("h.nomad", badMeta, defaults)},
			want: `pre hook "backup" is invalid: h.nomad: meta nops_policy = "auto": only a managed job takes this key, not a hook`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := HookProblem(structs.PhasePre, "backup", "prod", tc.hook); got != tc.want {
				t.Fatalf("HookProblem = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDuplicateProblem_ListsFilesSorted(t *testing.T) {
	where := []string{"b:jobs/web.nomad", "a:web.nomad.hcl"}
	got := DuplicateProblem("default/web", where)
	want := "job default/web is declared by more than one file (a:web.nomad.hcl, b:jobs/web.nomad): all are ignored"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if where[0] != "b:jobs/web.nomad" {
		t.Fatalf("DuplicateProblem reordered its argument: %v", where)
	}
}

func TestConsidered_IgnoresOnlyPlainJobs(t *testing.T) {
	for _, tc := range []struct {
		meta map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{KeyManaged: "false"}, false},
		{map[string]string{KeyManaged: "true"}, true},
		{map[string]string{KeyRole: "hook"}, true},
		{map[string]string{KeyRole: "sidecar"}, true},
	} {
		if got := Read("f", job("service", tc.meta), defaults).Considered(); got != tc.want {
			t.Errorf("meta %v: Considered = %v, want %v", tc.meta, got, tc.want)
		}
	}
}
