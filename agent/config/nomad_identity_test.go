package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad_NomadTokenOnTheCommandLineWarns(t *testing.T) {
	c, err := Load(args("-nomad-token", "s3cr3t"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "process list") || strings.Contains(c.Warnings[0], "s3cr3t") {
		t.Fatalf("warnings: %q", c.Warnings)
	}
	for _, e := range []map[string]string{{"NOPS_NOMAD_TOKEN": "s3cr3t"}, {"NOMAD_TOKEN": "s3cr3t"}} {
		c, err := Load(args(), env(e))
		if err != nil {
			t.Fatal(err)
		}
		if c.NomadToken != "s3cr3t" || len(c.Warnings) != 0 {
			t.Fatalf("env %v: token %q warnings %q", e, c.NomadToken, c.Warnings)
		}
	}
}

func TestLoad_NomadTokenFile(t *testing.T) {
	// The file wins over NOMAD_TOKEN, which is only a default.
	c, err := Load(args("-nomad-token-file", "/run/nops/token"), env(map[string]string{"NOMAD_TOKEN": "from-shell"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.NomadTokenFile != "/run/nops/token" || c.NomadToken != "" {
		t.Fatalf("token file %q token %q", c.NomadTokenFile, c.NomadToken)
	}
	c, err = Load(args(), env(map[string]string{"NOPS_NOMAD_TOKEN_FILE": "/run/nops/token"}))
	if err != nil || c.NomadTokenFile != "/run/nops/token" {
		t.Fatalf("env: %v %+v", err, c)
	}
	// Both set explicitly: an error naming both.
	_, err = Load(args("-nomad-token-file", "/run/nops/token"), env(map[string]string{"NOPS_NOMAD_TOKEN": "x"}))
	mustContainAll(t, err, "nomad-token-file", "nomad_token", "not both")
}

func TestLoad_NomadTaskAPI(t *testing.T) {
	secrets := t.TempDir()
	withSecrets := map[string]string{"NOMAD_SECRETS_DIR": secrets}

	// No workload identity anywhere: an error saying what to add.
	_, err := Load(args("-nomad-task-api"), env(withSecrets))
	mustContainAll(t, err, "nomad-task-api", "no workload identity", "file = true")

	// The identity file, when the task has one.
	jwt := filepath.Join(secrets, "nomad_token")
	if err := os.WriteFile(jwt, []byte("eyJ.x.y"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(args("-nomad-task-api"), env(map[string]string{"NOMAD_SECRETS_DIR": secrets, "NOMAD_TOKEN": "env-identity", "NOMAD_ADDR": "http://10.0.0.1:4646"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.NomadAddr != "unix://"+filepath.Join(secrets, "api.sock") || c.NomadTokenFile != jwt || c.NomadToken != "" {
		t.Fatalf("task API: addr %q file %q token %q", c.NomadAddr, c.NomadTokenFile, c.NomadToken)
	}

	// A token file given explicitly wins over the identity.
	c, err = Load(args("-nomad-task-api", "-nomad-token-file", "/secrets/acl"), env(withSecrets))
	if err != nil || c.NomadTokenFile != "/secrets/acl" {
		t.Fatalf("explicit file: %v %+v", err, c)
	}

	// Outside a task, or with an address set: errors naming the problem.
	_, err = Load(args("-nomad-task-api"), nil)
	mustContainAll(t, err, "nomad-task-api", "NOMAD_SECRETS_DIR is not set")
	_, err = Load(args("-nomad-task-api", "-nomad-addr", "http://10.0.0.1:4646"), env(withSecrets))
	mustContainAll(t, err, "nomad-task-api", "remove nomad_addr", "flag -nomad-addr")
}

func TestLoad_NomadEventStream(t *testing.T) {
	c, err := Load(args(), nil)
	if err != nil || !c.NomadEventStream {
		t.Fatalf("default: %v %v", err, c.NomadEventStream)
	}
	c, err = Load(args("-nomad-event-stream=false"), nil)
	if err != nil || c.NomadEventStream {
		t.Fatalf("flag: %v %v", err, c.NomadEventStream)
	}
	p := writeFile(t, "nops.hcl", "nomad_event_stream = false\n")
	c, err = Load(args("-config", p), nil)
	if err != nil || c.NomadEventStream {
		t.Fatalf("file: %v %v", err, c.NomadEventStream)
	}
}
