package agenthttp

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/cap/jwt"
	"github.com/hashicorp/cap/oidc"
	"github.com/hashicorp/go-bexpr"

	"github.com/nops-dev/nops/structs"
)

// SSO login, in the shape of Nomad's: the OIDC authorization code flow
// with PKCE, and the exchange of a JWT. Both calls of the OIDC flow run on
// the leader: the client sends its nonce and its PKCE challenge to the
// first, which issues a state and keeps what it was issued for
// (oidcLogins); the second accepts that state only with the same nonce,
// redirect URI and a verifier of the same challenge, before it exchanges
// the code, and for one successful login. The client checks the state of the callback too, as
// `nomad login` does.

const (
	// oidcRequestExpiry bounds the time from the auth URL to the callback.
	oidcRequestExpiry = 10 * time.Minute
	// ssoTimeout bounds the calls to the identity provider of one login.
	ssoTimeout = 30 * time.Second
	// maxLoginTokenSize bounds a JWT sent for a login: real ones are 1 to 4
	// KiB, and 16 KiB leaves room for many group claims.
	maxLoginTokenSize = 16 << 10
	// minClientNonce and maxClientNonce bound an OIDC client nonce: at least
	// 128 bits of hex or base64, and short enough to sit in a cookie.
	minClientNonce = 16
	maxClientNonce = 256
	// pkceS256Len is the length of an S256 PKCE challenge: a SHA-256 in
	// unpadded base64url (RFC 7636).
	pkceS256Len = 43
	// maxOIDCField bounds each field of an OIDC callback (code, state,
	// verifier...): providers' codes are far shorter.
	maxOIDCField = 4096
)

// pkceVerifier is a PKCE verifier of which the server holds only the
// challenge (at the auth URL) or only the verifier (at the exchange).
type pkceVerifier struct {
	verifier, challenge string
}

func (v *pkceVerifier) Verifier() string             { return v.verifier }
func (v *pkceVerifier) Challenge() string            { return v.challenge }
func (v *pkceVerifier) Method() oidc.ChallengeMethod { return oidc.S256 }
func (v *pkceVerifier) Copy() oidc.CodeVerifier      { c := *v; return &c }
func pkceChallenge(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// ssoMethod returns an auth method of the given type, or the default one.
func (a *ssoAPI) ssoMethod(name, typ string) (*structs.ACLAuthMethod, error) {
	st := a.s.State()
	if name == "" {
		list, err := st.ACL().AuthMethods()
		if err != nil {
			return nil, err
		}
		for _, m := range list {
			if m.Default {
				name = m.Name
			}
		}
		if name == "" {
			return nil, badRequest("auth_method: required (no auth method is the default)")
		}
	}
	m, err := st.ACL().AuthMethod(name)
	if err != nil {
		return nil, err
	}
	if m == nil || m.Config == nil {
		return nil, fmt.Errorf("%w: auth method %q", structs.ErrNotFound, name)
	}
	if m.Type != typ {
		return nil, badRequest(fmt.Sprintf("auth method %q is of type %s, not %s", name, m.Type, typ))
	}
	return m, nil
}

// oidcProviders caches an OIDC provider per auth method, so that a login
// does not fetch the provider's discovery document every time. An entry
// is replaced when its method changes.
type oidcProviders struct {
	mu sync.Mutex
	m  map[string]*cachedProvider
	// once starts the goroutine that releases the providers when the
	// server shuts down.
	once sync.Once
}

type cachedProvider struct {
	index uint64
	p     *oidc.Provider
}

// maxCachedProviders bounds the cache; past it, the cache starts over. A
// cluster has a handful of auth methods; each entry holds provider keys.
const maxCachedProviders = 64

func (a *ssoAPI) oidcProvider(m *structs.ACLAuthMethod) (*oidc.Provider, error) {
	c := &a.providers
	c.once.Do(func() {
		go func() {
			<-a.s.ShutdownCh()
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, cp := range c.m {
				cp.p.Done()
			}
			c.m = nil
		}()
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp, ok := c.m[m.Name]; ok && cp.index == m.ModifyIndex {
		return cp.p, nil
	}
	p, err := newOIDCProvider(m)
	if err != nil {
		return nil, err
	}
	if c.m == nil || len(c.m) >= maxCachedProviders {
		for _, old := range c.m {
			old.p.Done()
		}
		c.m = map[string]*cachedProvider{}
	}
	if old, ok := c.m[m.Name]; ok {
		old.p.Done()
	}
	c.m[m.Name] = &cachedProvider{index: m.ModifyIndex, p: p}
	return p, nil
}

func newOIDCProvider(m *structs.ACLAuthMethod) (*oidc.Provider, error) {
	c := m.Config
	var algs []oidc.Alg
	for _, s := range c.SigningAlgs {
		algs = append(algs, oidc.Alg(s))
	}
	var opts []oidc.Option
	if len(c.OIDCScopes) > 0 {
		// openid is always asked for; these come on top.
		opts = append(opts, oidc.WithScopes(c.OIDCScopes...))
	}
	if len(c.BoundAudiences) > 0 {
		opts = append(opts, oidc.WithAudiences(c.BoundAudiences...))
	}
	if len(c.DiscoveryCaPem) > 0 {
		opts = append(opts, oidc.WithProviderCA(strings.Join(c.DiscoveryCaPem, "\n")))
	}
	cfg, err := oidc.NewConfig(c.OIDCDiscoveryURL, c.OIDCClientID, oidc.ClientSecret(c.OIDCClientSecret), algs, c.AllowedRedirectURIs, opts...)
	if err != nil {
		return nil, badRequest(fmt.Sprintf("auth method %q: %v", m.Name, err))
	}
	p, err := oidc.NewProvider(cfg)
	if err != nil {
		return nil, &HTTPError{Code: http.StatusBadGateway, Msg: fmt.Sprintf("auth method %q: OIDC provider: %v", m.Name, err)}
	}
	return p, nil
}

// oidcMethod returns the OIDC auth method name, or the default one, if it
// allows the redirect URI uri.
func (a *ssoAPI) oidcMethod(name, uri string) (*structs.ACLAuthMethod, error) {
	m, err := a.ssoMethod(name, structs.ACLAuthMethodOIDC)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(m.Config.AllowedRedirectURIs, uri) {
		return nil, badRequest(fmt.Sprintf("redirect_uri: %q is not allowed by auth method %q", uri, m.Name))
	}
	return m, nil
}

func (a *ssoAPI) aclOIDCAuthURL(_ http.ResponseWriter, r *http.Request) (any, error) {
	req, err := aclBody[structs.ACLOIDCAuthURLRequest](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	var problems []string
	if req.RedirectURI == "" {
		problems = append(problems, "redirect_uri: required")
	}
	if len(req.ClientNonce) < minClientNonce || len(req.ClientNonce) > maxClientNonce {
		problems = append(problems, fmt.Sprintf("client_nonce: %d to %d characters required", minClientNonce, maxClientNonce))
	}
	if len(req.CodeChallenge) != pkceS256Len {
		problems = append(problems, fmt.Sprintf("code_challenge: an S256 PKCE challenge (%d characters) is required", pkceS256Len))
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	m, err := a.oidcMethod(req.AuthMethod, req.RedirectURI)
	if err != nil {
		return nil, err
	}
	p, err := a.oidcProvider(m)
	if err != nil {
		return nil, err
	}
	oreq, err := oidc.NewRequest(oidcRequestExpiry, req.RedirectURI,
		oidc.WithNonce(req.ClientNonce), oidc.WithPKCE(&pkceVerifier{challenge: req.CodeChallenge}))
	if err != nil {
		return nil, badRequest(err.Error())
	}
	ctx, cancel := context.WithTimeout(r.Context(), ssoTimeout)
	defer cancel()
	u, err := p.AuthURL(ctx, oreq)
	if err != nil {
		return nil, &HTTPError{Code: http.StatusBadGateway, Msg: fmt.Sprintf("auth method %q: auth URL: %v", m.Name, err)}
	}
	now := time.Now()
	login := oidcLogin{method: m.Name, redirect: req.RedirectURI, nonce: req.ClientNonce,
		challenge: req.CodeChallenge, expires: now.Add(oidcRequestExpiry)}
	if err := a.logins.begin(oreq.State(), login, now); err != nil {
		return nil, err
	}
	return &structs.ACLOIDCAuthURLResponse{AuthURL: u, State: oreq.State()}, nil
}

func (a *ssoAPI) aclOIDCComplete(_ http.ResponseWriter, r *http.Request) (any, error) {
	req, err := aclBody[structs.ACLOIDCCompleteAuthRequest](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, f := range []struct{ name, v string }{
		{"redirect_uri", req.RedirectURI}, {"client_nonce", req.ClientNonce}, {"state", req.State},
		{"code", req.Code}, {"code_verifier", req.CodeVerifier},
	} {
		if f.v == "" {
			problems = append(problems, f.name+": required")
		} else if len(f.v) > maxOIDCField {
			problems = append(problems, f.name+": too long")
		}
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	m, err := a.oidcMethod(req.AuthMethod, req.RedirectURI)
	if err != nil {
		return nil, err
	}
	if err := a.logins.check(req.State, oidcLogin{method: m.Name, redirect: req.RedirectURI, nonce: req.ClientNonce,
		challenge: pkceChallenge(req.CodeVerifier)}, time.Now()); err != nil {
		return nil, err
	}
	p, err := a.oidcProvider(m)
	if err != nil {
		return nil, err
	}
	oreq, err := oidc.NewRequest(oidcRequestExpiry, req.RedirectURI, oidc.WithState(req.State),
		oidc.WithNonce(req.ClientNonce),
		oidc.WithPKCE(&pkceVerifier{verifier: req.CodeVerifier, challenge: pkceChallenge(req.CodeVerifier)}))
	if err != nil {
		return nil, badRequest(err.Error())
	}
	ctx, cancel := context.WithTimeout(r.Context(), ssoTimeout)
	defer cancel()
	tk, err := p.Exchange(ctx, oreq, req.State, req.Code)
	if err != nil {
		return nil, errUnauthorized(fmt.Sprintf("OIDC login refused by auth method %q: %v", m.Name, err))
	}
	if err := a.logins.consume(req.State); err != nil {
		return nil, err
	}
	claims := map[string]any{}
	if err := tk.IDToken().Claims(&claims); err != nil {
		return nil, errUnauthorized(fmt.Sprintf("OIDC login: ID token claims: %v", err))
	}
	return a.loginToken(r, m, claims)
}

func (a *ssoAPI) aclJWTLogin(_ http.ResponseWriter, r *http.Request) (any, error) {
	req, err := aclBody[structs.ACLLoginRequest](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	if req.LoginToken == "" || len(req.LoginToken) > maxLoginTokenSize {
		return nil, badRequest(fmt.Sprintf("login_token: a JWT of at most %d bytes is required", maxLoginTokenSize))
	}
	m, err := a.ssoMethod(req.AuthMethod, structs.ACLAuthMethodJWT)
	if err != nil {
		return nil, err
	}
	c := m.Config
	ctx, cancel := context.WithTimeout(r.Context(), ssoTimeout)
	defer cancel()
	var ks jwt.KeySet
	ca := strings.Join(c.DiscoveryCaPem, "\n")
	switch {
	case c.JWKSURL != "":
		ks, err = jwt.NewJSONWebKeySet(ctx, c.JWKSURL, ca)
	case c.OIDCDiscoveryURL != "":
		ks, err = jwt.NewOIDCDiscoveryKeySet(ctx, c.OIDCDiscoveryURL, ca)
	default:
		var keys []crypto.PublicKey
		for _, pem := range c.JWTValidationPubKeys {
			k, perr := jwt.ParsePublicKeyPEM([]byte(pem))
			if perr != nil {
				return nil, fmt.Errorf("%w: auth method %q: public key: %w", structs.ErrInvalid, m.Name, perr)
			}
			keys = append(keys, k)
		}
		ks, err = jwt.NewStaticKeySet(keys)
	}
	if err != nil {
		return nil, &HTTPError{Code: http.StatusBadGateway, Msg: fmt.Sprintf("auth method %q: keys: %v", m.Name, err)}
	}
	v, err := jwt.NewValidator(ks)
	if err != nil {
		return nil, err
	}
	exp := jwt.Expected{Audiences: c.BoundAudiences}
	if len(c.BoundIssuer) == 1 {
		exp.Issuer = c.BoundIssuer[0]
	}
	for _, s := range c.SigningAlgs {
		exp.SigningAlgorithms = append(exp.SigningAlgorithms, jwt.Alg(s))
	}
	if c.ClockSkewLeeway != "" {
		exp.ClockSkewLeeway, _ = time.ParseDuration(c.ClockSkewLeeway)
	}
	claims, err := v.Validate(ctx, req.LoginToken, exp)
	if err != nil {
		return nil, errUnauthorized(fmt.Sprintf("JWT login refused by auth method %q: %v", m.Name, err))
	}
	if len(c.BoundIssuer) > 1 {
		iss, _ := claims["iss"].(string)
		ok := false
		for _, b := range c.BoundIssuer {
			ok = ok || b == iss
		}
		if !ok {
			return nil, errUnauthorized(fmt.Sprintf("JWT login refused by auth method %q: issuer %q is not bound", m.Name, iss))
		}
	}
	return a.loginToken(r, m, claims)
}

// selectorData is what a binding rule's selector sees of a login:
// value.<name> for each mapped claim, list.<name> for each mapped list
// claim.
type selectorData struct {
	Value map[string]string   `bexpr:"value"`
	List  map[string][]string `bexpr:"list"`
}

// claimValue renders a scalar claim as a string.
func claimValue(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}

// claim reads a claim by name, or by a JSON pointer ("/a/b").
func claim(claims map[string]any, name string) (any, bool) {
	if !strings.HasPrefix(name, "/") {
		v, ok := claims[name]
		return v, ok
	}
	var cur any = claims
	for _, part := range strings.Split(name[1:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func mapClaims(c *structs.ACLAuthMethodConfig, claims map[string]any) *selectorData {
	d := &selectorData{Value: map[string]string{}, List: map[string][]string{}}
	for from, to := range c.ClaimMappings {
		if v, ok := claim(claims, from); ok {
			if s, ok := claimValue(v); ok {
				d.Value[to] = s
			}
		}
	}
	for from, to := range c.ListClaimMappings {
		v, ok := claim(claims, from)
		if !ok {
			continue
		}
		items, ok := v.([]any)
		if !ok {
			if s, ok := claimValue(v); ok {
				d.List[to] = []string{s}
			}
			continue
		}
		for _, it := range items {
			if s, ok := claimValue(it); ok {
				d.List[to] = append(d.List[to], s)
			}
		}
	}
	return d
}

// errNoBinding refuses a login whose claims match no binding rule.
var errNoBinding = errors.New("no binding rule of the auth method matches this login")

// loginToken maps verified claims through the method's binding rules and
// creates a token that expires after the method's TTL (else acl.token_ttl).
func (a *ssoAPI) loginToken(r *http.Request, m *structs.ACLAuthMethod, claims map[string]any) (any, error) {
	data := mapClaims(m.Config, claims)
	rules, err := a.s.State().ACL().BindingRules()
	if err != nil {
		return nil, err
	}
	var (
		policies, roles []string
		management      bool
	)
	sort.Slice(rules, func(i, j int) bool { return rules[i].ID < rules[j].ID })
	for _, rule := range rules {
		if rule.AuthMethod != m.Name {
			continue
		}
		if rule.Selector != "" {
			ev, err := bexpr.CreateEvaluator(rule.Selector)
			if err != nil {
				a.logger.Warn("binding rule selector does not compile", "rule", rule.ID, "error", err)
				continue
			}
			ok, err := ev.Evaluate(data)
			if err != nil || !ok {
				continue
			}
		}
		switch rule.BindType {
		case structs.ACLBindTypeManagement:
			management = true
		case structs.ACLBindTypePolicy:
			if p, _ := a.s.State().ACL().Policy(rule.BindName); p != nil {
				policies = append(policies, rule.BindName)
			}
		case structs.ACLBindTypeRole:
			if p, _ := a.s.State().ACL().Role(rule.BindName); p != nil {
				roles = append(roles, rule.BindName)
			}
		}
	}
	if !management && len(policies)+len(roles) == 0 {
		return nil, errForbidden(fmt.Sprintf("login refused: %v", errNoBinding))
	}
	userClaim := m.Config.UserClaim
	if userClaim == "" {
		userClaim = "sub"
	}
	user := ""
	if v, ok := claim(claims, userClaim); ok {
		user, _ = claimValue(v)
	}
	if user == "" {
		return nil, errUnauthorized(fmt.Sprintf("login refused: the claim %q that names the user is missing", userClaim))
	}
	ttl := a.s.Config().ACL.TokenTTL
	if m.TokenTTL != "" {
		if d, err := time.ParseDuration(m.TokenTTL); err == nil && d > 0 {
			ttl = d
		}
	}
	meta := writeMeta(r)
	meta.Actor = user
	secret := uuid.NewString()
	tok := &structs.ACLToken{
		AccessorID: uuid.NewString(), SecretHash: structs.HashSecret(secret), Name: truncate(user, maxTokenName),
		Type: structs.ACLClientToken, Policies: dedupe(policies), Roles: dedupe(roles), AuthMethod: m.Name,
		ExpirationTime: meta.Time.Add(ttl),
	}
	if management {
		tok.Type, tok.Policies, tok.Roles = structs.ACLManagementToken, nil, nil
	}
	if _, err := a.s.Apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: meta, Token: tok, Create: true}); err != nil {
		return nil, err
	}
	a.logger.Info("SSO login", "auth_method", m.Name, "user", tok.Name, "accessor_id", tok.AccessorID)
	return a.createdToken(tok.AccessorID, secret)
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
