package redact_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/redact"
)

// TestWidenedRedaction: the secrets the key list used to miss, in env,
// meta and driver args, are hidden; their neighbours are not.
func TestWidenedRedaction(t *testing.T) {
	field := func(name, v string) *api.FieldDiff {
		return &api.FieldDiff{Type: "Edited", Name: name, Old: "", New: v}
	}
	diff := &api.JobDiff{Type: "Edited", ID: "web", TaskGroups: []*api.TaskGroupDiff{{
		Type: "Edited", Name: "web", Tasks: []*api.TaskDiff{{
			Type: "Edited", Name: "app",
			Fields: []*api.FieldDiff{
				field("Env[DB_PASS]", "pw-dbpass"),
				field("Env[MYSQL_PWD]", "pw-mysql"),
				field("Env[DATABASE_URL]", "postgres://app:pw-url@db.internal:5432/app?sslmode=disable"),
				field("Env[DSN]", "app:pw-dsn@tcp(db:3306)/app"),
				field("Env[GPG_PASSPHRASE]", "pw-phrase"),
				field("Env[MIRROR]", "https://ghp_pwtoken@github.com/o/r.git"),
				field("Env[LOG_LEVEL]", "debug"),
				field("Meta[homepage]", "https://example.com/docs"),
			},
			Objects: []*api.ObjectDiff{{Type: "Edited", Name: "Config", Fields: []*api.FieldDiff{
				field("args[0]", "--password=pw-arg1"),
				field("args[1]", "--token"),
				field("args[2]", "pw-arg2"),
				field("args[3]", "--port"),
				field("args[4]", "8080"),
				field("args[5]", "-db-password pw-arg3 --verbose"),
				field("command", "/bin/app"),
			}}},
		}},
	}}}
	out := redact.New().Diff(diff)
	var all []string
	var walk func(fs []*api.FieldDiff, os []*api.ObjectDiff)
	got := map[string]string{}
	walk = func(fs []*api.FieldDiff, os []*api.ObjectDiff) {
		for _, f := range fs {
			all = append(all, f.Old, f.New)
			got[f.Name] = f.New
		}
		for _, o := range os {
			walk(o.Fields, o.Objects)
		}
	}
	for _, tg := range out.TaskGroups {
		for _, task := range tg.Tasks {
			walk(task.Fields, task.Objects)
		}
	}
	text := strings.Join(all, "\n")
	if strings.Contains(text, "pw-") {
		t.Fatalf("a secret survived redaction:\n%s", text)
	}
	for name, want := range map[string]string{
		"Env[DATABASE_URL]": "postgres://(redacted)@db.internal:5432/app?sslmode=disable",
		"Env[MIRROR]":       "https://(redacted)@github.com/o/r.git",
		"Env[LOG_LEVEL]":    "debug",
		"Meta[homepage]":    "https://example.com/docs",
		"args[0]":           "--password=(redacted)",
		"args[1]":           "--token",
		"args[2]":           redact.Redacted,
		"args[4]":           "8080",
		"args[5]":           "-db-password (redacted) --verbose",
		"command":           "/bin/app",
	} {
		if got[name] != want {
			t.Errorf("%s = %q, want %q", name, got[name], want)
		}
	}
}
