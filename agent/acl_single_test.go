package agent_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestACL_TokensAndPolicies covers the token check on one server: a bearer
// token, a garbage or oversized header, the anonymous policy, and a policy
// change that takes effect on the next request (no stale compiled ACL).
func TestACL_TokensAndPolicies(t *testing.T) {
	s, mgmt := startSSO(t)
	// A refused bootstrap is refused before Raft: anonymous requests
	// cannot grow the log.
	before := s.Raft().LastIndex()
	for i := 0; i < 5; i++ {
		if a := aclCall(t, s, "", "POST", "/v1/acl/bootstrap", nil); a.code != http.StatusConflict {
			t.Fatalf("bootstrap again: %d", a.code)
		}
	}
	if after := s.Raft().LastIndex(); after != before {
		t.Fatalf("refused bootstraps appended %d log entries", after-before)
	}
	var tok structs.ACLTokenView
	aclCall(t, s, mgmt, "POST", "/v1/acl/token", map[string]any{"name": "reader", "policies": []string{"reader"}}).ok(t, "token", &tok)

	bearer := func(header string) int {
		req, _ := http.NewRequest("GET", s.URL+"/v1/deployments", nil)
		req.Header.Set("Authorization", header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := bearer("Bearer " + tok.SecretID); code != http.StatusOK {
		t.Errorf("bearer token: %d", code)
	}
	for _, h := range []string{"Bearer", "Basic " + tok.SecretID, "Bearer " + strings.Repeat("x", 600), "bearer  " + tok.SecretID + "x"} {
		if code := bearer(h); code != http.StatusUnauthorized {
			t.Errorf("Authorization %.30q: %d, want 401", h, code)
		}
	}

	// The reader may read; once its policy no longer grants read, it may
	// not, at once.
	if a := aclCall(t, s, tok.SecretID, "GET", "/v1/deployments", nil); a.code != http.StatusOK {
		t.Fatalf("reader: %d", a.code)
	}
	aclCall(t, s, mgmt, "PUT", "/v1/acl/policy/reader", map[string]string{"rules": "namespace \"*\" {\n capabilities = [\"pause\"]\n}"}).ok(t, "policy", nil)
	if a := aclCall(t, s, tok.SecretID, "GET", "/v1/deployments", nil); a.code != http.StatusForbidden {
		t.Fatalf("reader after its policy changed: %d, want 403", a.code)
	}
	aclCall(t, s, mgmt, "DELETE", "/v1/acl/policy/reader", nil).ok(t, "delete policy", nil)
	if a := aclCall(t, s, tok.SecretID, "GET", "/v1/deployments", nil); a.code != http.StatusForbidden {
		t.Fatalf("reader after its policy was deleted: %d, want 403", a.code)
	}

	// Anonymous requests get the anonymous policy, once it exists.
	if a := aclCall(t, s, "", "GET", "/v1/windows", nil); a.code != http.StatusUnauthorized {
		t.Fatalf("anonymous before the anonymous policy: %d, want 401", a.code)
	}
	aclCall(t, s, mgmt, "PUT", "/v1/acl/policy/anonymous", map[string]string{"rules": "cluster {\n capabilities = [\"read\"]\n}"}).ok(t, "anonymous policy", nil)
	if a := aclCall(t, s, "", "GET", "/v1/windows", nil); a.code != http.StatusOK {
		t.Fatalf("anonymous with read on the cluster: %d", a.code)
	}
	if a := aclCall(t, s, "", "PUT", "/v1/window/w", map[string]string{"kind": "deny", "schedule": "0 1 * * *", "duration": "1h"}); a.code != http.StatusUnauthorized {
		t.Fatalf("anonymous write: %d, want 401", a.code)
	}

	// Bad input to the ACL API is refused with every problem named.
	a := aclCall(t, s, mgmt, "POST", "/v1/acl/token", map[string]any{"type": "root", "policies": []string{"nope"}, "expiration_ttl": "soon"})
	if a.code != http.StatusBadRequest {
		t.Fatalf("bad token spec: %d", a.code)
	}
	for _, want := range []string{`type: must be client or management, not "root"`, `no ACL policy "nope"`, `expiration_ttl: "soon"`} {
		if !strings.Contains(a.errorMessage(), want) {
			t.Errorf("bad token spec answer does not name %q: %s", want, a.body)
		}
	}
	if a := aclCall(t, s, mgmt, "PUT", "/v1/acl/policy/bad name", map[string]string{"rules": "x"}); a.code != http.StatusBadRequest && a.code != http.StatusNotFound {
		t.Errorf("bad policy name: %d", a.code)
	}
	if a := aclCall(t, s, mgmt, "POST", "/v1/acl/token", `{"name": "x", "secret_id": "chosen"}`); a.code != http.StatusBadRequest {
		t.Errorf("a client-chosen secret: %d, want 400 (unknown field)", a.code)
	}
}

// TestACL_EveryRouteDeclaresARule checks the whole route table, the
// reconcilers' routes included, without a Nomad: a route added without an
// ACL rule fails here even where the cluster walk cannot run.
func TestACL_EveryRouteDeclaresARule(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithReconciler(&nopstest.FakeReconciler{}))
	table := s.RouteTable()
	seen := map[string]bool{}
	for _, rt := range table {
		seen[rt.Pattern] = true
		if rt.Scope == "" {
			t.Errorf("route %s declares no ACL rule", rt.Pattern)
		}
		if rt.Scope != "public" && rt.Scope != "token" && rt.Capability == "" {
			t.Errorf("route %s (%s) names no capability", rt.Pattern, rt.Scope)
		}
	}
	for _, p := range []string{"GET /v1/jobs", "POST /v1/webhook/git", "POST /v1/acl/bootstrap", "PUT /v1/operator/snapshot"} {
		if !seen[p] {
			t.Errorf("route table lacks %s", p)
		}
	}
}
