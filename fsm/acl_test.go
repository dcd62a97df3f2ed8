package fsm

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

func testToken(accessor, secret, typ string) *structs.ACLToken {
	return &structs.ACLToken{AccessorID: accessor, SecretHash: structs.HashSecret(secret), Name: "tok-" + accessor, Type: typ}
}

func testMethod(name string) *structs.ACLAuthMethod {
	return &structs.ACLAuthMethod{Name: name, Type: structs.ACLAuthMethodOIDC, DisplayName: "SSO", TokenTTL: "1h", Default: true,
		Config: &structs.ACLAuthMethodConfig{
			OIDCDiscoveryURL: "https://idp.example", OIDCClientID: "nops", OIDCClientSecret: "s3cr3t",
			OIDCScopes: []string{"groups"}, AllowedRedirectURIs: []string{"http://localhost:4649/oidc/callback"},
			DiscoveryCaPem: []string{"pem"}, JWKSURL: "https://idp.example/keys", JWTValidationPubKeys: []string{"key"},
			BoundIssuer: []string{"https://idp.example"}, BoundAudiences: []string{"nops"}, SigningAlgs: []string{"RS256"},
			ClaimMappings: map[string]string{"email": "email"}, ListClaimMappings: map[string]string{"groups": "groups"},
			UserClaim: "email", ClockSkewLeeway: "5s",
		}}
}

// populateACL writes one object of every ACL table with every field set,
// for the snapshot round trip.
func populateACL(t testing.TB, h *harness) {
	t.Helper()
	boot := testToken("boot", "boot-secret", structs.ACLManagementToken)
	h.mustApply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{WriteMeta: h.meta("anonymous"), Token: boot})
	h.mustApply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: h.meta("boot"), Policy: &structs.ACLPolicy{
		Name: "readers", Description: "read all", Rules: `namespace "*" { capabilities = ["read"] }`}})
	h.mustApply(structs.ACLRoleUpsertRequestType, &structs.ACLRoleUpsertRequest{WriteMeta: h.meta("boot"), Create: true, Role: &structs.ACLRole{
		Name: "ops", Description: "operators", Policies: []string{"readers"}}})
	h.mustApply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: h.meta("boot"), Method: testMethod("sso")})
	h.mustApply(structs.ACLBindingRuleUpsertRequestType, &structs.ACLBindingRuleUpsertRequest{WriteMeta: h.meta("boot"), Create: true, Rule: &structs.ACLBindingRule{
		ID: "rule-1", Description: "ops group", AuthMethod: "sso", Selector: `"ops" in list.groups`, BindType: structs.ACLBindTypeRole, BindName: "ops"}})
	tok := testToken("client", "client-secret", structs.ACLClientToken)
	tok.Policies, tok.Roles, tok.AuthMethod, tok.ExpirationTime = []string{"readers"}, []string{"ops"}, "sso", h.now.Add(time.Hour)
	h.mustApply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: h.meta("boot"), Create: true, Token: tok})
}

func aclApplyCases() map[structs.MessageType]func(t *testing.T, h *harness) {
	return map[structs.MessageType]func(t *testing.T, h *harness){
		structs.ACLPolicyUpsertRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: h.meta("alice"), Policy: &structs.ACLPolicy{Name: "p", Rules: "x"}})
			created := h.now
			h.mustApply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: h.meta("alice"), Policy: &structs.ACLPolicy{Name: "p", Rules: "y"}})
			p, err := h.state().ACL().Policy("p")
			if err != nil || p == nil || p.Rules != "y" || p.CreateIndex != 1 || p.ModifyIndex != 2 || !p.CreatedAt.Equal(created) || !p.UpdatedAt.Equal(h.now) {
				t.Fatalf("policy = %+v, %v", p, err)
			}
			if h.state().ACL().Index() != 2 {
				t.Fatalf("ACL index %d, want 2", h.state().ACL().Index())
			}
			wantEvents(t, h.eventsSince(1), eventWant{Kind: EventKindACL, Object: "acl-policy/p", To: "updated", Actor: "alice"})
		},
		structs.ACLPolicyDeleteRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: h.meta("alice"), Policy: &structs.ACLPolicy{Name: "p", Rules: "x"}})
			h.refused(structs.ErrNotFound, []string{`policy "q"`}, func() error {
				return h.apply(structs.ACLPolicyDeleteRequestType, &structs.ACLDeleteRequest{WriteMeta: h.meta("alice"), Names: []string{"p", "q"}})
			})
			h.mustApply(structs.ACLPolicyDeleteRequestType, &structs.ACLDeleteRequest{WriteMeta: h.meta("alice"), Names: []string{"p"}})
			if p, _ := h.state().ACL().Policy("p"); p != nil {
				t.Fatalf("policy not deleted: %+v", p)
			}
		},
		structs.ACLRoleUpsertRequestType: func(t *testing.T, h *harness) {
			h.refused(structs.ErrNotFound, []string{`role "r"`}, func() error {
				return h.apply(structs.ACLRoleUpsertRequestType, &structs.ACLRoleUpsertRequest{WriteMeta: h.meta("a"), Role: &structs.ACLRole{Name: "r"}})
			})
			h.mustApply(structs.ACLRoleUpsertRequestType, &structs.ACLRoleUpsertRequest{WriteMeta: h.meta("a"), Create: true, Role: &structs.ACLRole{Name: "r", Policies: []string{"p"}}})
			h.refused(structs.ErrConflict, []string{"already exists"}, func() error {
				return h.apply(structs.ACLRoleUpsertRequestType, &structs.ACLRoleUpsertRequest{WriteMeta: h.meta("a"), Create: true, Role: &structs.ACLRole{Name: "r"}})
			})
			h.mustApply(structs.ACLRoleUpsertRequestType, &structs.ACLRoleUpsertRequest{WriteMeta: h.meta("a"), Role: &structs.ACLRole{Name: "r", Policies: []string{"p", "q"}}})
			r, err := h.state().ACL().Role("r")
			if err != nil || r == nil || len(r.Policies) != 2 || r.CreateIndex != 2 {
				t.Fatalf("role = %+v, %v", r, err)
			}
		},
		structs.ACLRoleDeleteRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLRoleUpsertRequestType, &structs.ACLRoleUpsertRequest{WriteMeta: h.meta("a"), Create: true, Role: &structs.ACLRole{Name: "r"}})
			h.mustApply(structs.ACLRoleDeleteRequestType, &structs.ACLDeleteRequest{WriteMeta: h.meta("a"), Names: []string{"r"}})
			if r, _ := h.state().ACL().Role("r"); r != nil {
				t.Fatal("role not deleted")
			}
		},
		structs.ACLTokenUpsertRequestType: func(t *testing.T, h *harness) {
			tok := testToken("a1", "secret-1", structs.ACLClientToken)
			h.mustApply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: h.meta("a"), Create: true, Token: tok})
			created := h.now
			// A second token with the same secret is refused.
			h.refused(structs.ErrConflict, []string{"secret"}, func() error {
				return h.apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: h.meta("a"), Create: true,
					Token: testToken("a2", "secret-1", structs.ACLClientToken)})
			})
			h.refused(structs.ErrInvalid, []string{"type"}, func() error {
				return h.apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: h.meta("a"), Create: true,
					Token: testToken("a3", "secret-3", "root")})
			})
			// An update cannot change the secret.
			upd := testToken("a1", "other", structs.ACLClientToken)
			upd.Name, upd.Policies = "renamed", []string{"p"}
			h.mustApply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: h.meta("a"), Token: upd})
			got, err := h.state().ACL().TokenBySecretHash(structs.HashSecret("secret-1"))
			if err != nil || got == nil || got.Name != "renamed" || len(got.Policies) != 1 || !got.CreateTime.Equal(created) {
				t.Fatalf("token by secret = %+v, %v", got, err)
			}
			if other, _ := h.state().ACL().TokenBySecretHash(structs.HashSecret("other")); other != nil {
				t.Fatal("an update changed the secret")
			}
		},
		structs.ACLTokenDeleteRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: h.meta("a"), Create: true, Token: testToken("a1", "s", structs.ACLClientToken)})
			h.mustApply(structs.ACLTokenDeleteRequestType, &structs.ACLDeleteRequest{WriteMeta: h.meta("nops"), Names: []string{"gone", "a1"}, IgnoreMissing: true})
			if tok, _ := h.state().ACL().Token("a1"); tok != nil {
				t.Fatal("token not deleted")
			}
			wantEvents(t, h.eventsSince(1), eventWant{Kind: EventKindACL, Object: "acl-token/a1", To: "deleted", Actor: "nops"})
		},
		structs.ACLTokenBootstrapRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{WriteMeta: h.meta("anonymous"), Token: testToken("b1", "s1", structs.ACLManagementToken)})
			if h.state().ACL().BootstrapIndex() != 1 {
				t.Fatalf("bootstrap index %d", h.state().ACL().BootstrapIndex())
			}
			// Once only: a second bootstrap is refused, with the reset index.
			h.refused(structs.ErrConflict, []string{"already done", "reset index: 1"}, func() error {
				return h.apply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{WriteMeta: h.meta("x"), Token: testToken("b2", "s2", structs.ACLManagementToken)})
			})
			h.refused(structs.ErrConflict, []string{"reset index: 1"}, func() error {
				return h.apply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{WriteMeta: h.meta("x"), ResetIndex: 7, Token: testToken("b2", "s2", structs.ACLManagementToken)})
			})
			h.refused(structs.ErrInvalid, []string{"management"}, func() error {
				return h.apply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{WriteMeta: h.meta("x"), ResetIndex: 1, Token: testToken("b2", "s2", structs.ACLClientToken)})
			})
			// The reset index of the last bootstrap allows one more.
			h.mustApply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{WriteMeta: h.meta("x"), ResetIndex: 1, Token: testToken("b2", "s2", structs.ACLManagementToken)})
			idx := h.index
			if h.state().ACL().BootstrapIndex() != idx {
				t.Fatalf("bootstrap index %d, want %d", h.state().ACL().BootstrapIndex(), idx)
			}
			h.refused(structs.ErrConflict, []string{"already done"}, func() error {
				return h.apply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{WriteMeta: h.meta("x"), ResetIndex: 1, Token: testToken("b3", "s3", structs.ACLManagementToken)})
			})
		},
		structs.ACLAuthMethodUpsertRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: h.meta("a"), Method: testMethod("one")})
			h.mustApply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: h.meta("a"), Method: testMethod("two")})
			one, _ := h.state().ACL().AuthMethod("one")
			two, _ := h.state().ACL().AuthMethod("two")
			if one == nil || two == nil || one.Default || !two.Default {
				t.Fatalf("one default method: one %+v two %+v", one, two)
			}
			if r := two.Redacted(); r.Config.OIDCClientSecret != "redacted" || two.Config.OIDCClientSecret != "s3cr3t" {
				t.Fatal("Redacted does not hide the secret or changes the stored method")
			}
			h.refused(structs.ErrInvalid, []string{"oidc or jwt"}, func() error {
				return h.apply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: h.meta("a"), Method: &structs.ACLAuthMethod{Name: "x", Type: "ldap"}})
			})
		},
		structs.ACLAuthMethodDeleteRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: h.meta("a"), Method: testMethod("one")})
			h.mustApply(structs.ACLBindingRuleUpsertRequestType, &structs.ACLBindingRuleUpsertRequest{WriteMeta: h.meta("a"), Create: true,
				Rule: &structs.ACLBindingRule{ID: "r1", AuthMethod: "one", BindType: structs.ACLBindTypeManagement}})
			h.mustApply(structs.ACLAuthMethodDeleteRequestType, &structs.ACLDeleteRequest{WriteMeta: h.meta("a"), Names: []string{"one"}})
			if r, _ := h.state().ACL().BindingRule("r1"); r != nil {
				t.Fatal("the binding rules of a deleted method remain")
			}
		},
		structs.ACLBindingRuleUpsertRequestType: func(t *testing.T, h *harness) {
			h.refused(structs.ErrNotFound, []string{`auth method "one"`}, func() error {
				return h.apply(structs.ACLBindingRuleUpsertRequestType, &structs.ACLBindingRuleUpsertRequest{WriteMeta: h.meta("a"), Create: true,
					Rule: &structs.ACLBindingRule{ID: "r1", AuthMethod: "one", BindType: structs.ACLBindTypeManagement}})
			})
			h.mustApply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: h.meta("a"), Method: testMethod("one")})
			h.refused(structs.ErrInvalid, []string{"bind name"}, func() error {
				return h.apply(structs.ACLBindingRuleUpsertRequestType, &structs.ACLBindingRuleUpsertRequest{WriteMeta: h.meta("a"), Create: true,
					Rule: &structs.ACLBindingRule{ID: "r1", AuthMethod: "one", BindType: structs.ACLBindTypeRole}})
			})
			h.mustApply(structs.ACLBindingRuleUpsertRequestType, &structs.ACLBindingRuleUpsertRequest{WriteMeta: h.meta("a"), Create: true,
				Rule: &structs.ACLBindingRule{ID: "r1", AuthMethod: "one", BindType: structs.ACLBindTypeRole, BindName: "ops", Selector: "x"}})
			if r, _ := h.state().ACL().BindingRule("r1"); r == nil || r.BindName != "ops" {
				t.Fatalf("rule = %+v", r)
			}
		},
		structs.ACLBindingRuleDeleteRequestType: func(t *testing.T, h *harness) {
			h.mustApply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: h.meta("a"), Method: testMethod("one")})
			h.mustApply(structs.ACLBindingRuleUpsertRequestType, &structs.ACLBindingRuleUpsertRequest{WriteMeta: h.meta("a"), Create: true,
				Rule: &structs.ACLBindingRule{ID: "r1", AuthMethod: "one", BindType: structs.ACLBindTypeManagement}})
			h.mustApply(structs.ACLBindingRuleDeleteRequestType, &structs.ACLDeleteRequest{WriteMeta: h.meta("a"), Names: []string{"r1"}})
			if r, _ := h.state().ACL().BindingRule("r1"); r != nil {
				t.Fatal("rule not deleted")
			}
		},
	}
}

// TestACL_SnapshotKeepsBootstrap: after a restore, the bootstrap is still
// done, and the secret lookup works on the restored store.
func TestACL_SnapshotKeepsBootstrap(t *testing.T) {
	h := newHarness(t)
	populateACL(t, h)
	f := restore(t, persist(t, h.fsm))
	st := f.State()
	if st.ACL().BootstrapIndex() != 1 || st.ACL().Index() != h.index {
		t.Fatalf("restored ACL counters: bootstrap %d index %d; want 1 and %d", st.ACL().BootstrapIndex(), st.ACL().Index(), h.index)
	}
	tok, err := st.ACL().TokenBySecretHash(structs.HashSecret("client-secret"))
	if err != nil || tok == nil || tok.AccessorID != "client" || !tok.Expired(h.now.Add(2*time.Hour)) || tok.Expired(h.now) {
		t.Fatalf("restored token = %+v, %v", tok, err)
	}
}
