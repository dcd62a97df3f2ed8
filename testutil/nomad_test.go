package testutil

import (
	"slices"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

func TestStartNomad_ServiceJobDeploymentSucceeds(t *testing.T) {
	t.Parallel()
	nomad := StartNomad(t)

	if nomad.NodeID == "" {
		t.Fatal("NodeID is empty")
	}
	node, _, err := nomad.Client.Nodes().Info(nomad.NodeID, nil)
	if err != nil {
		t.Fatalf("reading node: %v", err)
	}
	if !node.Drivers["mock_driver"].Healthy {
		t.Fatalf("mock_driver is not healthy on node %s", node.ID)
	}

	job := nomad.RegisterJobHCL(t, ServiceJobHCL("web",
		WithMeta("nops_managed", "true"),
		WithCount(2),
		WithEnv("GREETING", "hello ${not a template}"),
	))
	if job.ID != "web" || job.Namespace != "default" {
		t.Fatalf("registered job %s/%s, want default/web", job.Namespace, job.ID)
	}
	if got := job.Job.Meta["nops_managed"]; got != "true" {
		t.Fatalf("meta nops_managed = %q, want \"true\"", got)
	}
	if got := job.Job.TaskGroups[0].Tasks[0].Env["GREETING"]; got != "hello ${not a template}" {
		t.Fatalf("env GREETING = %q", got)
	}

	d := nomad.WaitForDeployment(t, job, nomadapi.DeploymentStatusSuccessful)
	if d.JobModifyIndex != job.JobModifyIndex {
		t.Fatalf("deployment job modify index %d, want %d", d.JobModifyIndex, job.JobModifyIndex)
	}
	allocs := nomad.WaitForAllocs(t, job.Namespace, job.ID, nomadapi.AllocClientStatusRunning, 2)
	for _, a := range allocs {
		if a.NodeID != nomad.NodeID {
			t.Fatalf("allocation %s on node %s, want %s", a.ID, a.NodeID, nomad.NodeID)
		}
	}
}

func TestStartNomad_FailingJobDeploymentFails(t *testing.T) {
	t.Parallel()
	nomad := StartNomad(t)

	job := nomad.RegisterJobHCL(t, ServiceJobHCL("broken", WithFailure()))
	d := nomad.WaitForDeployment(t, job, nomadapi.DeploymentStatusFailed)
	if d.Status != nomadapi.DeploymentStatusFailed {
		t.Fatalf("deployment status %q, want failed", d.Status)
	}
	nomad.WaitForAllocs(t, job.Namespace, job.ID, nomadapi.AllocClientStatusFailed, 1)
}

func TestStartNomad_HookDispatchIsIdempotent(t *testing.T) {
	t.Parallel()
	nomad := StartNomad(t)

	hook := nomad.RegisterJobHCL(t, HookJobHCL("backup"))
	if hook.Job.ParameterizedJob == nil {
		t.Fatal("hook job is not parameterized")
	}
	if got := hook.Job.Meta["nops_role"]; got != "hook" {
		t.Fatalf("meta nops_role = %q, want \"hook\"", got)
	}
	if !slices.Contains(hook.Job.ParameterizedJob.MetaOptional, "nops_deployment") {
		t.Fatalf("meta_optional = %v, want nops_deployment among them", hook.Job.ParameterizedJob.MetaOptional)
	}

	meta := map[string]string{"nops_deployment": "d-1", "nops_phase": "pre"}
	opts := &nomadapi.WriteOptions{IdempotencyToken: "d-1/pre/0"}
	first, _, err := nomad.Client.Jobs().Dispatch(hook.ID, meta, nil, "", opts)
	if err != nil {
		t.Fatalf("first dispatch: %v", err)
	}
	second, _, err := nomad.Client.Jobs().Dispatch(hook.ID, meta, nil, "", opts)
	if err != nil {
		t.Fatalf("second dispatch: %v", err)
	}
	if first.DispatchedJobID != second.DispatchedJobID {
		t.Fatalf("dispatches with one idempotency token made two jobs: %s and %s", first.DispatchedJobID, second.DispatchedJobID)
	}

	children, _, err := nomad.Client.Jobs().PrefixList(hook.ID + "/")
	if err != nil {
		t.Fatalf("listing children: %v", err)
	}
	if len(children) != 1 || children[0].ID != first.DispatchedJobID {
		t.Fatalf("children of %s: %d jobs, want exactly %s", hook.ID, len(children), first.DispatchedJobID)
	}

	child := nomad.WaitForJobStatus(t, hook.Namespace, first.DispatchedJobID, "dead")
	if got := child.Meta["nops_deployment"]; got != "d-1" {
		t.Fatalf("child meta nops_deployment = %q, want d-1", got)
	}
	nomad.WaitForAllocs(t, hook.Namespace, first.DispatchedJobID, nomadapi.AllocClientStatusComplete, 1)
}

func TestStartNomad_FailingHookRunFails(t *testing.T) {
	t.Parallel()
	nomad := StartNomad(t)

	hook := nomad.RegisterJobHCL(t, HookJobHCL("migrate", WithExitCode(1)))
	resp, _, err := nomad.Client.Jobs().Dispatch(hook.ID, nil, nil, "", nil)
	if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	nomad.WaitForAllocs(t, hook.Namespace, resp.DispatchedJobID, nomadapi.AllocClientStatusFailed, 1)
	nomad.WaitForJobStatus(t, hook.Namespace, resp.DispatchedJobID, "dead")
}
