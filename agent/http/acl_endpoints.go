package agenthttp

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-bexpr"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/structs"
)

// ACLBootstrapResetFile is the file in the data dir that allows one more
// bootstrap: it holds the reset index that the refused bootstrap named.
const ACLBootstrapResetFile = "acl-bootstrap-reset"

// ErrACLDisabled answers the ACL routes of a server without ACLs.
var ErrACLDisabled = errors.New("ACL support is disabled: set acl { enabled = true } in the server configuration")

// aclRoutes adds the ACL API.
func (a *aclAPI) aclRoutes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	manage := onCluster(acl.ACLWrite)
	route("POST /v1/acl/bootstrap", kindWrite, public(), a.aclBootstrap)

	route("GET /v1/acl/policies", kindRead, manage, a.aclPolicyList)
	route("GET /v1/acl/policy/{name}", kindRead, manage, a.aclPolicyGet)
	route("PUT /v1/acl/policy/{name}", kindWrite, manage, a.aclPolicyPut)
	route("DELETE /v1/acl/policy/{name}", kindWrite, manage, a.aclPolicyDelete)

	route("GET /v1/acl/roles", kindRead, manage, a.aclRoleList)
	route("GET /v1/acl/role/{name}", kindRead, manage, a.aclRoleGet)
	route("PUT /v1/acl/role/{name}", kindWrite, manage, a.aclRolePut)
	route("DELETE /v1/acl/role/{name}", kindWrite, manage, a.aclRoleDelete)

	route("GET /v1/acl/tokens", kindRead, manage, a.aclTokenList)
	route("POST /v1/acl/token", kindWrite, manage, a.aclTokenCreate)
	route("GET /v1/acl/token/self", kindRead, anyToken(), a.aclTokenSelf)
	route("GET /v1/acl/token/{accessor_id}", kindRead, manage, a.aclTokenGet)
	route("POST /v1/acl/token/{accessor_id}", kindWrite, manage, a.aclTokenUpdate)
	route("DELETE /v1/acl/token/{accessor_id}", kindWrite, manage, a.aclTokenDelete)

	route("GET /v1/acl/auth-methods", kindRead, manage, a.aclAuthMethodList)
	route("GET /v1/acl/auth-method/{name}", kindRead, manage, a.aclAuthMethodGet)
	route("PUT /v1/acl/auth-method/{name}", kindWrite, manage, a.aclAuthMethodPut)
	route("DELETE /v1/acl/auth-method/{name}", kindWrite, manage, a.aclAuthMethodDelete)

	route("GET /v1/acl/binding-rules", kindRead, manage, a.aclBindingRuleList)
	route("POST /v1/acl/binding-rule", kindWrite, manage, a.aclBindingRuleCreate)
	route("GET /v1/acl/binding-rule/{id}", kindRead, manage, a.aclBindingRuleGet)
	route("PUT /v1/acl/binding-rule/{id}", kindWrite, manage, a.aclBindingRuleUpdate)
	route("DELETE /v1/acl/binding-rule/{id}", kindWrite, manage, a.aclBindingRuleDelete)
}

// ssoRoutes are the logins through an auth method (acl_sso.go).
func (a *ssoAPI) ssoRoutes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	route("POST /v1/acl/oidc/auth-url", kindWrite, public(), a.aclOIDCAuthURL)
	route("POST /v1/acl/oidc/complete-auth", kindWrite, public(), a.aclOIDCComplete)
	route("POST /v1/acl/login", kindWrite, public(), a.aclJWTLogin)
}

func (a *apiBase) aclEnabled() error {
	if !a.s.Config().ACL.Enabled {
		return &HTTPError{Code: http.StatusBadRequest, Msg: ErrACLDisabled.Error()}
	}
	return nil
}

// aclBody refuses a request while ACLs are disabled, and decodes the
// body of one into a new T.
func aclBody[T any](a *apiBase, r *http.Request) (*T, error) {
	if err := a.aclEnabled(); err != nil {
		return nil, err
	}
	var v T
	if err := decode(r, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// aclList answers the ACL objects list returns, each as view shows it: an
// empty list for none.
func aclList[T, V any](a *apiBase, list func() ([]*T, error), view func(*T) *V) (any, error) {
	if err := a.aclEnabled(); err != nil {
		return nil, err
	}
	l, err := list()
	if err != nil {
		return nil, err
	}
	out := make([]*V, 0, len(l))
	for _, v := range l {
		out = append(out, view(v))
	}
	return out, nil
}

// aclGet is byPath while ACLs are enabled.
func aclGet[T, V any](a *apiBase, r *http.Request, key, what string, get func(string) (*T, error), view func(*T) *V) (any, error) {
	if err := a.aclEnabled(); err != nil {
		return nil, err
	}
	return byPath(r, key, what, get, view)
}

// Bounds of the names and texts of ACL objects, which every server keeps in
// memory and every token lookup may list.
const (
	// maxACLName bounds a policy, role, auth method or binding rule name, as
	// Nomad bounds its ACL names: long enough to say what it is for, short
	// enough for a URL path and a table column.
	maxACLName = 128
	// maxACLDescription bounds a description: a sentence or two.
	maxACLDescription = 1024
	// maxTokenName bounds a token's name, which SSO logins fill with the
	// user's name from the identity provider (cut to this length).
	maxTokenName = 256
)

var aclNameRE = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9_-]{1,%d}$`, maxACLName))

func checkACLName(what, name string) string {
	if !aclNameRE.MatchString(name) {
		return fmt.Sprintf("%s name %q: use 1 to %d letters, digits, '-' or '_'", what, name, maxACLName)
	}
	return ""
}

// --- bootstrap

func (a *aclAPI) aclBootstrap(_ http.ResponseWriter, r *http.Request) (any, error) {
	if err := a.aclEnabled(); err != nil {
		return nil, err
	}
	if err := decode(r, &struct{}{}); err != nil {
		return nil, err
	}
	var reset uint64
	path := filepath.Join(a.s.Config().DataDir, ACLBootstrapResetFile)
	if b, err := os.ReadFile(path); err == nil {
		n, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if perr != nil {
			return nil, fmt.Errorf("%w: %s must hold the reset index the refused bootstrap named, not %q",
				structs.ErrInvalid, ACLBootstrapResetFile, strings.TrimSpace(string(b)))
		}
		reset = n
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", ACLBootstrapResetFile, err)
	}
	// Refused here when it would be refused by the FSM, so that anonymous
	// requests cannot grow the Raft log.
	if done := a.s.State().ACL().BootstrapIndex(); done != 0 && reset != done {
		return nil, fmt.Errorf("%w: ACL bootstrap already done (reset index: %d)", structs.ErrConflict, done)
	}
	secret := uuid.NewString()
	meta := writeMeta(r)
	tok := &structs.ACLToken{
		AccessorID: uuid.NewString(), SecretHash: structs.HashSecret(secret),
		Name: "Bootstrap Token", Type: structs.ACLManagementToken,
	}
	if _, err := a.s.Apply(structs.ACLTokenBootstrapRequestType, &structs.ACLTokenBootstrapRequest{
		WriteMeta: meta, Token: tok, ResetIndex: reset,
	}); err != nil {
		return nil, err
	}
	a.logger.Info("ACL bootstrap: management token created", "accessor_id", tok.AccessorID)
	return a.createdToken(tok.AccessorID, secret)
}

func (a *apiBase) createdToken(accessor, secret string) (any, error) {
	stored, err := a.s.State().ACL().Token(accessor)
	if err != nil {
		return nil, err
	}
	if stored == nil {
		return nil, fmt.Errorf("%w: token %s", structs.ErrNotFound, accessor)
	}
	v := stored.View()
	v.SecretID = secret
	return v, nil
}

// --- policies

func (a *aclAPI) aclPolicyList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return aclList(a.apiBase, a.s.State().ACL().Policies, asStored)
}

func (a *aclAPI) aclPolicyGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	return aclGet(a.apiBase, r, "name", "ACL policy", a.s.State().ACL().Policy, asStored)
}

func (a *aclAPI) aclPolicyPut(_ http.ResponseWriter, r *http.Request) (any, error) {
	spec, err := aclBody[structs.ACLPolicySpec](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	var problems []string
	if p := checkACLName("policy", name); p != "" {
		problems = append(problems, p)
	}
	if spec.Name != "" && spec.Name != name {
		problems = append(problems, fmt.Sprintf("name: body names %q but the path names %q", spec.Name, name))
	}
	if len(spec.Description) > maxACLDescription {
		problems = append(problems, fmt.Sprintf("description: at most %d characters", maxACLDescription))
	}
	if _, err := acl.Parse(spec.Rules); err != nil {
		problems = append(problems, "rules: "+err.Error())
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	pol := &structs.ACLPolicy{Name: name, Description: spec.Description, Rules: spec.Rules}
	if _, err := a.s.Apply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: writeMeta(r), Policy: pol}); err != nil {
		return nil, err
	}
	return a.s.State().ACL().Policy(name)
}

func (a *aclAPI) aclDelete(r *http.Request, t structs.MessageType, key string) (any, error) {
	if err := a.aclEnabled(); err != nil {
		return nil, err
	}
	name := r.PathValue(key)
	if _, err := a.s.Apply(t, &structs.ACLDeleteRequest{WriteMeta: writeMeta(r), Names: []string{name}}); err != nil {
		return nil, err
	}
	return &structs.Deleted{Deleted: name}, nil
}

func (a *aclAPI) aclPolicyDelete(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.aclDelete(r, structs.ACLPolicyDeleteRequestType, "name")
}

// --- roles

func (a *aclAPI) aclRoleList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return aclList(a.apiBase, a.s.State().ACL().Roles, asStored)
}

func (a *aclAPI) aclRoleGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	return aclGet(a.apiBase, r, "name", "ACL role", a.s.State().ACL().Role, asStored)
}

// missingPolicies lists the problems of policy names that do not exist.
func (a *aclAPI) missingPolicies(names []string) []string {
	var problems []string
	for _, n := range names {
		p, err := a.s.State().ACL().Policy(n)
		if err != nil || p == nil {
			problems = append(problems, fmt.Sprintf("policies: no ACL policy %q", n))
		}
	}
	return problems
}

func (a *aclAPI) missingRoles(names []string) []string {
	var problems []string
	for _, n := range names {
		p, err := a.s.State().ACL().Role(n)
		if err != nil || p == nil {
			problems = append(problems, fmt.Sprintf("roles: no ACL role %q", n))
		}
	}
	return problems
}

func (a *aclAPI) aclRolePut(_ http.ResponseWriter, r *http.Request) (any, error) {
	spec, err := aclBody[structs.ACLRoleSpec](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	var problems []string
	if p := checkACLName("role", name); p != "" {
		problems = append(problems, p)
	}
	if spec.Name != "" && spec.Name != name {
		problems = append(problems, fmt.Sprintf("name: body names %q but the path names %q", spec.Name, name))
	}
	if len(spec.Policies) == 0 {
		problems = append(problems, "policies: a role needs at least one policy")
	}
	problems = append(problems, a.missingPolicies(spec.Policies)...)
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	old, err := a.s.State().ACL().Role(name)
	if err != nil {
		return nil, err
	}
	role := &structs.ACLRole{Name: name, Description: spec.Description, Policies: spec.Policies}
	if _, err := a.s.Apply(structs.ACLRoleUpsertRequestType, &structs.ACLRoleUpsertRequest{WriteMeta: writeMeta(r), Role: role, Create: old == nil}); err != nil {
		return nil, err
	}
	return a.s.State().ACL().Role(name)
}

func (a *aclAPI) aclRoleDelete(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.aclDelete(r, structs.ACLRoleDeleteRequestType, "name")
}

// --- tokens

func (a *aclAPI) aclTokenList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return aclList(a.apiBase, a.s.State().ACL().Tokens, (*structs.ACLToken).View)
}

func (a *aclAPI) aclTokenGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	return aclGet(a.apiBase, r, "accessor_id", "ACL token", a.s.State().ACL().Token, (*structs.ACLToken).View)
}

func (a *aclAPI) aclTokenSelf(_ http.ResponseWriter, r *http.Request) (any, error) {
	if err := a.aclEnabled(); err != nil {
		return nil, err
	}
	id := requestIdentity(r)
	if id == nil || id.token == nil {
		return nil, errUnauthorized("ACL token required")
	}
	return id.token.View(), nil
}

func (a *aclAPI) checkTokenSpec(spec *structs.ACLTokenSpec) []string {
	var problems []string
	if len(spec.Name) > maxTokenName {
		problems = append(problems, fmt.Sprintf("name: at most %d characters", maxTokenName))
	}
	switch spec.Type {
	case structs.ACLClientToken:
		if len(spec.Policies)+len(spec.Roles) == 0 {
			problems = append(problems, "a client token needs at least one policy or role")
		}
	case structs.ACLManagementToken:
		if len(spec.Policies)+len(spec.Roles) > 0 {
			problems = append(problems, "a management token takes no policies or roles")
		}
	default:
		problems = append(problems, fmt.Sprintf("type: must be client or management, not %q", spec.Type))
	}
	problems = append(problems, a.missingPolicies(spec.Policies)...)
	return append(problems, a.missingRoles(spec.Roles)...)
}

func (a *aclAPI) aclTokenCreate(_ http.ResponseWriter, r *http.Request) (any, error) {
	spec, err := aclBody[structs.ACLTokenSpec](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	if spec.Type == "" {
		spec.Type = structs.ACLClientToken
	}
	meta := writeMeta(r)
	problems := a.checkTokenSpec(spec)
	var expires time.Time
	switch {
	case spec.ExpirationTime != nil && spec.ExpirationTTL != "":
		problems = append(problems, "set expiration_time or expiration_ttl, not both")
	case spec.ExpirationTime != nil:
		expires = spec.ExpirationTime.UTC()
		if !expires.After(meta.Time) {
			problems = append(problems, "expiration_time: must be in the future")
		}
	case spec.ExpirationTTL != "":
		d, err := time.ParseDuration(spec.ExpirationTTL)
		if err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("expiration_ttl: %q is not a positive duration", spec.ExpirationTTL))
		}
		expires = meta.Time.Add(d)
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	secret := uuid.NewString()
	tok := &structs.ACLToken{
		AccessorID: uuid.NewString(), SecretHash: structs.HashSecret(secret), Name: spec.Name, Type: spec.Type,
		Policies: spec.Policies, Roles: spec.Roles, ExpirationTime: expires,
	}
	if _, err := a.s.Apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: meta, Token: tok, Create: true}); err != nil {
		return nil, err
	}
	return a.createdToken(tok.AccessorID, secret)
}

func (a *aclAPI) aclTokenUpdate(_ http.ResponseWriter, r *http.Request) (any, error) {
	spec, err := aclBody[structs.ACLTokenSpec](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	old, err := a.s.State().ACL().Token(r.PathValue("accessor_id"))
	if err != nil {
		return nil, err
	}
	if old == nil {
		return nil, fmt.Errorf("%w: ACL token %q", structs.ErrNotFound, r.PathValue("accessor_id"))
	}
	if spec.Type == "" {
		spec.Type = old.Type
	}
	problems := a.checkTokenSpec(spec)
	if spec.ExpirationTime != nil || spec.ExpirationTTL != "" {
		problems = append(problems, "the expiry of a token cannot change: create a new token")
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	tok := *old
	tok.Name, tok.Type, tok.Policies, tok.Roles = spec.Name, spec.Type, spec.Policies, spec.Roles
	if _, err := a.s.Apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: writeMeta(r), Token: &tok}); err != nil {
		return nil, err
	}
	t, err := a.s.State().ACL().Token(tok.AccessorID)
	if err != nil || t == nil {
		return nil, err
	}
	return t.View(), nil
}

func (a *aclAPI) aclTokenDelete(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.aclDelete(r, structs.ACLTokenDeleteRequestType, "accessor_id")
}

// --- auth methods

func (a *aclAPI) aclAuthMethodList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return aclList(a.apiBase, a.s.State().ACL().AuthMethods, (*structs.ACLAuthMethod).Redacted)
}

func (a *aclAPI) aclAuthMethodGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	return aclGet(a.apiBase, r, "name", "auth method", a.s.State().ACL().AuthMethod, (*structs.ACLAuthMethod).Redacted)
}

func checkAuthMethod(m *structs.ACLAuthMethod) []string {
	var problems []string
	if p := checkACLName("auth method", m.Name); p != "" {
		problems = append(problems, p)
	}
	if m.TokenTTL != "" {
		if d, err := time.ParseDuration(m.TokenTTL); err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("token_ttl: %q is not a positive duration", m.TokenTTL))
		}
	}
	c := m.Config
	if c == nil {
		return append(problems, "config: required")
	}
	if c.ClockSkewLeeway != "" {
		if d, err := time.ParseDuration(c.ClockSkewLeeway); err != nil || d < 0 {
			problems = append(problems, fmt.Sprintf("config.clock_skew_leeway: %q is not a duration", c.ClockSkewLeeway))
		}
	}
	switch m.Type {
	case structs.ACLAuthMethodOIDC:
		if c.OIDCDiscoveryURL == "" || c.OIDCClientID == "" {
			problems = append(problems, "config: an OIDC method needs oidc_discovery_url and oidc_client_id")
		}
		if len(c.AllowedRedirectURIs) == 0 {
			problems = append(problems, "config.allowed_redirect_uris: an OIDC method needs at least one")
		}
	case structs.ACLAuthMethodJWT:
		n := 0
		for _, set := range []bool{c.JWKSURL != "", len(c.JWTValidationPubKeys) > 0, c.OIDCDiscoveryURL != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			problems = append(problems, "config: a JWT method needs exactly one of jwks_url, jwt_validation_pub_keys or oidc_discovery_url")
		}
		if len(c.BoundAudiences) == 0 {
			problems = append(problems, "config.bound_audiences: a JWT method needs at least one audience")
		}
	default:
		problems = append(problems, fmt.Sprintf("type: must be oidc or jwt, not %q", m.Type))
	}
	for claim, name := range c.ClaimMappings {
		if claim == "" || name == "" {
			problems = append(problems, "config.claim_mappings: empty claim or name")
		}
	}
	sort.Strings(problems)
	return problems
}

func (a *aclAPI) aclAuthMethodPut(_ http.ResponseWriter, r *http.Request) (any, error) {
	spec, err := aclBody[structs.ACLAuthMethodSpec](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	m := &structs.ACLAuthMethod{Name: name, Type: spec.Type, DisplayName: spec.DisplayName, TokenTTL: spec.TokenTTL,
		Default: spec.Default, Config: spec.Config}
	problems := checkAuthMethod(m)
	if spec.Name != "" && spec.Name != name {
		problems = append(problems, fmt.Sprintf("name: body names %q but the path names %q", spec.Name, name))
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	// A client secret sent back as "redacted" (from a read) keeps the
	// stored one.
	if old, err := a.s.State().ACL().AuthMethod(name); err == nil && old != nil && old.Config != nil &&
		m.Config.OIDCClientSecret == "redacted" {
		m.Config.OIDCClientSecret = old.Config.OIDCClientSecret
	}
	if _, err := a.s.Apply(structs.ACLAuthMethodUpsertRequestType, &structs.ACLAuthMethodUpsertRequest{WriteMeta: writeMeta(r), Method: m}); err != nil {
		return nil, err
	}
	got, err := a.s.State().ACL().AuthMethod(name)
	if err != nil || got == nil {
		return nil, err
	}
	return got.Redacted(), nil
}

func (a *aclAPI) aclAuthMethodDelete(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.aclDelete(r, structs.ACLAuthMethodDeleteRequestType, "name")
}

// --- binding rules

func (a *aclAPI) aclBindingRuleList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return aclList(a.apiBase, a.s.State().ACL().BindingRules, asStored)
}

func (a *aclAPI) aclBindingRuleGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	return aclGet(a.apiBase, r, "id", "binding rule", a.s.State().ACL().BindingRule, asStored)
}

func (a *aclAPI) checkBindingRule(spec *structs.ACLBindingRuleSpec) []string {
	var problems []string
	if m, err := a.s.State().ACL().AuthMethod(spec.AuthMethod); err != nil || m == nil {
		problems = append(problems, fmt.Sprintf("auth_method: no auth method %q", spec.AuthMethod))
	}
	if spec.Selector != "" {
		if _, err := bexpr.CreateEvaluator(spec.Selector); err != nil {
			problems = append(problems, fmt.Sprintf("selector: %v", err))
		}
	}
	switch spec.BindType {
	case structs.ACLBindTypePolicy, structs.ACLBindTypeRole:
		if spec.BindName == "" {
			problems = append(problems, "bind_name: required for bind type "+spec.BindType)
		}
	case structs.ACLBindTypeManagement:
		if spec.BindName != "" {
			problems = append(problems, "bind_name: a management binding takes none")
		}
	default:
		problems = append(problems, fmt.Sprintf("bind_type: must be policy, role or management, not %q", spec.BindType))
	}
	return problems
}

func (a *aclAPI) putBindingRule(r *http.Request, id string, create bool) (any, error) {
	spec, err := aclBody[structs.ACLBindingRuleSpec](a.apiBase, r)
	if err != nil {
		return nil, err
	}
	problems := a.checkBindingRule(spec)
	if spec.ID != "" && spec.ID != id {
		problems = append(problems, fmt.Sprintf("id: body names %q but the path names %q", spec.ID, id))
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	rule := &structs.ACLBindingRule{ID: id, Description: spec.Description, AuthMethod: spec.AuthMethod,
		Selector: spec.Selector, BindType: spec.BindType, BindName: spec.BindName}
	if _, err := a.s.Apply(structs.ACLBindingRuleUpsertRequestType, &structs.ACLBindingRuleUpsertRequest{WriteMeta: writeMeta(r), Rule: rule, Create: create}); err != nil {
		return nil, err
	}
	return a.s.State().ACL().BindingRule(id)
}

func (a *aclAPI) aclBindingRuleCreate(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.putBindingRule(r, uuid.NewString(), true)
}

func (a *aclAPI) aclBindingRuleUpdate(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.putBindingRule(r, r.PathValue("id"), false)
}

func (a *aclAPI) aclBindingRuleDelete(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.aclDelete(r, structs.ACLBindingRuleDeleteRequestType, "id")
}
