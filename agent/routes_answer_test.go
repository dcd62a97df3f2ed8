package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestRoute_EveryRouteDeclaresItsAnswer walks the whole route table, the
// reconcilers' routes included: each route declares the type of its JSON
// answer, or says what it answers instead; a declared type is one of
// package structs (or a slice or pointer of one, or a string), which
// rpc/client decodes into too.
func TestRoute_EveryRouteDeclaresItsAnswer(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithReconciler(&nopstest.FakeReconciler{}))
	table := s.RouteTable()
	if len(table) < 90 {
		t.Fatalf("route table has %d routes; want every route of the API", len(table))
	}
	seen := map[string]bool{}
	for _, rt := range table {
		seen[rt.Pattern] = true
		switch {
		case rt.Answer == nil && rt.NotJSON == "":
			t.Errorf("route %s declares no answer", rt.Pattern)
		case rt.Answer != nil && rt.NotJSON != "":
			t.Errorf("route %s declares both a JSON answer %s and %q", rt.Pattern, rt.Answer, rt.NotJSON)
		case rt.Answer != nil:
			elem := rt.Answer
			for elem.Kind() == reflect.Pointer || elem.Kind() == reflect.Slice {
				elem = elem.Elem()
			}
			if elem.Kind() != reflect.String && elem.PkgPath() != "github.com/nops-dev/nops/structs" {
				t.Errorf("route %s answers %s, which is not a type of package structs", rt.Pattern, rt.Answer)
			}
		}
	}
	for _, p := range []string{"GET /v1/jobs", "POST /v1/webhook/git", "GET /v1/deployment/{id}/nomad", "GET /v1/acl/tokens"} {
		if !seen[p] {
			t.Errorf("route table lacks %s", p)
		}
	}
}

// TestRoute_EveryGETAnswerDecodesStrictly calls every GET route of a real
// server (ACLs on, the reconcilers against a real Nomad and a real git
// repository, one of each object a route names), then a write of each
// kind, and decodes each answer strictly into the type the route
// declares: a field the type lacks fails (DisallowUnknownFields), and so
// does a field the type has and the answer lacks, or a value that does not
// survive the round trip.
func TestRoute_EveryGETAnswerDecodesStrictly(t *testing.T) {
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "web", map[string]string{
		"jobs/web.nomad.hcl": testutil.ServiceJobHCL("web", testutil.WithManaged("approval")),
	})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("hook-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := nopstest.Start(t, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("ops", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(cfg *config.Config) {
			cfg.ACL.Enabled = true
			cfg.DriftInterval = time.Hour
			cfg.Notify = append(cfg.Notify, config.NotifyConfig{Name: "hook", Kind: "webhook", URL: hook.URL, SecretFile: secret})
		}))

	var boot structs.ACLTokenView
	aclCall(t, s, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap", &boot)
	mgmt := boot.SecretID

	// The deployment detection creates for web waits for approval.
	var dep *structs.Deployment
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		deps, _, err := s.State().Deployments(fsm.DeploymentFilter{JobID: "web", State: structs.StatePendingApproval})
		if err != nil || len(deps) == 0 {
			return false, fmt.Errorf("no pending deployment of web yet (%v)", err)
		}
		dep = deps[0]
		return true, nil
	})
	// One of each object a GET route names.
	aclCall(t, s, mgmt, "PUT", "/v1/window/w1", map[string]string{"kind": "deny", "schedule": testutil.ClosedSchedule(), "duration": "1h"}).ok(t, "window", nil)
	aclCall(t, s, mgmt, "POST", "/v1/job/default/web/pause", map[string]string{"reason": "checking answers"}).ok(t, "pause", nil)
	aclCall(t, s, mgmt, "PUT", "/v1/acl/policy/scratch", map[string]string{"rules": "namespace \"x\" {\n capabilities = [\"read\"]\n}"}).ok(t, "policy", nil)
	aclCall(t, s, mgmt, "PUT", "/v1/acl/role/scratch-role", map[string]any{"policies": []string{"scratch"}}).ok(t, "role", nil)
	var tok structs.ACLTokenView
	aclCall(t, s, mgmt, "POST", "/v1/acl/token", map[string]any{"name": "reader", "policies": []string{"scratch"}}).ok(t, "token", &tok)
	aclCall(t, s, mgmt, "PUT", "/v1/acl/auth-method/sso", map[string]any{"type": "jwt", "config": map[string]any{
		"jwks_url": "https://idp.invalid/keys", "bound_audiences": []string{"nops"}}}).ok(t, "auth method", nil)
	var rule structs.ACLBindingRule
	aclCall(t, s, mgmt, "POST", "/v1/acl/binding-rule", map[string]any{"auth_method": "sso", "bind_type": "policy", "bind_name": "scratch"}).ok(t, "binding rule", &rule)
	// The outbox holds the notification of the pending deployment.
	var note *structs.Notification
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		var list []*structs.Notification
		aclCall(t, s, mgmt, "GET", "/v1/notifications", nil).ok(t, "notifications", &list)
		if len(list) == 0 {
			return false, fmt.Errorf("no notification yet")
		}
		note = list[0]
		return true, nil
	})
	// The detection cycle's record.
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		c, err := s.State().DetectionCycle()
		return err == nil && c != nil, fmt.Errorf("no detection cycle recorded yet (%v)", err)
	})

	path := strings.NewReplacer(
		"/v1/deployment/{id}", "/v1/deployment/"+dep.ID,
		"/v1/job/{ns}/{id}", "/v1/job/default/web",
		"/v1/window/{name}", "/v1/window/w1",
		"/v1/notification/{id}", "/v1/notification/"+note.ID,
		"/v1/acl/policy/{name}", "/v1/acl/policy/scratch",
		"/v1/acl/role/{name}", "/v1/acl/role/scratch-role",
		"/v1/acl/token/{accessor_id}", "/v1/acl/token/"+tok.AccessorID,
		"/v1/acl/auth-method/{name}", "/v1/acl/auth-method/sso",
		"/v1/acl/binding-rule/{id}", "/v1/acl/binding-rule/"+rule.ID,
	)
	checked := 0
	for _, rt := range s.RouteTable() {
		method, p, _ := strings.Cut(rt.Pattern, " ")
		if method != http.MethodGet || rt.Answer == nil {
			continue
		}
		p = path.Replace(p)
		if strings.Contains(p, "{") {
			t.Errorf("%s: the test has no object for its path", rt.Pattern)
			continue
		}
		a := aclCall(t, s, mgmt, method, p, nil)
		if a.code != http.StatusOK {
			t.Errorf("GET %s: %d %s; want 200", p, a.code, a.body)
			continue
		}
		if err := decodesStrictly(a.body, rt.Answer); err != nil {
			t.Errorf("GET %s does not answer its declared %s: %v", p, rt.Answer, err)
			continue
		}
		checked++
	}
	if checked < 35 {
		t.Errorf("checked %d GET answers; want every GET route's", checked)
	}
	t.Logf("%d GET answers decode strictly into their declared types", checked)

	// Writes, last (they change what the reads above read): their
	// answers too decode strictly into what their routes declare.
	declared := map[string]reflect.Type{}
	for _, rt := range s.RouteTable() {
		declared[rt.Pattern] = rt.Answer
	}
	// A deployment to reject, pending now whatever detection did to the
	// first one.
	pending := s.CreatePending("default", "web")
	var conf structs.AutopilotConfiguration
	aclCall(t, s, mgmt, "GET", "/v1/operator/autopilot/configuration", nil).ok(t, "autopilot configuration", &conf)
	writes := []struct {
		pattern, path string
		body          any
	}{
		// First, before a write wakes detection.
		{"POST /v1/deployment/{id}/reject", "/v1/deployment/" + pending.ID + "/reject", map[string]string{"reason": "checked"}},
		{"POST /v1/repo/{name}/refresh", "/v1/repo/ops/refresh", nil},
		{"POST /v1/job/{ns}/{id}/deploy-now", "/v1/job/default/web/deploy-now", map[string]string{}},
		{"POST /v1/job/{ns}/{id}/resume", "/v1/job/default/web/resume", map[string]string{"reason": "checked"}},
		{"POST /v1/pause", "/v1/pause", map[string]string{"reason": "freeze"}},
		{"POST /v1/resume", "/v1/resume", map[string]string{"reason": "thaw"}},
		{"POST /v1/notify/{name}/test", "/v1/notify/hook/test", nil},
		{"POST /v1/operator/gc", "/v1/operator/gc", nil},
		{"PUT /v1/operator/autopilot/configuration", "/v1/operator/autopilot/configuration", &conf},
		{"POST /v1/acl/token/{accessor_id}", "/v1/acl/token/" + tok.AccessorID, map[string]any{"name": "reader-2", "policies": []string{"scratch"}}},
		{"PUT /v1/acl/binding-rule/{id}", "/v1/acl/binding-rule/" + rule.ID, map[string]any{"auth_method": "sso", "bind_type": "policy", "bind_name": "scratch"}},
		{"DELETE /v1/acl/binding-rule/{id}", "/v1/acl/binding-rule/" + rule.ID, nil},
		{"DELETE /v1/window/{name}", "/v1/window/w1", nil},
	}
	for _, w := range writes {
		typ, ok := declared[w.pattern]
		if !ok || typ == nil {
			t.Errorf("%s: no declared JSON answer", w.pattern)
			continue
		}
		method, _, _ := strings.Cut(w.pattern, " ")
		a := aclCall(t, s, mgmt, method, w.path, w.body)
		if a.code != http.StatusOK {
			t.Errorf("%s %s: %d %s; want 200", method, w.path, a.code, a.errorMessage())
			continue
		}
		if err := decodesStrictly(a.body, typ); err != nil {
			t.Errorf("%s %s does not answer its declared %s: %v", method, w.path, typ, err)
		}
	}
}

// decodesStrictly decodes raw into a new value of typ refusing unknown
// fields, encodes that value again and compares both documents: a field
// the answer lacks, or one that does not survive the round trip, differs.
func decodesStrictly(raw []byte, typ reflect.Type) error {
	v := reflect.New(typ)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	again, err := json.Marshal(v.Elem().Interface())
	if err != nil {
		return fmt.Errorf("encode again: %w", err)
	}
	var want, got any
	if err := json.Unmarshal(raw, &want); err != nil {
		return fmt.Errorf("decode the answer: %w", err)
	}
	if err := json.Unmarshal(again, &got); err != nil {
		return fmt.Errorf("decode the encoded value: %w", err)
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("the answer and its decoded value differ:\n answer %s\n  value %s", compact(raw), again)
	}
	return nil
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
