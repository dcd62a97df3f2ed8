package redact_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/reconcile/redact"
	"github.com/nops-dev/nops/testutil"
)

func TestDefaultKeys_FreshSlice(t *testing.T) {
	a := redact.DefaultKeys()
	a[0] = "changed"
	if redact.DefaultKeys()[0] == "changed" {
		t.Fatal("DefaultKeys returned shared state")
	}
}

func TestIsSecretKey(t *testing.T) {
	r := redact.New("vault")
	cases := map[string]bool{
		"Env[DB_PASSWORD]":        true,
		"Env[GITHUB_TOKEN]":       true,
		"Meta[api_key]":           true,
		"Meta[ApiKey]":            true,
		"auth[0][password]":       true,
		"Env[TLS_CERT]":           true,
		"Env[AWS_SECRET_ACCESS]":  true,
		"Env[VAULT_ROLE]":         true, // configured fragment
		"Env[DATABASE_DSN]":       true,
		"Env[DB_PASS]":            true,
		"Env[MYSQL_PWD]":          true,
		"Meta[gpg_passphrase]":    true,
		"Meta[Private_Registry]":  true,
		"Env[LOG_LEVEL]":          false,
		"Meta[nops_managed]":      false,
		"Count":                   false,
		"run_for":                 false,
		"Env[PASSWD_FILE]":        true,
		"Env[OAUTH_CLIENT]":       true,
		"Meta[owner]":             false,
		"Env[SERVICE_CREDENTIAL]": true,
		"password":                true, // a driver config attribute
		"ErrMissingKey":           false,
		"AuthSoftFail":            false,
		"Meta[team]":              false,
		"args[0]":                 false,
		"Env[]":                   false,
	}
	for name, want := range cases {
		if got := r.IsSecretKey(name); got != want {
			t.Errorf("IsSecretKey(%q) = %v, want %v", name, got, want)
		}
	}
	if redact.New().IsSecretKey("Env[VAULT_ROLE]") {
		t.Error("a configured fragment leaked into the defaults")
	}
}

func TestDiff_SyntheticKeepsShapeAndInput(t *testing.T) {
	in := &api.JobDiff{
		Type: "Edited", ID: "web",
		Fields: []*api.FieldDiff{
			{Type: "Edited", Name: "Meta[api_token]", Old: "tok-old", New: "tok-new"},
			{Type: "Added", Name: "Meta[team]", New: "payments"},
		},
		TaskGroups: []*api.TaskGroupDiff{{
			Type: "Edited", Name: "web", Updates: map[string]uint64{"create/destroy update": 1},
			Tasks: []*api.TaskDiff{{
				Type: "Edited", Name: "web", Annotations: []string{"forces create/destroy update"},
				Fields: []*api.FieldDiff{
					{Type: "Added", Name: "Env[DB_PASSWORD]", New: "hunter2"},
					{Type: "Deleted", Name: "Env[OLD_SECRET]", Old: "gone-secret"},
					{Type: "Edited", Name: "Env[LEVEL]", Old: "info", New: "debug"},
				},
				Objects: []*api.ObjectDiff{
					{Type: "Edited", Name: "Template", Fields: []*api.FieldDiff{
						{Type: "Edited", Name: "EmbeddedTmpl", Old: "user={{ .a }}", New: "pass=s3cr3t"},
						{Type: "None", Name: "DestPath", Old: "local/app.env", New: "local/app.env"},
					}},
					{Type: "Added", Name: "Config", Fields: []*api.FieldDiff{
						{Type: "Added", Name: "API_TOKEN", New: "config-token"},
						{Type: "Added", Name: "image", New: "redis:7"},
					}, Objects: []*api.ObjectDiff{
						{Type: "Added", Name: "auth", Fields: []*api.FieldDiff{
							{Type: "Added", Name: "username", New: "deploy-user"},
						}},
					}},
				},
			}},
		}},
	}
	before, _ := json.Marshal(in)

	out := redact.Diff(in, []string{"dsn"})

	after, _ := json.Marshal(in)
	if string(before) != string(after) {
		t.Fatal("Diff modified its input")
	}
	text := nomadx.FormatDiff(out, true)
	for _, secret := range []string{"tok-old", "tok-new", "hunter2", "gone-secret", "s3cr3t", "{{ .a }}", "deploy-user", "config-token"} {
		if strings.Contains(text, secret) {
			t.Errorf("secret %q in redacted text:\n%s", secret, text)
		}
	}
	for _, visible := range []string{
		`+/- Meta[api_token]: "(redacted)" => "(redacted)"`,
		`+   Meta[team]:      "payments"`,
		`+   Env[DB_PASSWORD]: "(redacted)"`,
		`-   Env[OLD_SECRET]:  "(redacted)"`,
		`+/- Env[LEVEL]:       "info" => "debug"`,
		`+/- EmbeddedTmpl: "(redacted)" => "(redacted)"`,
		`DestPath:     "local/app.env"`,
		`(1 create/destroy update)`,
		`image:     "redis:7"`,
	} {
		if !strings.Contains(text, visible) {
			t.Errorf("redacted text lacks %q:\n%s", visible, text)
		}
	}
	if redact.Diff(nil, nil) != nil {
		t.Error("Diff(nil) is not nil")
	}
}

// TestDiff_RealPlan plants secrets in a job, changes them, and checks that
// the diff Nomad returns carries them but the redacted rendering does not.
func TestDiff_RealPlan(t *testing.T) {
	agent := testutil.StartNomad(t)
	c, err := nomadx.New(nomadx.Config{Address: agent.Addr, RedactKeys: []string{"dsn"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	job := func(gen int, level string) string {
		return fmt.Sprintf(`
job "secrets" {
  datacenters = ["*"]

  meta {
    nops_managed = "true"
    api_token    = "meta-token-%[1]d"
    owner        = "team-%[1]d"
  }

  group "app" {
    task "app" {
      driver = "mock_driver"

      config {
        run_for = "1h"
      }

      env {
        DB_PASSWORD  = "env-password-%[1]d"
        DATABASE_DSN = "postgres://u:dsn-secret-%[1]d@db/app"
        LOG_LEVEL    = %[2]q
      }

      template {
        destination = "secrets/app.env"
        env         = true
        data        = <<EOT
API_KEY=template-secret-%[1]d
{{ with nomadVar "nomad/jobs/secrets" }}VAR={{ .value }}{{ end }}
EOT
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
`, gen, level)
	}

	v1, err := c.Parse(ctx, job(1, "info"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, v1, 0); err != nil {
		t.Fatal(err)
	}
	v2, err := c.Parse(ctx, job(2, "debug"), "")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := c.Plan(ctx, v2)
	if err != nil {
		t.Fatal(err)
	}

	secrets := []string{
		"meta-token-1", "meta-token-2",
		"env-password-1", "env-password-2",
		"dsn-secret-1", "dsn-secret-2",
		"template-secret-1", "template-secret-2", "nomadVar",
	}
	raw, _ := json.Marshal(plan.Diff)
	for _, s := range []string{"meta-token-2", "env-password-2", "dsn-secret-2", "template-secret-2"} {
		if !strings.Contains(string(raw), s) {
			t.Fatalf("Nomad's raw diff lacks planted secret %q; the test would prove nothing:\n%s", s, raw)
		}
	}

	redacted := redact.Diff(plan.Diff, []string{"dsn"})
	for name, text := range map[string]string{
		"verbose rendering": nomadx.FormatDiff(redacted, true),
		"plan text":         plan.Text,
	} {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s contains secret %q:\n%s", name, s, text)
			}
		}
		for _, visible := range []string{`Env[LOG_LEVEL]`, `"info" => "debug"`, `ErrMissingKey: "false"`, `Meta[owner]`, `"team-1" => "team-2"`, `Env[DB_PASSWORD]`, `Meta[api_token]`, `(redacted)`} {
			if !strings.Contains(text, visible) {
				t.Errorf("%s lacks %q:\n%s", name, visible, text)
			}
		}
	}
	full, _ := json.Marshal(redacted)
	for _, s := range secrets {
		if strings.Contains(string(full), s) {
			t.Errorf("redacted diff JSON contains secret %q", s)
		}
	}
	// The tree the dashboard shows (PlanResult.Tree) is built from the
	// redacted diff: its keys, never their values.
	tree, _ := json.Marshal(plan.Tree)
	for _, s := range secrets {
		if strings.Contains(string(tree), s) {
			t.Errorf("the plan's tree contains secret %q:\n%s", s, tree)
		}
	}
	for _, visible := range []string{`"name":"Env[LOG_LEVEL]","old":"info","new":"debug"`, `"name":"Env[DB_PASSWORD]","old":"(redacted)","new":"(redacted)"`, `"name":"Meta[api_token]"`, `"name":"EmbeddedTmpl"`} {
		if !strings.Contains(string(tree), visible) {
			t.Errorf("the plan's tree lacks %s:\n%s", visible, tree)
		}
	}
	if nomadx.DiffHash(plan.Diff) == nomadx.DiffHash(redacted) {
		t.Error("the raw and the redacted diff hash alike: a secret-only change would be invisible to DiffHash")
	}
}
