package config

import (
	"testing"
	"time"
)

func TestAutopilotBlock_SetsEverySetting(t *testing.T) {
	p := writeFile(t, "ap.hcl", `
autopilot {
  cleanup_dead_servers      = false
  last_contact_threshold    = "1s"
  max_trailing_logs         = 100
  min_quorum                = 3
  server_stabilization_time = "30s"
}
enable_debug = true
`)
	c, err := Load(args("-config", p), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := AutopilotConfig{LastContactThreshold: time.Second, MaxTrailingLogs: 100, MinQuorum: 3, ServerStabilizationTime: 30 * time.Second}
	if c.Autopilot != want {
		t.Fatalf("autopilot = %+v, want %+v", c.Autopilot, want)
	}
	if !c.EnableDebug {
		t.Fatal("enable_debug not set")
	}
	other, err := Load(args(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if other.Autopilot != DefaultAutopilot() {
		t.Fatalf("autopilot without a block = %+v", other.Autopilot)
	}
	changed := c.Changed(other)
	if len(changed) != 2 || changed[0] != "enable-debug" || changed[1] != "autopilot" {
		t.Fatalf("Changed = %v", changed)
	}
}

func TestAutopilotBlock_RefusesBadValues(t *testing.T) {
	for name, body := range map[string]string{
		"negative min_quorum":   `autopilot { min_quorum = -1 }`,
		"zero threshold":        `autopilot { last_contact_threshold = "0s" }`,
		"not a duration":        `autopilot { server_stabilization_time = "soon" }`,
		"unknown attribute":     `autopilot { cleanup = true }`,
		"wrong type":            `autopilot { max_trailing_logs = "many" }`,
		"enable_debug not bool": `enable_debug = "yes"`,
	} {
		t.Run(name, func(t *testing.T) {
			p := writeFile(t, "ap.hcl", body)
			if _, err := Load(args("-config", p), env(nil)); err == nil {
				t.Fatalf("%s: accepted", body)
			}
		})
	}
}
