package reconcile_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// Secrets of the tokens of TestClusters_PauseOneClusterAndScopedToken.
const (
	clusterRootSecret = "cluster-root-secret"
	clusterUSSecret   = "cluster-us-operator-secret"
)

// tokenCall sends a request with a token and answers the status and body.
func tokenCall(t *testing.T, s *nopstest.Server, secret, method, path string, body any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	nopstest.SetContentType(req)
	req.Header.Set("X-Nops-Token", secret)
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestClusters_PauseOneClusterAndScopedToken, against two real Nomad
// agents with ACLs on: pausing cluster eu holds eu's job while us's job of
// the same ID deploys a commit that changes both; a token whose policy is
// scoped to cluster us may act on us's job and gets 403 on eu's.
func TestClusters_PauseOneClusterAndScopedToken(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	}, nopstest.WithConfig(func(c *config.Config) { c.ACL.Enabled = true }))
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "test"}
	apply := func(typ structs.MessageType, req any) {
		t.Helper()
		if _, err := e.s.Apply(typ, req); err != nil {
			t.Fatalf("apply %v: %v", typ, err)
		}
	}
	apply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: meta, Policy: &structs.ACLPolicy{
		Name: "us-operator", Rules: "cluster \"us\" {\n  namespace \"*\" { capabilities = [\"read\", \"pause\", \"deploy\"] }\n}"}})
	for _, tok := range []*structs.ACLToken{
		{AccessorID: "root", SecretHash: structs.HashSecret(clusterRootSecret), Name: "root", Type: structs.ACLManagementToken},
		{AccessorID: "us-op", SecretHash: structs.HashSecret(clusterUSSecret), Name: "us-op", Type: structs.ACLClientToken,
			Policies: []string{"us-operator"}},
	} {
		apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: meta, Token: tok, Create: true})
	}
	e.token = clusterRootSecret
	e.waitDeployment("eu", "web", structs.StateCompleted)
	e.waitDeployment("us", "web", structs.StateCompleted)

	// The us token: 403 on eu's job, its own job fine.
	if code, body := tokenCall(t, e.s, clusterUSSecret, "POST", "/v1/job/default/web/pause?cluster=eu", map[string]string{"reason": "x"}); code != http.StatusForbidden {
		t.Fatalf("us token pausing eu's web: %d %s, want 403", code, body)
	}
	if code, body := tokenCall(t, e.s, clusterUSSecret, "GET", "/v1/job/default/web?cluster=eu", nil); code != http.StatusForbidden {
		t.Fatalf("us token reading eu's web: %d %s, want 403", code, body)
	}
	if code, body := tokenCall(t, e.s, clusterUSSecret, "GET", "/v1/job/default/web?cluster=us", nil); code != http.StatusOK {
		t.Fatalf("us token reading us's web: %d %s", code, body)
	}

	// Pause every job of eu, then change web in both clusters.
	if code, body := tokenCall(t, e.s, clusterRootSecret, "POST", "/v1/pause", map[string]string{"reason": "eu maintenance", "cluster": "eu"}); code != http.StatusOK {
		t.Fatalf("pause eu: %d %s", code, body)
	}
	commitFiles(e.repo, "scale web in both clusters", map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
	})
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		j := lookupNomadJob(t, e.us, "web")
		if j == nil || groupCount(j) != 2 {
			return false, fmt.Errorf("us's Nomad runs %+v, want count 2", j)
		}
		return true, nil
	})
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		s := e.s.ClusterJobStatus("eu", "default", "web")
		if s == nil || s.Sync != structs.SyncDrift || !strings.Contains(s.Hold, "eu maintenance") {
			return false, fmt.Errorf("eu's web status %+v, want drift held by the pause of eu", s)
		}
		return true, nil
	})
	if j := lookupNomadJob(t, e.eu, "web"); j == nil || groupCount(j) != 1 {
		t.Fatalf("eu's Nomad runs %+v while eu is paused, want count 1", j)
	}
	// Resuming eu deploys its change.
	if code, body := tokenCall(t, e.s, clusterRootSecret, "POST", "/v1/resume", map[string]string{"cluster": "eu"}); code != http.StatusOK {
		t.Fatalf("resume eu: %d %s", code, body)
	}
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		j := lookupNomadJob(t, e.eu, "web")
		if j == nil || groupCount(j) != 2 {
			return false, fmt.Errorf("eu's Nomad runs %+v after the resume, want count 2", j)
		}
		return true, nil
	})
}
