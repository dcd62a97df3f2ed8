package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionBlock_SetsEverySetting(t *testing.T) {
	p := writeFile(t, "r.hcl", `
retention {
  spec_after          = "10m"
  deployments_per_job = 5
  deployment_age      = "720h"
  event_age           = "2160h"
  interval            = "1m"
}
`)
	c, err := Load(args("-config", p), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := RetentionConfig{SpecAfter: 10 * time.Minute, DeploymentsPerJob: 5, DeploymentAge: 720 * time.Hour,
		EventAge: 2160 * time.Hour, Interval: time.Minute}
	if c.Retention != want {
		t.Fatalf("retention = %+v, want %+v", c.Retention, want)
	}
	other, err := Load(args(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if other.Retention != DefaultRetention() {
		t.Fatalf("retention without a block = %+v", other.Retention)
	}
	if changed := c.Changed(other); len(changed) != 1 || changed[0] != "retention" {
		t.Fatalf("Changed = %v", changed)
	}
}

func TestRetentionBlock_RefusesBadValues(t *testing.T) {
	for body, want := range map[string]string{
		`retention { deployments_per_job = 0 }`:  "deployments_per_job",
		`retention { deployments_per_job = -3 }`: "deployments_per_job",
		`retention { spec_after = "0s" }`:        "spec_after",
		`retention { event_age = "-1h" }`:        "event_age",
		`retention { deployment_age = "0s" }`:    "deployment_age",
		`retention { interval = "10ms" }`:        "interval",
		`retention { interval = "48h" }`:         "interval",
		`retention { event_age = "a year" }`:     "event_age",
		`retention { keep = 3 }`:                 "keep",
	} {
		t.Run(body, func(t *testing.T) {
			p := writeFile(t, "r.hcl", body)
			_, err := Load(args("-config", p), env(nil))
			if err == nil {
				t.Fatalf("%s: accepted", body)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: error %q does not name %s", body, err, want)
			}
		})
	}
}
