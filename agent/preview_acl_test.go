package agent_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestPreview_LeavesOutJobsTheTokenCannotRead: with ACLs on, POST
// /v1/preview needs read on some job; a token with read on default/web
// alone sees web's entries and not api's (changed) nor old's (removed),
// nor the invalid files (they need read on the cluster), and a preview
// left with nothing it may read says nothing changes; a management token
// sees all.
func TestPreview_LeavesOutJobsTheTokenCannotRead(t *testing.T) {
	job := func(id, change string) *structs.PreviewJob {
		return &structs.PreviewJob{Namespace: "default", JobID: id, File: "jobs/" + id + ".nomad.hcl", Change: change,
			PlanType: "Edited", Diff: "+/- Job: \"" + id + "\""}
	}
	fake := &nopstest.FakeReconciler{Previews: map[string]*structs.Preview{
		"main@feature": {Repository: "main", Ref: "feature", Commit: strings.Repeat("a", 40), Changes: true,
			Errors:  []string{"jobs/bad.nomad.hcl: parse job through Nomad: 400"},
			Jobs:    []*structs.PreviewJob{job("api", structs.PreviewChanged), job("web", structs.PreviewChanged)},
			Removed: []*structs.PreviewJob{job("old", structs.PreviewRemoved)}},
		"main@api-only": {Repository: "main", Ref: "api-only", Commit: strings.Repeat("b", 40), Changes: true,
			Jobs: []*structs.PreviewJob{job("api", structs.PreviewChanged)}, Removed: []*structs.PreviewJob{}},
	}}
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithReconciler(fake), nopstest.WithConfig(func(c *config.Config) { c.ACL.Enabled = true }))
	var boot structs.ACLTokenView
	aclCall(t, s, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap", &boot)
	aclCall(t, s, boot.SecretID, "PUT", "/v1/acl/policy/web-reader", map[string]string{
		"rules": "namespace \"default\" {\n job \"web\" {\n capabilities = [\"read\"]\n }\n}"}).ok(t, "policy", nil)
	aclCall(t, s, boot.SecretID, "PUT", "/v1/acl/policy/web-pauser", map[string]string{
		"rules": "namespace \"default\" {\n job \"web\" {\n capabilities = [\"pause\"]\n }\n}"}).ok(t, "policy", nil)
	token := func(policy string) string {
		var tok structs.ACLTokenView
		aclCall(t, s, boot.SecretID, "POST", "/v1/acl/token", map[string]any{"name": policy, "policies": []string{policy}}).ok(t, "token", &tok)
		return tok.SecretID
	}
	reader, pauser := token("web-reader"), token("web-pauser")

	preview := func(secret, ref string) (int, structs.Preview) {
		a := aclCall(t, s, secret, "POST", "/v1/preview", structs.PreviewRequest{Repository: "main", Ref: ref})
		var p structs.Preview
		if a.code == http.StatusOK {
			if err := json.Unmarshal(a.body, &p); err != nil {
				t.Fatalf("preview answer: %v\n%s", err, a.body)
			}
		}
		return a.code, p
	}
	keys := func(p structs.Preview) string {
		var out []string
		for _, j := range append(p.Jobs, p.Removed...) {
			out = append(out, j.JobID)
		}
		return strings.Join(out, ",")
	}
	if code, p := preview(boot.SecretID, "feature"); code != http.StatusOK || keys(p) != "api,web,old" || !p.Changes || len(p.Errors) != 1 {
		t.Fatalf("management token: %d %s changes %v errors %q", code, keys(p), p.Changes, p.Errors)
	}
	if code, p := preview(reader, "feature"); code != http.StatusOK || keys(p) != "web" || !p.Changes || len(p.Errors) != 0 {
		t.Fatalf("reader of web: %d %s changes %v errors %q, want web alone and no file errors", code, keys(p), p.Changes, p.Errors)
	}
	if code, p := preview(reader, "api-only"); code != http.StatusOK || keys(p) != "" || p.Changes {
		t.Fatalf("reader of web, a ref that changes api alone: %d %s changes %v, want nothing", code, keys(p), p.Changes)
	}
	if code, _ := preview(pauser, "feature"); code != http.StatusForbidden {
		t.Fatalf("a token without read: %d, want 403", code)
	}
	if code, _ := preview("", "feature"); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	// What an attacker with a read token could send: garbage, unknown
	// fields, a huge body. Each is refused before the reconciler is
	// asked for a preview.
	before := len(fake.Calls())
	for _, tc := range []struct {
		name string
		body string
		want int
	}{
		{"garbage", "\x00\xffnot json", http.StatusBadRequest},
		{"unknown field", `{"repository":"main","ref":"feature","jobs":["all"]}`, http.StatusBadRequest},
		{"huge body", `{"repository":"main","ref":"` + strings.Repeat("a", 4<<20) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		if a := aclCall(t, s, reader, "POST", "/v1/preview", tc.body); a.code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, a.code, a.body, tc.want)
		}
	}
	if calls := fake.Calls()[before:]; len(calls) != 0 {
		t.Fatalf("refused bodies reached the reconciler: %v", calls)
	}
}
