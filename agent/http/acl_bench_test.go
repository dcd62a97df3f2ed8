package agenthttp_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/acl"
	agenthttp "github.com/nops-dev/nops/agent/http"
	"github.com/nops-dev/nops/structs"
)

// BenchmarkAuthorize_100Policies measures the ACL check of one request on
// the request path: the token looked up by the hash of its secret, its
// compiled ACL taken from the cache, and a job-scoped check, for a token
// that carries 100 policies. It reports ns per request.
func BenchmarkAuthorize_100Policies(b *testing.B) {
	cfg := loopbackConfig(b)
	cfg.DisableGossipEncryption = true
	cfg.InsecureRPC = true
	cfg.ACL.Enabled = true
	s, err := agent.New(cfg, hclog.NewNullLogger(), agent.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	deadline := time.Now().Add(20 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			b.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "bench"}
	var names []string
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("p%d", i)
		rules := fmt.Sprintf("namespace \"team-%d-*\" {\n capabilities = [\"read\"]\n job \"svc-%d-*\" {\n capabilities = [\"approve\"]\n }\n}", i, i)
		if _, err := s.Apply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: meta, Policy: &structs.ACLPolicy{Name: name, Rules: rules}}); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
	}
	tok := &structs.ACLToken{AccessorID: "bench", SecretHash: structs.HashSecret("secret"), Name: "bench", Type: structs.ACLClientToken, Policies: names}
	if _, err := s.Apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: meta, Token: tok, Create: true}); err != nil {
		b.Fatal(err)
	}
	authorize := agenthttp.AuthorizeJob(agent.HTTPBackend{Server: s}, acl.Approve)
	req := httptest.NewRequest("POST", "/v1/job/team-99-eu/svc-99-api/retry", nil)
	req.SetPathValue("ns", "team-99-eu")
	req.SetPathValue("id", "svc-99-api")
	req.Header.Set("X-Nops-Token", "secret")
	if err := authorize(req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := authorize(req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/request")
}
