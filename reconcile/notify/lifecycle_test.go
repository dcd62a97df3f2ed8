package notify_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestDeploymentLifecycleSequence runs a real deployment with approval on
// a real Nomad agent from a real git repository, and checks that a webhook
// target filtered to the job receives exactly the lifecycle's sequence, in
// order, signed, each once, with the approve link and no secret.
func TestDeploymentLifecycleSequence(t *testing.T) {
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "jobs", map[string]string{
		"jobs/api.nomad.hcl": testutil.ServiceJobHCL("api", testutil.WithManaged("approval"),
			testutil.WithEnv("DB_PASSWORD", "hunter2-do-not-leak")),
		"jobs/bad.nomad.hcl": testutil.ServiceJobHCL("bad", testutil.WithMeta("nops_managed", "true"),
			testutil.WithFailure()),
	})
	rcv := newReceiver(t, "lifecycle-secret", nil)
	failures := newReceiver(t, "", nil)
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("main", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(c *config.Config) { c.UIURL = "https://nops.example.com/" }),
		withTarget(config.NotifyConfig{
			Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.srv.URL, SecretFile: secretFile(t, "lifecycle-secret"),
			Namespaces: []string{"def*"}, Jobs: []string{"api"},
		}),
		withTarget(config.NotifyConfig{Name: "failures", Kind: config.NotifyKindWebhook, URL: failures.srv.URL, Jobs: []string{"bad"}}))

	api := s.WaitForDeployment("default", "api", structs.StatePendingApproval, 60*time.Second)
	if code, body := s.Do("POST", "/v1/deployment/"+api.ID+"/approve", map[string]string{"comment": "ship it"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	s.WaitForDeployment("default", "api", structs.StateCompleted, 90*time.Second)

	want := []string{structs.NotifyCreated, structs.NotifyPendingApproval, structs.NotifyApproved, structs.NotifyApplying, structs.NotifyCompleted}
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		n := len(rcv.accepted())
		return n >= len(want), fmt.Errorf("receiver has %d of %d notifications", n, len(want))
	})
	// Anything extra would show in the next moments.
	time.Sleep(500 * time.Millisecond)
	got := rcv.accepted()
	var kinds []string
	keys := map[string]bool{}
	for _, g := range got {
		kinds = append(kinds, g.Payload.Kind)
		if keys[g.Key] {
			t.Errorf("key %s delivered twice", g.Key)
		}
		keys[g.Key] = true
		if !g.SigOK {
			t.Errorf("%s: bad signature", g.Payload.Kind)
		}
		if g.Payload.Deployment == nil || g.Payload.Deployment.ID != api.ID || g.Payload.Deployment.Commit != repo.Head() {
			t.Errorf("%s: deployment %+v", g.Payload.Kind, g.Payload.Deployment)
		}
		if g.Payload.Link != "https://nops.example.com/ui/deployment/"+api.ID {
			t.Errorf("%s: link %q", g.Payload.Kind, g.Payload.Link)
		}
		raw, _ := json.Marshal(g.Payload)
		if strings.Contains(string(raw), "hunter2") {
			t.Errorf("%s: the payload carries a secret: %s", g.Payload.Kind, raw)
		}
	}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("sequence %v, want %v", kinds, want)
	}
	if got[2].Payload.Actor != "tester" || !strings.Contains(got[2].Payload.Message, "ship it") {
		t.Errorf("approved: actor %q message %q", got[2].Payload.Actor, got[2].Payload.Message)
	}
	if got[0].Payload.Deployment.DiffSummary == "" {
		t.Error("created carries no diff summary")
	}
	// A deployment that fails notifies its failure, with the error, and
	// the block it leaves.
	s.WaitForDeployment("default", "bad", structs.StateFailed, 90*time.Second)
	wantBad := []string{structs.NotifyCreated, structs.NotifyApplying, structs.NotifyFailed, structs.NotifyBlocked}
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		n := len(failures.accepted())
		return n >= len(wantBad), fmt.Errorf("failure receiver has %d of %d notifications", n, len(wantBad))
	})
	time.Sleep(500 * time.Millisecond)
	var badKinds []string
	for _, g := range failures.accepted() {
		badKinds = append(badKinds, g.Payload.Kind)
		if g.Payload.Kind == structs.NotifyFailed && (g.Payload.Deployment == nil || g.Payload.Deployment.Error == "") {
			t.Errorf("failed carries no error: %+v", g.Payload.Deployment)
		}
	}
	if strings.Join(badKinds, ",") != strings.Join(wantBad, ",") {
		t.Fatalf("failing sequence %v, want %v", badKinds, wantBad)
	}
	// Every notification of the server's outbox ends delivered; the ones
	// no target matched too.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		p := notifications(t, s, "pending")
		return len(p) == 0, fmt.Errorf("%d pending", len(p))
	})
}
