package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestNotifyBlock_LoadsTargetsAndSecrets(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("xoxb-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "n.hcl", `
ui_url = "https://nops.example.com"
notify_retention = "1h"
notify "ops" {
  kind          = "webhook"
  url           = "https://hooks.example.com/ops"
  secret_env    = "OPS_SECRET"
  events        = ["failed", "pending_approval", "leader_changed"]
  namespaces    = ["prod-*"]
  jobs          = ["web", "api-*"]
  give_up_after = "10m"
  retry_initial = "2s"
  retry_max     = "1m"
}
notify "chat" {
  kind        = "slack"
  secret_file = "`+secret+`"
  channel     = "#deploys"
}
`)
	c, err := Load(args("-dev", "-config", p), env(map[string]string{"OPS_SECRET": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.UIURL != "https://nops.example.com" || c.NotifyRetention != time.Hour {
		t.Errorf("ui_url %q retention %s", c.UIURL, c.NotifyRetention)
	}
	want := []NotifyConfig{
		{Name: "ops", Kind: "webhook", URL: "https://hooks.example.com/ops", SecretEnv: "OPS_SECRET",
			Events: []string{"failed", "pending_approval", "leader_changed"}, Namespaces: []string{"prod-*"},
			Jobs: []string{"web", "api-*"}, GiveUpAfter: 10 * time.Minute, RetryInitial: 2 * time.Second, RetryMax: time.Minute},
		{Name: "chat", Kind: "slack", SecretFile: secret, Channel: "#deploys"},
	}
	if !reflect.DeepEqual(c.Notify, want) {
		t.Fatalf("notify = %+v\nwant     %+v", c.Notify, want)
	}
	if s, err := c.Notify[0].ResolveSecret(env(map[string]string{"OPS_SECRET": "s3cret"})); err != nil || s != "s3cret" {
		t.Errorf("secret env = %q, %v", s, err)
	}
	if s, err := c.Notify[1].ResolveSecret(nil); err != nil || s != "xoxb-1" {
		t.Errorf("secret file = %q, %v", s, err)
	}
	d := c.Notify[1].WithDefaults()
	if d.GiveUpAfter != DefaultNotifyGiveUpAfter || d.RetryInitial != DefaultNotifyRetryInitial || d.RetryMax != DefaultNotifyRetryMax {
		t.Errorf("defaults = %+v", d)
	}

	// A secret_env that is not set stops the server at start.
	_, err = Load(args("-dev", "-config", p), env(nil))
	mustContainAll(t, err, `notify "ops": secret_env: environment variable OPS_SECRET is not set`)
}
