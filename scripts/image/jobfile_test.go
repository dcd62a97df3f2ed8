package main

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/testutil"
)

// TestDockerJobFile parses docs/nops-docker.nomad.hcl with a real Nomad
// agent's job parse endpoint and validates it, both with a registry image
// and loaded from the release archive: the task runs the image with the
// archive fetched unpacked only when given, its templates are rendered for
// the image's user, and it follows docs/nops.nomad.hcl: the same count,
// ports, services, update strategy, templates, nops arguments (but for
// -bind: a container binds 0.0.0.0 and advertises the host's address) and
// resources, with every port published 1:1. Docker is not needed: nothing
// is run.
func TestDockerJobFile(t *testing.T) {
	t.Parallel()
	nomad := testutil.StartNomad(t)
	root := repoRoot(t)
	parse := func(file, vars string) *nomadapi.Job {
		t.Helper()
		hcl := readFile(t, filepath.Join(root, "docs", file))
		job, err := nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(hcl), Variables: vars, Canonicalize: true})
		if err != nil {
			t.Fatalf("parse docs/%s: %v", file, err)
		}
		if _, _, err := nomad.Client.Jobs().Validate(job, nil); err != nil {
			t.Fatalf("validate docs/%s: %v", file, err)
		}
		return job
	}
	const repo = `repository = "https://git.example.com/ops/jobs.git#main:nomad"`
	wantGroup := onlyGroup(t, parse("nops.nomad.hcl", repo))

	t.Run("registry", func(t *testing.T) {
		group := onlyGroup(t, parse("nops-docker.nomad.hcl", repo+"\nimage = \"ghcr.io/nops-dev/nops:1.2.3\"\n"))
		checkDockerGroup(t, group, wantGroup)
		task := group.Tasks[0]
		checkDockerTask(t, task, wantGroup.Tasks[0], "ghcr.io/nops-dev/nops:1.2.3", "")
		if len(task.Artifacts) != 0 {
			t.Errorf("artifacts %+v without image_archive", task.Artifacts)
		}
	})
	t.Run("archive", func(t *testing.T) {
		const url = "https://files.example.com/nops_1.2.3_oci.tar"
		image := "ghcr.io/nops-dev/nops:1.2.3-${attr.cpu.arch}"
		vars := fmt.Sprintf("%s\nimage = %q\nimage_archive = %q\n", repo, "ghcr.io/nops-dev/nops:1.2.3-$${attr.cpu.arch}", url)
		group := onlyGroup(t, parse("nops-docker.nomad.hcl", vars))
		checkDockerGroup(t, group, wantGroup)
		task := group.Tasks[0]
		checkDockerTask(t, task, wantGroup.Tasks[0], image, "nops_oci.tar")
		if len(task.Artifacts) != 1 {
			t.Fatalf("artifacts %+v, want the archive", task.Artifacts)
		}
		a := task.Artifacts[0]
		if *a.GetterSource != url || *a.RelativeDest != "local/nops_oci.tar" || *a.GetterMode != "file" || a.GetterOptions["archive"] != "false" {
			t.Errorf("artifact source %s, destination %s, mode %s, options %v: want %s fetched as a file, not unpacked, to local/nops_oci.tar",
				*a.GetterSource, *a.RelativeDest, *a.GetterMode, a.GetterOptions, url)
		}
	})
}

func onlyGroup(t *testing.T, job *nomadapi.Job) *nomadapi.TaskGroup {
	t.Helper()
	if len(job.TaskGroups) != 1 || len(job.TaskGroups[0].Tasks) != 1 {
		t.Fatalf("job %s: want one group of one task", *job.ID)
	}
	return job.TaskGroups[0]
}

// checkDockerGroup compares the docker job's group with the one of
// docs/nops.nomad.hcl: the same count, ports, services and update
// strategy, and no port mapped to another container port, so that the
// ports a server advertises are those the host publishes.
func checkDockerGroup(t *testing.T, group, want *nomadapi.TaskGroup) {
	t.Helper()
	if *group.Count != *want.Count {
		t.Errorf("count %d, docs/nops.nomad.hcl has %d", *group.Count, *want.Count)
	}
	if len(group.Networks) != 1 || len(want.Networks) != 1 {
		t.Fatalf("%d networks, docs/nops.nomad.hcl has %d: want one each", len(group.Networks), len(want.Networks))
	}
	got, w := group.Networks[0], want.Networks[0]
	if !reflect.DeepEqual(got.ReservedPorts, w.ReservedPorts) || !reflect.DeepEqual(got.DynamicPorts, w.DynamicPorts) {
		t.Errorf("ports %+v %+v, docs/nops.nomad.hcl has %+v %+v", got.ReservedPorts, got.DynamicPorts, w.ReservedPorts, w.DynamicPorts)
	}
	for _, p := range slices.Concat(got.ReservedPorts, got.DynamicPorts) {
		if p.To != 0 {
			t.Errorf("port %s maps to container port %d: the container must listen on the host's port", p.Label, p.To)
		}
	}
	if !reflect.DeepEqual(group.Services, want.Services) {
		t.Errorf("services differ from docs/nops.nomad.hcl's:\n got %s\nwant %s", describeServices(group.Services), describeServices(want.Services))
	}
	if !reflect.DeepEqual(group.Update, want.Update) {
		t.Errorf("update block differs from docs/nops.nomad.hcl's: %s, want %s", describeUpdate(group.Update), describeUpdate(want.Update))
	}
}

func describeUpdate(u *nomadapi.UpdateStrategy) string {
	if u == nil {
		return "none"
	}
	return fmt.Sprintf("max_parallel %d, min_healthy_time %s, healthy_deadline %s, health_check %s",
		*u.MaxParallel, *u.MinHealthyTime, *u.HealthyDeadline, *u.HealthCheck)
}

func describeServices(services []*nomadapi.Service) string {
	var out []string
	for _, s := range services {
		out = append(out, fmt.Sprintf("%s(%s, %s, checks %+v)", s.Name, s.PortLabel, s.Provider, s.Checks))
	}
	return strings.Join(out, " ")
}

// checkDockerTask compares the docker task with the exec task of
// docs/nops.nomad.hcl: the same nops arguments but -bind, templates, kill
// signal and resources, the templates owned by the image's user, and every
// port published.
func checkDockerTask(t *testing.T, task, want *nomadapi.Task, image, load string) {
	t.Helper()
	if task.Driver != "docker" || task.Config["image"] != image || task.Config["load"] != load {
		t.Errorf("driver %s, image %v, load %v: want docker, %s, %q", task.Driver, task.Config["image"], task.Config["load"], image, load)
	}
	if ports, _ := task.Config["ports"].([]any); !slices.Equal(ports, []any{"http", "rpc", "serf"}) {
		t.Errorf("ports %v, want [http rpc serf]", task.Config["ports"])
	}
	args, _ := task.Config["args"].([]any)
	wantArgs, _ := want.Config["args"].([]any)
	// A container does not hold the host's address: it listens on all of
	// its own, and advertises the host's, where its ports are published.
	wantArgs = slices.Clone(wantArgs)
	if i := slices.Index(wantArgs, any("-bind")); i >= 0 && i+1 < len(wantArgs) {
		wantArgs[i+1] = "0.0.0.0"
	} else {
		t.Errorf("docs/nops.nomad.hcl passes no -bind: %v", wantArgs)
	}
	if got, w := fmt.Sprint(args), fmt.Sprint(wantArgs); got != w {
		t.Errorf("nops arguments differ from docs/nops.nomad.hcl (but for -bind 0.0.0.0):\n got %s\nwant %s", got, w)
	}
	if i := slices.Index(args, any("-advertise")); i < 0 || i+1 >= len(args) || args[i+1] != "${NOMAD_IP_serf}" {
		t.Errorf("nops arguments %v do not advertise the host's address ${NOMAD_IP_serf}", args)
	}
	if task.KillSignal != want.KillSignal || *task.KillTimeout != *want.KillTimeout {
		t.Errorf("kill signal %s, timeout %s; docs/nops.nomad.hcl has %s, %s", task.KillSignal, *task.KillTimeout, want.KillSignal, *want.KillTimeout)
	}
	if len(task.Templates) != len(want.Templates) {
		t.Fatalf("%d templates, docs/nops.nomad.hcl has %d", len(task.Templates), len(want.Templates))
	}
	for i, tpl := range task.Templates {
		w := want.Templates[i]
		if *tpl.DestPath != *w.DestPath || *tpl.EmbeddedTmpl != *w.EmbeddedTmpl || *tpl.Perms != *w.Perms ||
			*tpl.ChangeMode != *w.ChangeMode || *tpl.ChangeSignal != *w.ChangeSignal {
			t.Errorf("template %s differs from docs/nops.nomad.hcl's %s", *tpl.DestPath, *w.DestPath)
		}
		if tpl.Uid == nil || *tpl.Uid != nonrootID || tpl.Gid == nil || *tpl.Gid != nonrootID {
			t.Errorf("template %s is not rendered for the image's user %d", *tpl.DestPath, nonrootID)
		}
	}
	if *task.Resources.CPU != *want.Resources.CPU || *task.Resources.MemoryMB != *want.Resources.MemoryMB {
		t.Errorf("resources %d MHz, %d MB; docs/nops.nomad.hcl has %d, %d", *task.Resources.CPU, *task.Resources.MemoryMB, *want.Resources.CPU, *want.Resources.MemoryMB)
	}
}
