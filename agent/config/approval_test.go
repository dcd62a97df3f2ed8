package config

import (
	"strings"
	"testing"
	"time"
)

func TestApprovalBlock_SetsEverySetting(t *testing.T) {
	p := writeFile(t, "a.hcl", `
acl {
  enabled = true
}
approval {
  forbid_self = true
  ttl         = "72h"
}
`)
	c, err := Load(args("-config", p), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (ApprovalConfig{ForbidSelf: true, TTL: 72 * time.Hour}); c.Approval != want {
		t.Fatalf("approval = %+v, want %+v", c.Approval, want)
	}
	other, err := Load(args(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if other.Approval != (ApprovalConfig{}) {
		t.Fatalf("approval without a block = %+v: forbid_self is off and there is no TTL by default", other.Approval)
	}
	if changed := strings.Join(c.Changed(other), ","); changed != "acl,approval" {
		t.Fatalf("Changed = %v", changed)
	}
}

func TestApprovalBlock_RefusesBadValues(t *testing.T) {
	for body, want := range map[string]string{
		// With ACLs off no rule can tell the commit's author from another
		// approver: an error at start, which says what to do.
		`approval { forbid_self = true }`: "approval: forbid_self: needs acl { enabled = true }",
		`approval { ttl = "-1h" }`:        `"ttl"; invalid duration -1h0m0s: must be greater than zero`,
		`approval { ttl = "3 days" }`:     "ttl",
		`approval { quorum = 2 }`:         "quorum",
	} {
		t.Run(body, func(t *testing.T) {
			p := writeFile(t, "a.hcl", body)
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
