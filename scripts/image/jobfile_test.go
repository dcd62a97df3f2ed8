package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/testutil"
)

// TestDockerJobFile parses docs/nops-docker.nomad.hcl with a real Nomad
// agent's job parse endpoint and validates it, both with a registry image
// and loaded from the release archive: the task runs the image with the
// archive fetched unpacked only when given, its templates are rendered for
// the image's user, and its templates and nops arguments are those of
// docs/nops.nomad.hcl, which it follows. Docker is not needed: nothing is
// run.
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
	wantTask := onlyTask(t, parse("nops.nomad.hcl", repo))

	t.Run("registry", func(t *testing.T) {
		task := onlyTask(t, parse("nops-docker.nomad.hcl", repo+"\nimage = \"ghcr.io/nops-dev/nops:1.2.3\"\n"))
		checkDockerTask(t, task, wantTask, "ghcr.io/nops-dev/nops:1.2.3", "")
		if len(task.Artifacts) != 0 {
			t.Errorf("artifacts %+v without image_archive", task.Artifacts)
		}
	})
	t.Run("archive", func(t *testing.T) {
		const url = "https://files.example.com/nops_1.2.3_oci.tar"
		image := "ghcr.io/nops-dev/nops:1.2.3-${attr.cpu.arch}"
		vars := fmt.Sprintf("%s\nimage = %q\nimage_archive = %q\n", repo, "ghcr.io/nops-dev/nops:1.2.3-$${attr.cpu.arch}", url)
		task := onlyTask(t, parse("nops-docker.nomad.hcl", vars))
		checkDockerTask(t, task, wantTask, image, "nops_oci.tar")
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

func onlyTask(t *testing.T, job *nomadapi.Job) *nomadapi.Task {
	t.Helper()
	if len(job.TaskGroups) != 1 || len(job.TaskGroups[0].Tasks) != 1 {
		t.Fatalf("job %s: want one group of one task", *job.ID)
	}
	return job.TaskGroups[0].Tasks[0]
}

// checkDockerTask compares the docker task with the exec task of
// docs/nops.nomad.hcl: the same nops arguments and templates, the
// templates owned by the image's user.
func checkDockerTask(t *testing.T, task, want *nomadapi.Task, image, load string) {
	t.Helper()
	if task.Driver != "docker" || task.Config["image"] != image || task.Config["load"] != load {
		t.Errorf("driver %s, image %v, load %v: want docker, %s, %q", task.Driver, task.Config["image"], task.Config["load"], image, load)
	}
	if ports, _ := task.Config["ports"].([]any); !slices.Equal(ports, []any{"http"}) {
		t.Errorf("ports %v, want [http]", task.Config["ports"])
	}
	if got, wantArgs := fmt.Sprint(task.Config["args"]), fmt.Sprint(want.Config["args"]); got != wantArgs {
		t.Errorf("nops arguments differ from docs/nops.nomad.hcl:\n got %s\nwant %s", got, wantArgs)
	}
	if len(task.Templates) != len(want.Templates) {
		t.Fatalf("%d templates, docs/nops.nomad.hcl has %d", len(task.Templates), len(want.Templates))
	}
	for i, tpl := range task.Templates {
		w := want.Templates[i]
		if *tpl.DestPath != *w.DestPath || *tpl.EmbeddedTmpl != *w.EmbeddedTmpl || *tpl.Perms != *w.Perms || *tpl.ChangeMode != *w.ChangeMode {
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
