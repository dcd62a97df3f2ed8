package agent_test

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cap/oidc"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// testVerifier is a PKCE verifier the test and the provider share.
type testVerifier struct{ v string }

func (t *testVerifier) Verifier() string { return t.v }
func (t *testVerifier) Challenge() string {
	sum := sha256.Sum256([]byte(t.v))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
func (t *testVerifier) Method() oidc.ChallengeMethod { return oidc.S256 }
func (t *testVerifier) Copy() oidc.CodeVerifier      { c := *t; return &c }

func randomString(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// startSSO starts one server with ACLs on, bootstraps it and writes two
// policies and a role.
func startSSO(t *testing.T) (*nopstest.Server, string) {
	t.Helper()
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) { c.ACL.Enabled = true }))
	var boot structs.ACLTokenView
	aclCall(t, s, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap", &boot)
	mgmt := boot.SecretID
	aclCall(t, s, mgmt, "PUT", "/v1/acl/policy/approver", map[string]string{
		"rules": "namespace \"default\" {\n capabilities = [\"read\", \"approve\"]\n}"}).ok(t, "policy", nil)
	aclCall(t, s, mgmt, "PUT", "/v1/acl/policy/reader", map[string]string{
		"rules": "namespace \"*\" {\n capabilities = [\"read\"]\n}"}).ok(t, "policy", nil)
	aclCall(t, s, mgmt, "PUT", "/v1/acl/role/ops", map[string]any{"policies": []string{"reader"}}).ok(t, "role", nil)
	return s, mgmt
}

// startOIDCProvider starts an OIDC provider, stopped when the test ends,
// that knows the client "nops" (secret "client-secret") and lets it
// redirect to the URI it returns.
func startOIDCProvider(t *testing.T) (*oidc.TestProvider, string) {
	t.Helper()
	p := oidc.StartTestProvider(t)
	t.Cleanup(p.Stop)
	redirect := "http://127.0.0.1:4649/oidc/callback"
	p.SetAllowedRedirectURIs([]string{redirect})
	p.SetClientCreds("nops", "client-secret")
	return p, redirect
}

// oidcMethodConfig is the config of an OIDC auth method on p for the
// client of startOIDCProvider, naming users by email, with extra added.
func oidcMethodConfig(p *oidc.TestProvider, redirect string, extra map[string]any) map[string]any {
	c := map[string]any{
		"oidc_discovery_url": p.Addr(), "oidc_client_id": "nops", "oidc_client_secret": "client-secret",
		"allowed_redirect_uris": []string{redirect}, "discovery_ca_pem": []string{p.CACert()},
		"bound_audiences": []string{"nops"}, "signing_algs": []string{"ES256"}, "user_claim": "email",
	}
	maps.Copy(c, extra)
	return c
}

// TestACL_OIDCLogin runs the authorization code flow with PKCE against a
// real OIDC provider running in the test: a user whose groups match a
// binding rule gets a token with the bound policy and role, named after
// the user; a user whose claims match no rule is refused; the token
// expires with the method's TTL and is refused after it.
func TestACL_OIDCLogin(t *testing.T) {
	s, mgmt := startSSO(t)
	p, redirect := startOIDCProvider(t)

	aclCall(t, s, mgmt, "PUT", "/v1/acl/auth-method/corp", map[string]any{
		"type": "oidc", "token_ttl": "3s", "default": true,
		"config": oidcMethodConfig(p, redirect, map[string]any{
			"claim_mappings": map[string]string{"email": "email"}, "list_claim_mappings": map[string]string{"groups": "groups"},
		})}).ok(t, "auth method", nil)
	// The client secret never comes back.
	if a := aclCall(t, s, mgmt, "GET", "/v1/acl/auth-method/corp", nil); strings.Contains(string(a.body), "client-secret") {
		t.Fatalf("the auth method answer shows its client secret: %s", a.body)
	}
	aclCall(t, s, mgmt, "POST", "/v1/acl/binding-rule", map[string]any{
		"auth_method": "corp", "selector": `"ops" in list.groups`, "bind_type": "policy", "bind_name": "approver"}).ok(t, "rule", nil)
	aclCall(t, s, mgmt, "POST", "/v1/acl/binding-rule", map[string]any{
		"auth_method": "corp", "selector": `"ops" in list.groups and value.email matches "@example.com$"`, "bind_type": "role", "bind_name": "ops"}).ok(t, "rule", nil)

	login := func(email string, groups []string) answer {
		t.Helper()
		nonce, verifier, code := randomString(t), &testVerifier{v: randomString(t)}, "code-"+randomString(t)[:8]
		p.SetExpectedAuthCode(code)
		p.SetExpectedAuthNonce(nonce)
		p.SetPKCEVerifier(verifier)
		p.SetExpectedSubject(email)
		p.SetCustomClaims(map[string]any{"email": email, "groups": groups})

		var au struct {
			AuthURL string `json:"auth_url"`
			State   string `json:"state"`
		}
		aclCall(t, s, "", "POST", "/v1/acl/oidc/auth-url", map[string]string{
			"redirect_uri": redirect, "client_nonce": nonce, "code_challenge": verifier.Challenge()}).ok(t, "auth url", &au)
		if !strings.Contains(au.AuthURL, "code_challenge="+verifier.Challenge()) {
			t.Fatalf("auth URL %s has no PKCE challenge", au.AuthURL)
		}
		// The browser's part: the provider redirects to the callback.
		hc := p.HTTPClient()
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := hc.Get(au.AuthURL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || loc.Query().Get("code") != code {
			t.Fatalf("provider answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		if loc.Query().Get("state") != au.State {
			t.Fatalf("callback state %q, want %q", loc.Query().Get("state"), au.State)
		}
		return aclCall(t, s, "", "POST", "/v1/acl/oidc/complete-auth", map[string]string{
			"redirect_uri": redirect, "client_nonce": nonce, "state": au.State, "code": code, "code_verifier": verifier.v})
	}

	var tok structs.ACLTokenView
	login("alice@example.com", []string{"dev", "ops"}).ok(t, "alice's login", &tok)
	if tok.Name != "alice@example.com" || tok.AuthMethod != "corp" || tok.Type != structs.ACLClientToken ||
		strings.Join(tok.Policies, ",") != "approver" || strings.Join(tok.Roles, ",") != "ops" || tok.SecretID == "" {
		t.Fatalf("alice's token: %+v", tok)
	}
	if tok.ExpirationTime == nil || time.Until(*tok.ExpirationTime) > 4*time.Second {
		t.Fatalf("alice's token expires at %v; want in about 3s", tok.ExpirationTime)
	}
	var self structs.ACLTokenView
	aclCall(t, s, tok.SecretID, "GET", "/v1/acl/token/self", nil).ok(t, "self", &self)
	if self.AccessorID != tok.AccessorID || self.SecretID != "" {
		t.Fatalf("token self: %+v", self)
	}
	// The bound policy works: alice may approve in default; she may not
	// write a window.
	if a := aclCall(t, s, tok.SecretID, "GET", "/v1/deployments", nil); a.code != http.StatusOK {
		t.Fatalf("alice lists deployments: %d %s", a.code, a.body)
	}
	if a := aclCall(t, s, tok.SecretID, "PUT", "/v1/window/w", map[string]string{"kind": "deny", "schedule": "0 1 * * *", "duration": "1h"}); a.code != http.StatusForbidden {
		t.Fatalf("alice writes a window: %d, want 403", a.code)
	}

	// A user whose claims match no binding rule is refused.
	before := aclDigest(t, s.State())
	if a := login("bob@example.com", []string{"dev"}); a.code != http.StatusForbidden || !strings.Contains(a.errorMessage(), "no binding rule") {
		t.Fatalf("bob's login: %d %s; want 403, no binding rule", a.code, a.body)
	}
	if after := aclDigest(t, s.State()); after != before {
		t.Fatalf("a refused login changed the state")
	}
	// A wrong PKCE verifier or state is refused by the exchange.
	nonce := randomString(t)
	p.SetExpectedAuthNonce(nonce)
	if a := aclCall(t, s, "", "POST", "/v1/acl/oidc/complete-auth", map[string]string{
		"redirect_uri": redirect, "client_nonce": nonce, "state": "st_forged", "code": "code-x", "code_verifier": "wrong-verifier-000000000000000000000000000"}); a.code != http.StatusUnauthorized {
		t.Fatalf("forged completion: %d %s; want 401", a.code, a.body)
	}

	// Alice's token expires with the method's TTL.
	testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
		a := aclCall(t, s, tok.SecretID, "GET", "/v1/acl/token/self", nil)
		// Refused as expired, or as unknown once the leader collected it.
		return a.code == http.StatusUnauthorized,
			fmt.Errorf("expired login token answered %d %s", a.code, a.body)
	})
}

// TestACL_JWTLogin exchanges a signed JWT for a token, with the method's
// public key; a JWT for another audience or signed by another key is
// refused.
func TestACL_JWTLogin(t *testing.T) {
	s, mgmt := startSSO(t)
	pub, priv := oidc.TestGenerateKeys(t)
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	aclCall(t, s, mgmt, "PUT", "/v1/acl/auth-method/ci", map[string]any{
		"type": "jwt", "config": map[string]any{
			"jwt_validation_pub_keys": []string{pemKey}, "bound_audiences": []string{"nops"},
			"bound_issuer": []string{"https://ci.example"}, "signing_algs": []string{"ES256"},
			"claim_mappings": map[string]string{"repository": "repo"},
		}}).ok(t, "auth method", nil)
	aclCall(t, s, mgmt, "POST", "/v1/acl/binding-rule", map[string]any{
		"auth_method": "ci", "selector": `value.repo == "infra"`, "bind_type": "role", "bind_name": "ops"}).ok(t, "rule", nil)

	sign := func(key any, aud, repo string) string {
		now := time.Now()
		return oidc.TestSignJWT(t, key, "ES256", map[string]any{
			"iss": "https://ci.example", "sub": "ci-" + repo, "aud": []string{aud}, "repository": repo,
			"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Minute).Unix(),
		}, nil)
	}
	var tok structs.ACLTokenView
	aclCall(t, s, "", "POST", "/v1/acl/login", map[string]string{"auth_method": "ci", "login_token": sign(priv, "nops", "infra")}).ok(t, "login", &tok)
	if tok.Name != "ci-infra" || strings.Join(tok.Roles, ",") != "ops" || tok.ExpirationTime == nil {
		t.Fatalf("JWT login token: %+v", tok)
	}
	if d := time.Until(*tok.ExpirationTime); d < 50*time.Minute || d > 61*time.Minute {
		t.Fatalf("JWT login token expires in %v; want the default acl.token_ttl of 1h", d)
	}
	_, other := oidc.TestGenerateKeys(t)
	for name, jwt := range map[string]string{
		"another audience": sign(priv, "vault", "infra"),
		"another key":      sign(other, "nops", "infra"),
		"garbage":          "a.b.c",
	} {
		if a := aclCall(t, s, "", "POST", "/v1/acl/login", map[string]string{"auth_method": "ci", "login_token": jwt}); a.code != http.StatusUnauthorized {
			t.Errorf("JWT of %s: %d %s; want 401", name, a.code, a.body)
		}
	}
	if a := aclCall(t, s, "", "POST", "/v1/acl/login", map[string]string{"auth_method": "ci", "login_token": sign(priv, "nops", "web")}); a.code != http.StatusForbidden {
		t.Errorf("JWT matching no binding rule: %d %s; want 403", a.code, a.body)
	}
}

// TestACL_OIDCStateChecked: complete-auth takes only a state the leader
// issued at auth-url, for one login, with the client nonce, redirect URI
// and PKCE verifier it was issued for; a forged or replayed state is refused before
// the code is exchanged, even with a code the provider would accept.
func TestACL_OIDCStateChecked(t *testing.T) {
	s, mgmt := startSSO(t)
	p, redirect := startOIDCProvider(t)
	aclCall(t, s, mgmt, "PUT", "/v1/acl/auth-method/corp", map[string]any{
		"type": "oidc", "default": true, "config": oidcMethodConfig(p, redirect, nil),
	}).ok(t, "auth method", nil)
	aclCall(t, s, mgmt, "POST", "/v1/acl/binding-rule", map[string]any{
		"auth_method": "corp", "bind_type": "policy", "bind_name": "reader"}).ok(t, "rule", nil)

	nonce, verifier, code := randomString(t), &testVerifier{v: randomString(t)}, "code-"+randomString(t)[:8]
	p.SetExpectedAuthCode(code)
	p.SetExpectedAuthNonce(nonce)
	p.SetPKCEVerifier(verifier)
	p.SetExpectedSubject("alice@example.com")
	p.SetCustomClaims(map[string]any{"email": "alice@example.com"})
	authURL := func(nonce string) string {
		t.Helper()
		var au struct {
			State string `json:"state"`
		}
		aclCall(t, s, "", "POST", "/v1/acl/oidc/auth-url", map[string]string{
			"redirect_uri": redirect, "client_nonce": nonce, "code_challenge": verifier.Challenge()}).ok(t, "auth url", &au)
		return au.State
	}
	complete := func(state, nonce string) answer {
		t.Helper()
		return aclCall(t, s, "", "POST", "/v1/acl/oidc/complete-auth", map[string]string{
			"redirect_uri": redirect, "client_nonce": nonce, "state": state, "code": code, "code_verifier": verifier.v})
	}
	refused := func(what string, a answer, want string) {
		t.Helper()
		if a.code != http.StatusUnauthorized || !strings.Contains(a.errorMessage(), want) {
			t.Fatalf("%s: %d %s; want 401 saying %q", what, a.code, a.body, want)
		}
	}
	tokens := func() int {
		t.Helper()
		toks, err := s.State().ACL().Tokens()
		if err != nil {
			t.Fatal(err)
		}
		return len(toks)
	}
	before := tokens()
	refused("a state never issued", complete("st_forged", nonce), "not issued")
	other := authURL(randomString(t))
	refused("a state issued for another nonce", complete(other, nonce), "another client_nonce")
	if n := tokens(); n != before {
		t.Fatalf("refused completions made %d tokens", n-before)
	}
	state := authURL(nonce)
	complete(state, nonce).ok(t, "login", nil)
	refused("a replayed state", complete(state, nonce), "already used")
	if n := tokens(); n != before+1 {
		t.Fatalf("one login made %d tokens", n-before)
	}
}
