package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestDashboard_Approvals shows the approval rules of SPEC section 20 on
// the deployment and approvals pages, each viewer seeing its own: "1 of 2
// approvals" with who; in place of the Approve button, why it would be
// refused, to the viewer who already approved and, under forbid_self, to
// the commit's author; the button to anyone else, and Reject to all.
func TestDashboard_Approvals(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.ACL.Enabled, c.Approval.ForbidSelf = true, true
	}))
	var boot apiToken
	mustDo(t, s, "", "POST", "/v1/acl/bootstrap", nil, &boot)
	mustDo(t, s, boot.SecretID, "PUT", "/v1/acl/policy/approver", map[string]string{
		"rules": "namespace \"default\" {\n capabilities = [\"read\", \"approve\"]\n}"}, nil)
	tokens := map[string]string{}
	for _, name := range []string{"alice", "bob", "ada@example.com"} {
		var tok apiToken
		mustDo(t, s, boot.SecretID, "POST", "/v1/acl/token", map[string]any{"name": name, "policies": []string{"approver"}}, &tok)
		tokens[name] = tok.SecretID
	}
	d := s.CreatePendingWith("default", "web", func(d *structs.Deployment) {
		d.ApprovalsRequired, d.ApprovalTTL, d.CommitAuthor = 2, 72*time.Hour, "Ada Lovelace <ada@example.com>"
	})
	c := newClient(t, s.URL)
	page := func(who, path string) string {
		t.Helper()
		code, _, body := c.do("GET", path, nil, map[string]string{"X-Nops-Token": tokens[who]})
		if code != http.StatusOK {
			t.Fatalf("GET %s as %s: %d\n%.800s", path, who, code, body)
		}
		return body
	}
	approve := func(who string) {
		t.Helper()
		code, h, body := c.do("POST", "/ui/deployment/"+d.ID+"/approve", url.Values{"comment": {"ok"}},
			map[string]string{"X-Nops-Token": tokens[who]})
		if code != http.StatusSeeOther {
			t.Fatalf("approve as %s: %d %v\n%.800s", who, code, h, body)
		}
	}
	want := func(who, body string, has []string, hasNot []string) {
		t.Helper()
		for _, s := range has {
			if !strings.Contains(body, s) {
				t.Errorf("the page %s sees lacks %q", who, s)
			}
		}
		for _, s := range hasNot {
			if strings.Contains(body, s) {
				t.Errorf("the page %s sees shows %q", who, s)
			}
		}
	}
	path := "/ui/deployment/" + d.ID

	want("alice", page("alice", path), []string{"0 of 2 approvals", `id="approve"`, `id="reject"`, "; expires <time", ">in 2d</time> ("},
		[]string{`id="approve-refused"`})
	want("the author", page("ada@example.com", path),
		[]string{`id="approve-refused"`, "approval forbid_self: ada@example.com wrote commit", `id="reject"`}, []string{`id="approve"`})

	approve("alice")
	want("alice", page("alice", path), []string{"1 of 2 approvals: alice ", `id="approve-refused"`,
		"nops_approvals: alice already approved", `id="reject"`}, []string{`id="approve"`})
	want("bob", page("bob", path), []string{"1 of 2 approvals: alice ", `id="approve"`}, []string{`id="approve-refused"`})
	want("bob", page("bob", "/ui/approvals"), []string{"1 of 2 approvals: alice</td>"}, nil)

	approve("bob")
	got, err := s.State().Deployment(d.ID)
	if err != nil || got.State != structs.StateApplying || len(got.ApprovalsGiven()) != 2 {
		t.Fatalf("after two approvals: %+v (%v)", got, err)
	}
	want("bob", page("bob", path), []string{"2 of 2 approvals: alice ", ", bob "}, []string{`id="approve"`, `id="approve-refused"`})
}
