package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// startApprovers starts one server with ACLs on and approval { forbid_self },
// and makes a token that may read and approve on namespace default for each
// name. It returns the server and the tokens by name.
func startApprovers(t *testing.T, names ...string) (*nopstest.Server, map[string]string) {
	t.Helper()
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.ACL.Enabled = true
		c.Approval.ForbidSelf = true
	}))
	var boot structs.ACLTokenView
	aclCall(t, s, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap", &boot)
	aclCall(t, s, boot.SecretID, "PUT", "/v1/acl/policy/approver", map[string]string{
		"rules": "namespace \"default\" {\n capabilities = [\"read\", \"approve\"]\n}"}).ok(t, "policy", nil)
	tokens := map[string]string{}
	for _, name := range names {
		var tok structs.ACLTokenView
		aclCall(t, s, boot.SecretID, "POST", "/v1/acl/token", map[string]any{"name": name, "policies": []string{"approver"}}).
			ok(t, "token "+name, &tok)
		tokens[name] = tok.SecretID
	}
	return s, tokens
}

// TestApproval_TwoTokensAndForbidSelf runs the rules of SPEC section 20
// through the API with ACLs on: a deployment that needs two approvals,
// whose commit Ada wrote. Alice's approval leaves it pending, listed with
// who and when; alice again is refused (409) and counts once; Ada's
// token is refused (403 naming the rule) under forbid_self; Bob's
// approval moves it on. The actor is each token's name, whatever
// X-Nops-Actor says, and each approval notifies.
func TestApproval_TwoTokensAndForbidSelf(t *testing.T) {
	s, tok := startApprovers(t, "alice", "bob", "Ada Lovelace")
	d := s.CreatePendingWith("default", "web", func(d *structs.Deployment) {
		d.ApprovalsRequired, d.CommitAuthor = 2, "Ada Lovelace <ada@example.com>"
	})
	path := "/v1/deployment/" + d.ID + "/approve"

	var got structs.Deployment
	aclCall(t, s, tok["alice"], "POST", path, map[string]string{"comment": "looks right"}).ok(t, "alice approves", &got)
	if got.State != structs.StatePendingApproval || got.ApprovalsRequired != 2 || len(got.Approvals) != 1 ||
		got.Approvals[0].Actor != "alice" || got.Approvals[0].Comment != "looks right" || got.Approvals[0].Time.IsZero() {
		t.Fatalf("after one approval of two: %s, required %d, approvals %+v", got.State, got.ApprovalsRequired, got.Approvals)
	}

	for _, c := range []struct {
		who, why string
		code     int
		names    []string
	}{
		{"alice", "the same identity again", http.StatusConflict, []string{"nops_approvals", "alice already approved"}},
		{"Ada Lovelace", "the commit's author", http.StatusForbidden, []string{"approval forbid_self", "Ada Lovelace wrote commit"}},
	} {
		before := aclDigest(t, s.State())
		a := aclCall(t, s, tok[c.who], "POST", path, map[string]string{})
		if a.code != c.code {
			t.Fatalf("%s (%s): %d %s, want %d", c.who, c.why, a.code, a.body, c.code)
		}
		for _, n := range c.names {
			if !strings.Contains(a.errorMessage(), n) {
				t.Errorf("%s (%s): error %q does not name %q", c.who, c.why, a.errorMessage(), n)
			}
		}
		if after := aclDigest(t, s.State()); after != before {
			t.Fatalf("a refused approval (%s) changed the state", c.why)
		}
	}

	aclCall(t, s, tok["bob"], "POST", path, nil).ok(t, "bob approves", &got)
	if got.State != structs.StateApplying || len(got.Approvals) != 2 || got.Approvals[1].Actor != "bob" {
		t.Fatalf("after two approvals: %s, approvals %+v", got.State, got.Approvals)
	}
	var kinds []string
	ns, _, err := s.State().Notifications(fsm.NotificationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.Object == d.ID {
			kinds = append(kinds, fmt.Sprintf("%s by %s", n.Kind, n.Actor))
		}
	}
	if want := "approval by alice,approved by bob,applying by bob"; !strings.HasSuffix(strings.Join(kinds, ","), want) {
		t.Fatalf("notifications %q, want them to end with %q", kinds, want)
	}
}
