package agent_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// Reload applies what a running server can change, names the rest, and a
// setting that fails to apply keeps its old value while the others apply.
func TestReload_AppliesWhatItCanAndNamesTheRest(t *testing.T) {
	s := nopstest.Start(t, "")
	next := *s.Config()
	next.LogLevel = "error"
	next.DefaultPolicy = "approval"
	next.Namespaces = []string{"default", "other"}
	next.Autopilot.MinQuorum = 3
	next.NomadReplanRate = 7
	next.FullReplanInterval = 3 * time.Hour
	next.Approval.TTL = 72 * time.Hour
	// A repository whose token comes from an unset variable cannot be
	// loaded: the repository setting fails, the others apply.
	next.Repositories = []config.Repository{{Name: "r", URL: "https://git.example.invalid/r.git", Branch: "main", Path: ".",
		PollInterval: time.Minute, Auth: &config.RepoAuth{TokenEnv: "NOPS_TEST_UNSET_TOKEN_VARIABLE"}}}
	res, err := s.Reload(&next)
	if err == nil || !strings.Contains(err.Error(), "repository") {
		t.Fatalf("reload error = %v, want the repository's", err)
	}
	if want := []string{"log-level", "default-policy", "nomad-replan-rate", "full-replan-interval", "autopilot", "approval"}; !reflect.DeepEqual(res.Applied, want) {
		t.Errorf("applied %v, want %v", res.Applied, want)
	}
	if want := []string{"namespaces"}; !reflect.DeepEqual(res.RestartOnly, want) {
		t.Errorf("restart only %v, want %v", res.RestartOnly, want)
	}
	if s.Logger().IsWarn() {
		t.Error("the log level did not change to error")
	}
	if got := s.Manager().ReplanRate(); got != 7 {
		t.Errorf("re-plan rate after reload = %d, want 7", got)
	}
	if got := s.Manager().FullPlanInterval(); got != 3*time.Hour {
		t.Errorf("full re-plan interval after reload = %s, want 3h", got)
	}
	if got := s.AutopilotConfig().MinQuorum; got != 3 {
		t.Errorf("autopilot min_quorum after reload = %d", got)
	}
	if got := (agent.HTTPBackend{Server: s.Server}).LiveConfig().Approval.TTL; got != 72*time.Hour {
		t.Errorf("approval ttl after reload = %s", got)
	}
	// The failed repository setting is still pending: a second reload
	// tries it again, and reports nothing else.
	res, err = s.Reload(&next)
	if err == nil || len(res.Applied) != 0 {
		t.Errorf("second reload: %+v, %v", res, err)
	}
	next.Repositories = nil
	next.LogLevel = "info"
	res, err = s.Reload(&next)
	if err != nil || !reflect.DeepEqual(res.Applied, []string{"log-level"}) {
		t.Errorf("third reload: %+v, %v", res, err)
	}
	if !s.Logger().IsInfo() || s.Logger().IsDebug() {
		t.Error("the log level did not go back to info")
	}
}

// A reload of the nomad blocks applies a cluster's promotion order and
// Nomad UI, which GET /v1/clusters then shows, and refuses a change of a
// cluster's address whole, naming it: the cluster keeps its settings.
func TestReload_NomadBlocks(t *testing.T) {
	blocks := func(c *config.Config) {
		c.Nomads = []config.NomadCluster{
			{Name: "staging", Address: "http://127.0.0.1:1"},
			{Name: "prod", Address: "http://127.0.0.1:2"},
		}
	}
	s := nopstest.Start(t, "", nopstest.WithConfig(blocks))
	next := *s.Config()
	next.Nomads = []config.NomadCluster{
		{Name: "staging", Address: "http://127.0.0.1:1"},
		{Name: "prod", Address: "http://127.0.0.1:2", Requires: []string{"staging"}, Bake: 30 * time.Minute, UIURL: "https://prod.example"},
	}
	res, err := s.Reload(&next)
	if err != nil || !reflect.DeepEqual(res.Applied, []string{"nomad"}) {
		t.Fatalf("reload = %+v, %v; want nomad applied", res, err)
	}
	prod := s.Fleet().Manager("prod").ClusterStatus()
	if !reflect.DeepEqual(prod.Requires, []string{"staging"}) || prod.Bake != 30*time.Minute || prod.UIURL != "https://prod.example" {
		t.Fatalf("prod after the reload: %+v", prod)
	}

	moved := next
	moved.Nomads = []config.NomadCluster{
		{Name: "staging", Address: "http://127.0.0.1:3"},
		{Name: "prod", Address: "http://127.0.0.1:2"},
	}
	_, err = s.Reload(&moved)
	if err == nil || !strings.Contains(err.Error(), `nomad "staging": address changed: only a restart applies that`) {
		t.Fatalf("reload of a moved cluster: %v, want the address named", err)
	}
	if prod := s.Fleet().Manager("prod").ClusterStatus(); prod.Bake != 30*time.Minute {
		t.Fatalf("a refused reload changed prod: %+v", prod)
	}
}
