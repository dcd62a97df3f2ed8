package reconcile

import (
	"testing"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// TestActivityConcerns: an event wakes a deployment only for what it waits
// on: its Nomad deployment or its job while applying, its hook runs' child
// jobs while in a hook phase; never for another namespace, another job, a
// hook of another deployment, or an empty event.
func TestActivityConcerns(t *testing.T) {
	applying := &structs.Deployment{Namespace: "default", JobID: "web", State: structs.StateApplying, NomadDeploymentID: "nd-1"}
	hooked := &structs.Deployment{Namespace: "prod", JobID: "api", State: structs.StatePreHook,
		Hooks:    []structs.FrozenHook{{Name: "backup", Phase: structs.PhasePre, RevisionJobID: "backup-0123abcd"}},
		HookRuns: []structs.HookRun{{Hook: "backup", Phase: structs.PhasePre, State: structs.HookRunRunning, DispatchedJobID: "backup-0123abcd/dispatch-1-aa"}}}
	waiting := &structs.Deployment{Namespace: "default", JobID: "web", State: structs.StatePendingApproval}
	for _, c := range []struct {
		name string
		d    *structs.Deployment
		a    nomadx.Activity
		want bool
	}{
		{"its job", applying, nomadx.Activity{Topic: "Allocation", JobID: "web"}, true},
		{"its Nomad deployment", applying, nomadx.Activity{Topic: "Deployment", Namespace: "default", DeploymentID: "nd-1"}, true},
		{"another job", applying, nomadx.Activity{Topic: "Allocation", Namespace: "default", JobID: "webx"}, false},
		{"another namespace", applying, nomadx.Activity{Topic: "Allocation", Namespace: "prod", JobID: "web"}, false},
		{"empty", applying, nomadx.Activity{}, false},
		{"its hook run", hooked, nomadx.Activity{Topic: "Allocation", Namespace: "prod", JobID: "backup-0123abcd/dispatch-1-aa"}, true},
		{"a run of its hook not yet recorded", hooked, nomadx.Activity{Topic: "Allocation", Namespace: "prod", JobID: "backup-0123abcd/dispatch-2-bb"}, true},
		{"the hook revision itself", hooked, nomadx.Activity{Topic: "Allocation", Namespace: "prod", JobID: "backup-0123abcd"}, false},
		{"its job before the register", hooked, nomadx.Activity{Topic: "Allocation", Namespace: "prod", JobID: "api"}, false},
		{"another deployment's hook", hooked, nomadx.Activity{Topic: "Allocation", Namespace: "prod", JobID: "backup-ffffffff/dispatch-1"}, false},
		{"waiting for approval", waiting, nomadx.Activity{Topic: "Allocation", Namespace: "default", JobID: "web"}, false},
	} {
		if got := activityConcerns(c.d, []nomadx.Activity{c.a}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
