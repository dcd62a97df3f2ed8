package command

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nops-dev/nops/cmd/nops/command/validate"
	"github.com/nops-dev/nops/testutil"
)

// jobTree writes files (path -> content) under a new directory.
func jobTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, content)
	}
	return dir
}

type validateOutput struct {
	CheckedBy string                 `json:"checked_by"`
	Files     []*validate.FileResult `json:"files"`
}

func (o *validateOutput) file(t *testing.T, name string) *validate.FileResult {
	t.Helper()
	for _, f := range o.Files {
		if f.File == name {
			return f
		}
	}
	t.Fatalf("no result for %s in %+v", name, o.Files)
	return nil
}

func TestValidate_Offline(t *testing.T) {
	dir := jobTree(t, map[string]string{
		"web.nomad.hcl": `job "web" {
  meta {
    nops_managed = "true"
    nops_policy  = var.policy
  }
  group "app" {}
}
`,
		"web.vars.hcl":             `policy = "auto"`,
		"hooks/backup.nomad":       "job \"backup\" {\n  type = \"batch\"\n  meta = { nops_role = \"hook\" }\n  parameterized {}\n}\n",
		"team/dup.nomad.hcl":       "job \"web\" {\n  meta { nops_managed = \"true\" }\n}\n",
		"team/plain-dup.nomad.hcl": "job \"backup\" {}\n",
		"team/broken.nomad.hcl":    "job \"broken\" {\n  meta = {\n",
		"notes.hcl":                "not a job file",
		".git/ignored.nomad.hcl":   "job \"ignored\" {",
		"team/novalue.nomad.hcl":   "variable \"x\" {}\n",
		"team/two-jobs.nomad.hcl":  "job \"a\" {}\njob \"b\" {}\n",
		"team/literal.nomad.hcl":   "job \"lit\" {\n  namespace = \"prod\"\n  meta { nops_managed = true }\n}\n",
		"team/sub/deep/x.nomad":    "job \"deep\" {}\n",
		"team/sub/deep/x.vars.hcl": "",
		"team/policy.nomad.hcl":    "job \"pol\" {\n  meta {\n    nops_managed = \"true\"\n    nops_policy = \"sometimes\"\n  }\n}\n",
		"team/badhook.nomad.hcl":   "job \"bh\" {\n  meta { nops_role = \"hook\" }\n}\n",
		"team/varhook.nomad.hcl":   "job \"vh\" {\n  type = var.t\n  meta { nops_role = \"hook\" }\n  parameterized {}\n}\n",
	})
	c := newCLI(t, nil)
	r := c.run("validate", "-offline", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "validate", r.stdout,
		"ok     hooks/backup.nomad (default/backup, hook)",
		"error  team/broken.nomad.hcl", "team/broken.nomad.hcl:3,1-1",
		"error  team/dup.nomad.hcl (default/web, managed)",
		"job default/web is declared by more than one file (team/dup.nomad.hcl, web.nomad.hcl): all are ignored",
		"ok     team/plain-dup.nomad.hcl (default/backup)",
		"error  web.nomad.hcl (default/web, managed, needs Nomad to check: nops_policy)",
		"error  team/policy.nomad.hcl (default/pol, managed)", `team/policy.nomad.hcl: meta nops_policy = "sometimes": must be auto, approval or none`,
		"error  team/badhook.nomad.hcl (default/bh, hook)", `hook bh cannot run as a hook: its type is "service", not batch and it has no parameterized block`,
		"ok     team/varhook.nomad.hcl (default/vh, hook, needs Nomad to check: type)",
		"error  team/novalue.nomad.hcl", "no job block",
		"error  team/two-jobs.nomad.hcl", "team/two-jobs.nomad.hcl:2,1-8: a file declares one job",
		"ok     team/literal.nomad.hcl (prod/lit, managed)",
		"ok     team/sub/deep/x.nomad (default/deep)",
		"Jobs:\nvalid    default/backup (hook: hooks/backup.nomad)\ninvalid  default/bh (hook: team/badhook.nomad.hcl)\n"+
			"invalid  default/pol (managed: team/policy.nomad.hcl)\nvalid    default/vh (hook: team/varhook.nomad.hcl)\n"+
			"invalid  default/web (managed: team/dup.nomad.hcl, web.nomad.hcl)\nvalid    prod/lit (managed: team/literal.nomad.hcl)\n",
		"12 files, 7 with errors; 6 jobs, 3 invalid. Offline")
	if strings.Contains(r.stdout, "ignored.nomad.hcl") || strings.Contains(r.stdout, "notes.hcl") {
		t.Errorf("validate read files it must skip:\n%s", r.stdout)
	}

	var out validateOutput
	r = c.run("validate", "-offline", "-json", dir)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
		t.Fatalf("-json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if out.CheckedBy != "syntax" || len(out.Files) != 12 {
		t.Errorf("-json: %+v", out)
	}
	if web := out.file(t, "web.nomad.hcl"); web.Variables != "web.vars.hcl" || !slices.Equal(web.Unresolved, []string{"nops_policy"}) {
		t.Errorf("web.nomad.hcl: %+v", web)
	}
	if deep := out.file(t, "team/sub/deep/x.nomad"); deep.Variables != filepath.Join("team", "sub", "deep", "x.vars.hcl") {
		t.Errorf("x.nomad: %+v", deep)
	}

	// A clean tree passes; an empty one and a missing one fail.
	clean := jobTree(t, map[string]string{"a.nomad.hcl": "job \"a\" {}\n"})
	mustContain(t, "clean", c.ok("validate", "-offline", clean), "1 files, 0 with errors; 0 jobs, 0 invalid")
	mustContain(t, "empty", c.fails(1, "validate", "-offline", t.TempDir()), "no *.nomad.hcl or *.nomad file")
	mustContain(t, "missing", c.fails(1, "validate", filepath.Join(clean, "none")), "none")
}

const webJob = `variable "policy" {
  type = string
}

job "web" {
  meta {
    nops_managed = "true"
    nops_policy  = var.policy
  }
  group "app" {
    task "app" {
      driver = "mock_driver"
    }
  }
}
`

// With Nomad reachable, every file is parsed by Nomad itself: variables
// resolve, and Nomad's own errors are reported per file.
func TestValidate_ThroughNomad(t *testing.T) {
	nomad := testutil.StartNomad(t)
	dir := jobTree(t, map[string]string{
		"web.nomad.hcl": webJob,
		"web.vars.hcl":  `policy = "approval"`,
		"api.nomad.hcl": strings.Replace(webJob, `job "web"`, `job "api"`, 1),
		"api.vars.hcl":  `policy = "whenever"`,
		"bad.nomad.hcl": `job "bad" {
  group "app" {
    task "app" {
      driver  = "mock_driver"
      colour  = "blue"
    }
  }
}
`,
		"novars.nomad.hcl": `variable "image" {
  type = string
}

job "novars" {
  group "app" {
    task "app" {
      driver = "mock_driver"
      config { image = var.image }
    }
  }
}
`,
	})
	c := newCLI(t, nil)
	c.env["NOMAD_ADDR"] = nomad.Addr
	r := c.run("validate", dir)
	t.Logf("nops validate %s:\n%s", dir, r.stdout)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "validate", r.stdout,
		"ok     web.nomad.hcl (default/web, managed)",
		"error  api.nomad.hcl (default/api, managed)", `api.nomad.hcl: meta nops_policy = "whenever": must be auto, approval or none`,
		"error  bad.nomad.hcl", "bad.nomad.hcl:5,7-13: Unsupported argument", "colour",
		"error  novars.nomad.hcl", "image",
		"4 files, 3 with errors; 2 jobs, 1 invalid. Parsed through Nomad at "+nomad.Addr)

	var out validateOutput
	r = c.run("validate", "-json", dir)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("-json: %v\n%s", err, r.stdout)
	}
	if web := out.file(t, "web.nomad.hcl"); out.CheckedBy != "nomad" || web.CheckedBy != "nomad" || len(web.Unresolved) != 0 || len(web.Errors) != 0 {
		t.Errorf("web.nomad.hcl through Nomad: %+v", web)
	}

	// The flag wins over NOMAD_ADDR; an unreachable Nomad falls back to
	// the offline check and says so.
	r = c.run("validate", "-nomad-addr", testutil.ClosedAddress(t), dir)
	mustContain(t, "fallback", r.stdout, "Nomad is not reachable", "checked the HCL syntax and literal meta values only",
		"ok     bad.nomad.hcl")
}

// Offline, the hooks a managed job names are resolved as a server resolves
// them, from the literal parameterized block; a hook whose shape needs
// Nomad is not held against the jobs that name it.
func TestValidate_OfflineResolvesHooks(t *testing.T) {
	hook := func(id, params string) string {
		return "job \"" + id + "\" {\n  type = \"batch\"\n  meta { nops_role = \"hook\" }\n  parameterized {\n" + params + "\n  }\n}\n"
	}
	dir := jobTree(t, map[string]string{
		"app.nomad.hcl": "job \"app\" {\n  meta {\n    nops_managed = \"true\"\n" +
			"    nops_pre_hooks = \"ok, seed, ask, missing, vague\"\n    nops_post_hooks = \"dup\"\n  }\n}\n",
		"ok.nomad":          hook("ok", `    meta_required = ["nops_job"]`),
		"seed.nomad":        hook("seed", `    payload = "required"`),
		"ask.nomad":         hook("ask", `    meta_required = ["nops_job", "ticket"]`),
		"vague.nomad":       hook("vague", `    meta_required = var.keys`),
		"dup.nomad":         hook("dup", ""),
		"again/dup.nomad":   hook("dup", ""),
		"plain/other.nomad": "job \"missing\" {}\n",
	})
	c := newCLI(t, nil)
	var out struct {
		Jobs []*validate.JobVerdict `json:"jobs"`
	}
	r := c.run("validate", "-offline", "-json", dir)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 1 {
		t.Fatalf("exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	got := map[string]*validate.JobVerdict{}
	for _, v := range out.Jobs {
		got[v.JobID] = v
	}
	app := got["app"]
	if app == nil {
		t.Fatalf("no verdict on app: %s", r.stdout)
	}
	want := []string{
		`pre hook "seed" (seed.nomad) is not a valid hook: it requires a payload, which Nops does not send`,
		`pre hook "ask" (ask.nomad) is not a valid hook: it requires dispatch meta ticket, which Nops does not pass (it passes nops_deployment, nops_job, nops_commit, nops_phase)`,
		`pre hook "missing" is not declared by any file in namespace default`,
		`post hook "dup" is not declared by any file in namespace default`,
	}
	if app.Valid || !slices.Equal(app.Problems, want) {
		t.Errorf("app: valid %v, problems\n  %q\nwant\n  %q", app.Valid, app.Problems, want)
	}
	if v := got["ok"]; v == nil || !v.Valid {
		t.Errorf("ok: %+v", v)
	}
	if v := got["seed"]; v == nil || v.Valid || !strings.Contains(strings.Join(v.Problems, ";"), "hook seed cannot run as a hook: it requires a payload") {
		t.Errorf("seed: %+v", v)
	}
	if v := got["vague"]; v == nil || !v.Valid {
		t.Errorf("vague (meta_required needs Nomad): %+v", v)
	}
	if v := got["dup"]; v == nil || v.Valid || len(v.Files) != 2 || v.Role != "hook" {
		t.Errorf("dup: %+v", v)
	}
	if _, ok := got["missing"]; ok {
		t.Errorf("a plain job is judged: %+v", got["missing"])
	}
}
