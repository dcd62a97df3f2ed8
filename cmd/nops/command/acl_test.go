package command

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cap/oidc"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

func startACLServer(t *testing.T) *nopstest.Server {
	t.Helper()
	return nopstest.StartDev(t, nopstest.WithConfig(func(c *config.Config) { c.ACL.Enabled = true }))
}

// TestACLCommands_BootstrapPoliciesRolesTokens drives the ACL commands
// against a real server with ACLs on: bootstrap once, policies, roles,
// tokens, and -token / NOPS_TOKEN on the commands.
func TestACLCommands_BootstrapPoliciesRolesTokens(t *testing.T) {
	s := startACLServer(t)
	c := newCLI(t, s)

	var boot structs.ACLTokenView
	c.okJSON(&boot, "acl", "bootstrap")
	if boot.SecretID == "" || boot.Type != "management" {
		t.Fatalf("bootstrap: %+v", boot)
	}
	mustContain(t, "second bootstrap", c.fails(1, "acl", "bootstrap"), "already done", "reset index")

	// No token: 401; -token and NOPS_TOKEN are sent.
	mustContain(t, "policy list without a token", c.fails(1, "acl", "policy", "list"), "401")
	c.ok("acl", "policy", "list", "-token", boot.SecretID)
	c.env[EnvToken] = boot.SecretID
	mustContain(t, "policy list", c.ok("acl", "policy", "list"), "No policies")

	dir := t.TempDir()
	rules := filepath.Join(dir, "approver.hcl")
	if err := os.WriteFile(rules, []byte("namespace \"default\" {\n  capabilities = [\"read\", \"approve\"]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("namespace \"default\" {\n  capabilities = [\"fly\"]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "apply", c.ok("acl", "policy", "apply", "-description", "approvers", "approver", rules), `Policy "approver" applied`)
	mustContain(t, "bad apply", c.fails(1, "acl", "policy", "apply", "broken", bad), `unknown capability "fly"`)
	mustContain(t, "info", c.ok("acl", "policy", "info", "approver"), "approvers", `capabilities = ["read", "approve"]`)

	mustContain(t, "role create", c.ok("acl", "role", "create", "-policy", "approver", "approvers"), `Role "approvers" created`)
	mustContain(t, "role create twice", c.fails(1, "acl", "role", "create", "-policy", "approver", "approvers"), "already exists")
	c.ok("acl", "role", "update", "-policy", "approver", "-description", "people who approve", "approvers")
	mustContain(t, "role list", c.ok("acl", "role", "list"), "approvers", "people who approve")

	var tok structs.ACLTokenView
	c.okJSON(&tok, "acl", "token", "create", "-name", "alice", "-role", "approvers", "-ttl", "1h")
	if tok.SecretID == "" || tok.Name != "alice" || tok.ExpirationTime == nil {
		t.Fatalf("token create: %+v", tok)
	}
	out := c.ok("acl", "token", "self", "-token", tok.SecretID)
	mustContain(t, "token self", out, tok.AccessorID, "alice", "approvers")
	if strings.Contains(out, tok.SecretID) {
		t.Errorf("token self prints the secret:\n%s", out)
	}
	list := c.ok("acl", "token", "list")
	mustContain(t, "token list", list, tok.AccessorID, "alice", boot.AccessorID)
	if strings.Contains(list, tok.SecretID) || strings.Contains(list, boot.SecretID) {
		t.Errorf("token list prints a secret:\n%s", list)
	}
	c.ok("acl", "token", "update", "-name", "alice-2", "-policy", "approver", tok.AccessorID)
	mustContain(t, "token info", c.ok("acl", "token", "info", tok.AccessorID), "alice-2")

	// The token's capabilities apply: alice may list deployments but not
	// pause every job.
	delete(c.env, EnvToken)
	c.ok("deployment", "list", "-token", tok.SecretID)
	mustContain(t, "pause without the capability", c.fails(1, "pause", "-reason", "x", "-token", tok.SecretID), "403")

	c.env[EnvToken] = boot.SecretID
	c.ok("acl", "token", "delete", tok.AccessorID)
	mustContain(t, "deleted token", c.fails(1, "deployment", "list", "-token", tok.SecretID), "401")
	c.ok("acl", "role", "delete", "approvers")
	c.ok("acl", "policy", "delete", "approver")
	mustContain(t, "policy list", c.ok("acl", "policy", "list"), "No policies")
}

// TestLogin_OIDCWithPKCEAndJWT logs in with the CLI: the OIDC flow with PKCE
// against a real OIDC provider running in the test, with the CLI's own
// callback server; and a JWT exchange.
func TestLogin_OIDCWithPKCEAndJWT(t *testing.T) {
	s := startACLServer(t)
	c := newCLI(t, s)
	var boot structs.ACLTokenView
	c.okJSON(&boot, "acl", "bootstrap")
	c.env[EnvToken] = boot.SecretID
	rules := filepath.Join(t.TempDir(), "r.hcl")
	if err := os.WriteFile(rules, []byte("namespace \"*\" {\n  capabilities = [\"read\"]\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("acl", "policy", "apply", "reader", rules)

	p := oidc.StartTestProvider(t)
	defer p.Stop()
	callback := "127.0.0.1:" + strconv.Itoa(testutil.FreePorts(t, 1)[0])
	redirect := "http://" + callback + "/oidc/callback"
	p.SetAllowedRedirectURIs([]string{redirect})
	p.SetClientCreds("nops", "client-secret")
	p.SetExpectedSubject("carol")
	p.SetCustomClaims(map[string]any{"groups": []string{"readers"}})
	cfg := fmt.Sprintf(`{"oidc_discovery_url": %q, "oidc_client_id": "nops", "oidc_client_secret": "client-secret",
		"allowed_redirect_uris": [%q], "discovery_ca_pem": [%q], "signing_algs": ["ES256"],
		"list_claim_mappings": {"groups": "groups"}}`, p.Addr(), redirect, p.CACert())
	c.ok("acl", "auth-method", "create", "-type", "oidc", "-default", "-token-ttl", "30m", "-config", cfg, "corp")
	c.ok("acl", "binding-rule", "create", "-auth-method", "corp", "-selector", `"readers" in list.groups`, "-bind-type", "policy", "-bind-name", "reader")
	mustContain(t, "binding rules", c.ok("acl", "binding-rule", "list"), "corp", "policy:reader")
	delete(c.env, EnvToken)

	// The provider needs to know the nonce and verifier the CLI makes: a
	// provider in front of it reads them from the authorization request.
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	r := c.meta(&stdout, &stderr)
	r.random = strings.NewReader(strings.Repeat("n", 32) + strings.Repeat("v", 32))
	verifier := base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("v", 32)))
	go func() {
		done <- r.run(ctx, []string{"login", "-oidc-callback-addr", callback, "-token-file", tokenFile, "-json"})
	}()
	var authURL string
	urlRE := regexp.MustCompile(`https://\S+`)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		authURL = urlRE.FindString(stderr.String())
		return authURL != "", fmt.Errorf("no login URL printed yet: %q", stderr.String())
	})
	u, err := http.NewRequest("GET", authURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := u.URL.Query()
	p.SetExpectedAuthNonce(q.Get("nonce"))
	p.SetExpectedAuthCode("code-1")
	sum := sha256.Sum256([]byte(verifier))
	if q.Get("code_challenge") != base64.RawURLEncoding.EncodeToString(sum[:]) || q.Get("code_challenge_method") != "S256" {
		t.Fatalf("login URL has no S256 challenge of the CLI's verifier: %s", authURL)
	}
	p.SetPKCEVerifier(&fixedVerifier{v: verifier})
	resp, err := p.HTTPClient().Get(authURL) // follows the redirect to the CLI's callback
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code := <-done; code != 0 {
		t.Fatalf("login: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	var tok structs.ACLTokenView
	if err := jsonUnmarshal(stdout.String(), &tok); err != nil {
		t.Fatalf("login output: %v\n%s", err, stdout.String())
	}
	if tok.Name != "carol" || strings.Join(tok.Policies, ",") != "reader" || tok.ExpirationTime == nil {
		t.Fatalf("login token: %+v", tok)
	}
	saved, err := os.ReadFile(tokenFile)
	if err != nil || strings.TrimSpace(string(saved)) != tok.SecretID {
		t.Fatalf("token file: %q, %v", saved, err)
	}
	c.ok("deployment", "list", "-token", tok.SecretID)

	// A JWT exchange, from a file.
	pub, priv := oidc.TestGenerateKeys(t)
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	keyJSON, _ := json.Marshal(string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
	c.env[EnvToken] = boot.SecretID
	c.ok("acl", "auth-method", "create", "-type", "jwt", "-config",
		`{"jwt_validation_pub_keys": [`+string(keyJSON)+`], "bound_audiences": ["nops"], "signing_algs": ["ES256"]}`, "ci")
	c.ok("acl", "binding-rule", "create", "-auth-method", "ci", "-bind-type", "policy", "-bind-name", "reader")
	delete(c.env, EnvToken)
	now := time.Now()
	jwtFile := filepath.Join(t.TempDir(), "jwt")
	signed := oidc.TestSignJWT(t, priv, "ES256", map[string]any{"sub": "pipeline-7", "aud": []string{"nops"},
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Minute).Unix()}, nil)
	if err := os.WriteFile(jwtFile, []byte(signed+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var jt structs.ACLTokenView
	c.okJSON(&jt, "login", "-method", "ci", "-jwt-file", jwtFile)
	if jt.Name != "pipeline-7" || jt.AuthMethod != "ci" || jt.SecretID == "" {
		t.Fatalf("JWT login token: %+v", jt)
	}
	mustContain(t, "login with a bad JWT", c.fails(1, "login", "-method", "ci", "-jwt", "a.b.c"), "401")
}

// fixedVerifier is the PKCE verifier the provider expects at the token
// endpoint.
type fixedVerifier struct{ v string }

func (f *fixedVerifier) Verifier() string { return f.v }
func (f *fixedVerifier) Challenge() string {
	sum := sha256.Sum256([]byte(f.v))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
func (f *fixedVerifier) Method() oidc.ChallengeMethod { return oidc.S256 }
func (f *fixedVerifier) Copy() oidc.CodeVerifier      { c := *f; return &c }

func jsonUnmarshal(s string, out any) error { return json.Unmarshal([]byte(s), out) }
