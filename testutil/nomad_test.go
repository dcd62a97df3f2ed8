package testutil

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
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

func TestStartNomad_CanaryDeploymentWaitsForPromotion(t *testing.T) {
	t.Parallel()
	nomad := StartNomad(t)

	v1 := nomad.RegisterJobHCL(t, ServiceJobHCL("api", WithCanaries(1, false), WithMeta("version", "1")))
	nomad.WaitForDeployment(t, v1, nomadapi.DeploymentStatusSuccessful)

	v2 := nomad.RegisterJobHCL(t, ServiceJobHCL("api", WithCanaries(1, false), WithMeta("version", "2")))
	d := nomad.WaitForCanariesHealthy(t, v2)
	if d.Status != nomadapi.DeploymentStatusRunning {
		t.Fatalf("deployment status %q while canaries wait, want running", d.Status)
	}
	if _, _, err := nomad.Client.Deployments().PromoteAll(d.ID, nil); err != nil {
		t.Fatalf("promoting: %v", err)
	}
	nomad.WaitForDeployment(t, v2, nomadapi.DeploymentStatusSuccessful)
}

func TestJobHCL_ParsesInNomad(t *testing.T) {
	t.Parallel()
	nomad := StartNomad(t)

	t.Run("service", func(t *testing.T) {
		job := nomad.ParseJob(t, ServiceJobHCL("web",
			WithNamespace("prod"),
			WithMeta("nops_managed", "true"),
			WithMeta("odd.key-name", `quote " backslash \ %{x} ${y}`),
			WithCount(3),
			WithScaling(1, 5),
			WithCanaries(2, true),
			WithAutoRevert(),
			WithUpdate(2*time.Second, 20*time.Second, 40*time.Second),
		))
		if *job.Type != "service" || *job.Namespace != "prod" {
			t.Fatalf("type %q namespace %q", *job.Type, *job.Namespace)
		}
		if got := job.Meta["odd.key-name"]; got != `quote " backslash \ %{x} ${y}` {
			t.Fatalf("meta odd.key-name = %q", got)
		}
		g := job.TaskGroups[0]
		if *g.Count != 3 || g.Scaling == nil || *g.Scaling.Min != 1 || *g.Scaling.Max != 5 {
			t.Fatalf("count %d scaling %+v", *g.Count, g.Scaling)
		}
		u := g.Update
		if *u.Canary != 2 || !*u.AutoPromote || !*u.AutoRevert ||
			*u.MinHealthyTime != 2*time.Second || *u.HealthyDeadline != 20*time.Second || *u.ProgressDeadline != 40*time.Second {
			t.Fatalf("update block %+v", u)
		}
		task := g.Tasks[0]
		if task.Driver != "mock_driver" || task.Config["run_for"] != "1h0m0s" || *task.Resources.CPU != 10 || *task.Resources.MemoryMB != 16 {
			t.Fatalf("task %+v config %v", task, task.Config)
		}
	})

	t.Run("failing service", func(t *testing.T) {
		job := nomad.ParseJob(t, ServiceJobHCL("broken", WithFailure()))
		g := job.TaskGroups[0]
		if g.Tasks[0].Config["start_error"] == nil || *g.RestartPolicy.Attempts != 0 || *g.ReschedulePolicy.Attempts != 0 || *g.Update.ProgressDeadline != 0 {
			t.Fatalf("config %v restart %+v reschedule %+v update %+v", g.Tasks[0].Config, g.RestartPolicy, g.ReschedulePolicy, g.Update)
		}
	})

	t.Run("batch", func(t *testing.T) {
		job := nomad.ParseJob(t, BatchJobHCL("once", WithRunFor(time.Second), WithExitCode(3)))
		task := job.TaskGroups[0].Tasks[0]
		if *job.Type != "batch" || job.ParameterizedJob != nil || task.Config["run_for"] != "1s" || task.Config["exit_code"] != float64(3) {
			t.Fatalf("type %q parameterized %v config %v", *job.Type, job.ParameterizedJob, task.Config)
		}
	})

	t.Run("hook", func(t *testing.T) {
		job := nomad.ParseJob(t, HookJobHCL("backup", WithHookMeta([]string{"nops_deployment"}, nil), WithMeta("nops_hook_timeout", "1m")))
		p := job.ParameterizedJob
		if p == nil || !slices.Equal(p.MetaRequired, []string{"nops_deployment"}) || len(p.MetaOptional) != 0 {
			t.Fatalf("parameterized %+v", p)
		}
		if job.Meta["nops_role"] != "hook" || job.Meta["nops_hook_timeout"] != "1m" {
			t.Fatalf("meta %v", job.Meta)
		}
	})
}

func TestHCLString_RoundTrips(t *testing.T) {
	inputs := []string{
		"plain",
		`a"b\c`,
		"line\nnext\tx\r",
		"${var} %{if}",
		"$ alone % too, trailing $",
		"double $${x} and $$$",
		"percent %%{x}",
		"mixed ${a}%{b}$",
		"bell\a and nul \x00",
		"ünïcode ✓",
		"",
	}
	for _, in := range inputs {
		quoted := hclString(in)
		expr, diags := hclsyntax.ParseExpression([]byte(quoted), "test.hcl", hcl.InitialPos)
		if diags.HasErrors() {
			t.Errorf("hclString(%q) = %s does not parse: %v", in, quoted, diags)
			continue
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() {
			t.Errorf("hclString(%q) = %s does not evaluate: %v", in, quoted, diags)
			continue
		}
		if got := v.AsString(); got != in {
			t.Errorf("hclString(%q) = %s, which HCL reads as %q", in, quoted, got)
		}
	}
}

// TestStartNomad_WithACL: an agent started WithACL refuses anonymous
// requests, answers the management token its Client carries, and hands out
// client tokens of a given policy.
func TestStartNomad_WithACL(t *testing.T) {
	t.Parallel()
	a := StartNomad(t, WithACL())
	if a.ManagementToken == "" {
		t.Fatal("no management token")
	}
	anon, err := nomadapi.NewClient(&nomadapi.Config{Address: a.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := anon.Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("anonymous job list: %v, want 403", err)
	}
	if _, _, err := a.Client.Jobs().List(nil); err != nil {
		t.Fatalf("job list with the management token: %v", err)
	}
	secret := a.ACLToken(t, "reader", `namespace "default" { capabilities = ["list-jobs"] }`, "")
	reader, err := nomadapi.NewClient(&nomadapi.Config{Address: a.Addr, SecretID: secret})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reader.Jobs().List(nil); err != nil {
		t.Fatalf("job list with the reader token: %v", err)
	}
	if _, _, err := reader.Nodes().List(nil); err == nil {
		t.Fatal("the reader token may list nodes")
	}
}
