package structs

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// ACL token types.
const (
	// ACLClientToken gets the capabilities of its policies and roles.
	ACLClientToken = "client"
	// ACLManagementToken may do everything.
	ACLManagementToken = "management"
)

// ACLAnonymousPolicy is the name of the policy that requests without a
// token get. It does not exist until an operator writes it: by default an
// anonymous request may do nothing but what needs no token.
const ACLAnonymousPolicy = "anonymous"

// ACL auth method types.
const (
	ACLAuthMethodOIDC = "oidc"
	ACLAuthMethodJWT  = "jwt"
)

// ACL binding rule bind types.
const (
	ACLBindTypePolicy     = "policy"
	ACLBindTypeRole       = "role"
	ACLBindTypeManagement = "management"
)

// MaxSecretLen bounds a token secret that a request or a dashboard session
// may present: secrets are UUIDs (36 bytes), and a longer string is refused
// before it is hashed or looked up.
const MaxSecretLen = 512

// HashSecret returns the hex SHA-256 of a token secret: the only form in
// which a secret is stored, replicated or looked up.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// ACLPolicy is a named set of rules, written in HCL or JSON (see package
// acl for the syntax).
type ACLPolicy struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Rules       string    `json:"rules"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	CreateIndex uint64    `json:"create_index"`
	ModifyIndex uint64    `json:"modify_index"`
}

// ACLRole is a named set of policies that tokens and binding rules refer
// to.
type ACLRole struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Policies    []string  `json:"policies"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	CreateIndex uint64    `json:"create_index"`
	ModifyIndex uint64    `json:"modify_index"`
}

// ACLToken is a token as the state stores it: its secret only as a hash.
// The API shows it as an ACLTokenView, which has no hash.
type ACLToken struct {
	AccessorID string `json:"accessor_id"`
	// SecretHash is HashSecret of the secret, which is shown once, in the
	// answer that creates the token, and stored nowhere.
	SecretHash string   `json:"secret_hash"`
	Name       string   `json:"name"`
	Type       string   `json:"type"`
	Policies   []string `json:"policies"`
	Roles      []string `json:"roles"`
	// AuthMethod names the auth method of a login token.
	AuthMethod string `json:"auth_method"`
	// ExpirationTime is zero for a token that does not expire.
	ExpirationTime time.Time `json:"expiration_time"`
	CreateTime     time.Time `json:"create_time"`
	CreateIndex    uint64    `json:"create_index"`
	ModifyIndex    uint64    `json:"modify_index"`
}

// Expired reports whether the token has expired at now.
func (t *ACLToken) Expired(now time.Time) bool {
	return !t.ExpirationTime.IsZero() && !now.Before(t.ExpirationTime)
}

// ACLTokenView is a token as the API shows it. SecretID is set only in
// the answer that creates the token.
type ACLTokenView struct {
	AccessorID     string     `json:"accessor_id"`
	SecretID       string     `json:"secret_id,omitempty"`
	Name           string     `json:"name"`
	Type           string     `json:"type"`
	Policies       []string   `json:"policies"`
	Roles          []string   `json:"roles"`
	AuthMethod     string     `json:"auth_method,omitempty"`
	ExpirationTime *time.Time `json:"expiration_time,omitempty"`
	CreateTime     time.Time  `json:"create_time"`
	CreateIndex    uint64     `json:"create_index"`
	ModifyIndex    uint64     `json:"modify_index"`
}

// View returns the token as the API shows it, without its secret.
func (t *ACLToken) View() *ACLTokenView {
	v := &ACLTokenView{
		AccessorID: t.AccessorID, Name: t.Name, Type: t.Type,
		Policies: nonNilStrings(t.Policies), Roles: nonNilStrings(t.Roles), AuthMethod: t.AuthMethod,
		CreateTime: t.CreateTime, CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex,
	}
	if !t.ExpirationTime.IsZero() {
		e := t.ExpirationTime
		v.ExpirationTime = &e
	}
	return v
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return append([]string(nil), s...)
}

// ACLAuthMethod is an SSO auth method: an OIDC provider (authorization
// code flow with PKCE) or a JWT issuer (a JWT exchanged for a token).
type ACLAuthMethod struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	DisplayName string `json:"display_name"`
	// TokenTTL is the lifetime of the tokens of a login, as a Go duration;
	// empty means the server's acl.token_ttl.
	TokenTTL string `json:"token_ttl"`
	// Default marks the method `nops login` uses without -method.
	Default     bool                 `json:"default"`
	Config      *ACLAuthMethodConfig `json:"config"`
	CreatedAt   time.Time            `json:"created_at"`
	UpdatedAt   time.Time            `json:"updated_at"`
	CreateIndex uint64               `json:"create_index"`
	ModifyIndex uint64               `json:"modify_index"`
}

// ACLAuthMethodConfig configures an auth method, in the shape of Nomad's.
type ACLAuthMethodConfig struct {
	// OIDC.
	OIDCDiscoveryURL    string   `json:"oidc_discovery_url,omitempty"`
	OIDCClientID        string   `json:"oidc_client_id,omitempty"`
	OIDCClientSecret    string   `json:"oidc_client_secret,omitempty"`
	OIDCScopes          []string `json:"oidc_scopes,omitempty"`
	AllowedRedirectURIs []string `json:"allowed_redirect_uris,omitempty"`
	// DiscoveryCaPem lists PEM CA certificates for the discovery URL.
	DiscoveryCaPem []string `json:"discovery_ca_pem,omitempty"`

	// JWT: keys from JWKSURL, from OIDCDiscoveryURL, or given here.
	JWKSURL              string   `json:"jwks_url,omitempty"`
	JWTValidationPubKeys []string `json:"jwt_validation_pub_keys,omitempty"`
	BoundIssuer          []string `json:"bound_issuer,omitempty"`

	// Both.
	BoundAudiences []string `json:"bound_audiences,omitempty"`
	SigningAlgs    []string `json:"signing_algs,omitempty"`
	// ClaimMappings maps claim names (or JSON pointers) to the names
	// binding-rule selectors see as value.<name>; ListClaimMappings maps
	// list claims to list.<name>.
	ClaimMappings     map[string]string `json:"claim_mappings,omitempty"`
	ListClaimMappings map[string]string `json:"list_claim_mappings,omitempty"`
	// UserClaim names the claim that identifies the user: it names the
	// token and is the actor of what the token does. Default "sub".
	UserClaim string `json:"user_claim,omitempty"`
	// ClockSkewLeeway allows that much skew on exp, iat and nbf.
	ClockSkewLeeway string `json:"clock_skew_leeway,omitempty"`
}

// Redacted returns a copy of the method without its client secret, for
// the API.
func (m *ACLAuthMethod) Redacted() *ACLAuthMethod {
	c := *m
	if m.Config != nil {
		cfg := *m.Config
		if cfg.OIDCClientSecret != "" {
			cfg.OIDCClientSecret = "redacted"
		}
		c.Config = &cfg
	}
	return &c
}

// ACLBindingRule maps the claims of an SSO login to roles or policies: a
// login whose claims match Selector (a go-bexpr expression; empty matches
// every login) gets BindName as a role or a policy, or a management token.
type ACLBindingRule struct {
	ID          string    `json:"id"`
	Description string    `json:"description"`
	AuthMethod  string    `json:"auth_method"`
	Selector    string    `json:"selector"`
	BindType    string    `json:"bind_type"`
	BindName    string    `json:"bind_name"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	CreateIndex uint64    `json:"create_index"`
	ModifyIndex uint64    `json:"modify_index"`
}

// ACLPolicyUpsertRequest creates or replaces a policy.
type ACLPolicyUpsertRequest struct {
	WriteMeta
	Policy *ACLPolicy `json:"policy"`
}

// ACLRoleUpsertRequest creates or replaces a role.
type ACLRoleUpsertRequest struct {
	WriteMeta
	Role *ACLRole `json:"role"`
	// Create refuses to replace an existing role.
	Create bool `json:"create"`
}

// ACLTokenUpsertRequest creates or updates a token. The leader has made
// the accessor ID and the secret hash.
type ACLTokenUpsertRequest struct {
	WriteMeta
	Token *ACLToken `json:"token"`
	// Create refuses to replace an existing token; an update keeps the
	// token's secret hash and creation time.
	Create bool `json:"create"`
}

// ACLTokenBootstrapRequest creates the first management token. It is
// refused once a bootstrap happened, unless ResetIndex is the index of
// that bootstrap (the operator's reset).
type ACLTokenBootstrapRequest struct {
	WriteMeta
	Token      *ACLToken `json:"token"`
	ResetIndex uint64    `json:"reset_index"`
}

// ACLAuthMethodUpsertRequest creates or replaces an auth method.
type ACLAuthMethodUpsertRequest struct {
	WriteMeta
	Method *ACLAuthMethod `json:"method"`
}

// ACLBindingRuleUpsertRequest creates or replaces a binding rule.
type ACLBindingRuleUpsertRequest struct {
	WriteMeta
	Rule *ACLBindingRule `json:"rule"`
	// Create refuses to replace an existing rule.
	Create bool `json:"create"`
}

// ACLDeleteRequest deletes ACL objects of one kind by name (policies,
// roles, auth methods), accessor ID (tokens) or ID (binding rules). A
// name that does not exist refuses the whole request, unless
// IgnoreMissing is set, as the leader's collection of expired tokens does
// (a token may be deleted in between).
type ACLDeleteRequest struct {
	WriteMeta
	Names         []string `json:"names"`
	IgnoreMissing bool     `json:"ignore_missing"`
}
