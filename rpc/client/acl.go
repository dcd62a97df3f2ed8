package client

import (
	"context"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// ACL is the part of the API on the ACL system: bootstrap, policies, roles,
// tokens, auth methods, binding rules and logins. Get it with Client.ACL.
type ACL struct {
	c *Client
}

// ACL returns the client of the ACL system: bootstrap, policies, roles,
// tokens, auth methods, binding rules and logins.
func (c *Client) ACL() *ACL { return &ACL{c: c} }

// Bootstrap creates the first management token. Its secret is in the
// answer only.
func (a *ACL) Bootstrap(ctx context.Context) (*structs.ACLTokenView, error) {
	return aclWrite[structs.ACLTokenView](ctx, a, http.MethodPost, "/v1/acl/bootstrap", nil)
}

// Policies lists the ACL policies.
func (a *ACL) Policies(ctx context.Context) ([]*structs.ACLPolicy, error) {
	return aclList[*structs.ACLPolicy](ctx, a, "/v1/acl/policies")
}

// Policy returns one policy.
func (a *ACL) Policy(ctx context.Context, name string) (*structs.ACLPolicy, error) {
	return aclGet[structs.ACLPolicy](ctx, a, "/v1/acl/policy/"+seg(name))
}

// PutPolicy creates or replaces a policy.
func (a *ACL) PutPolicy(ctx context.Context, spec *structs.ACLPolicySpec) (*structs.ACLPolicy, error) {
	return aclWrite[structs.ACLPolicy](ctx, a, http.MethodPut, "/v1/acl/policy/"+seg(spec.Name), spec)
}

// DeletePolicy deletes a policy.
func (a *ACL) DeletePolicy(ctx context.Context, name string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/policy/"+seg(name), nil, nil, nil)
}

// Roles lists the ACL roles.
func (a *ACL) Roles(ctx context.Context) ([]*structs.ACLRole, error) {
	return aclList[*structs.ACLRole](ctx, a, "/v1/acl/roles")
}

// Role returns one role.
func (a *ACL) Role(ctx context.Context, name string) (*structs.ACLRole, error) {
	return aclGet[structs.ACLRole](ctx, a, "/v1/acl/role/"+seg(name))
}

// PutRole creates or replaces a role.
func (a *ACL) PutRole(ctx context.Context, spec *structs.ACLRoleSpec) (*structs.ACLRole, error) {
	return aclWrite[structs.ACLRole](ctx, a, http.MethodPut, "/v1/acl/role/"+seg(spec.Name), spec)
}

// DeleteRole deletes a role.
func (a *ACL) DeleteRole(ctx context.Context, name string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/role/"+seg(name), nil, nil, nil)
}

// Tokens lists the tokens, without their secrets.
func (a *ACL) Tokens(ctx context.Context) ([]*structs.ACLTokenView, error) {
	return aclList[*structs.ACLTokenView](ctx, a, "/v1/acl/tokens")
}

// Token returns one token by accessor ID.
func (a *ACL) Token(ctx context.Context, accessorID string) (*structs.ACLTokenView, error) {
	return aclGet[structs.ACLTokenView](ctx, a, "/v1/acl/token/"+seg(accessorID))
}

// TokenSelf returns the client's own token.
func (a *ACL) TokenSelf(ctx context.Context) (*structs.ACLTokenView, error) {
	return aclGet[structs.ACLTokenView](ctx, a, "/v1/acl/token/self")
}

// CreateToken creates a token; its secret is in the answer only.
func (a *ACL) CreateToken(ctx context.Context, spec *structs.ACLTokenSpec) (*structs.ACLTokenView, error) {
	return aclWrite[structs.ACLTokenView](ctx, a, http.MethodPost, "/v1/acl/token", spec)
}

// UpdateToken changes a token's name, type, policies and roles.
func (a *ACL) UpdateToken(ctx context.Context, accessorID string, spec *structs.ACLTokenSpec) (*structs.ACLTokenView, error) {
	return aclWrite[structs.ACLTokenView](ctx, a, http.MethodPost, "/v1/acl/token/"+seg(accessorID), spec)
}

// DeleteToken deletes a token.
func (a *ACL) DeleteToken(ctx context.Context, accessorID string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/token/"+seg(accessorID), nil, nil, nil)
}

// AuthMethods lists the auth methods (client secrets redacted).
func (a *ACL) AuthMethods(ctx context.Context) ([]*structs.ACLAuthMethod, error) {
	return aclList[*structs.ACLAuthMethod](ctx, a, "/v1/acl/auth-methods")
}

// AuthMethod returns one auth method.
func (a *ACL) AuthMethod(ctx context.Context, name string) (*structs.ACLAuthMethod, error) {
	return aclGet[structs.ACLAuthMethod](ctx, a, "/v1/acl/auth-method/"+seg(name))
}

// PutAuthMethod creates or replaces an auth method.
func (a *ACL) PutAuthMethod(ctx context.Context, spec *structs.ACLAuthMethodSpec) (*structs.ACLAuthMethod, error) {
	return aclWrite[structs.ACLAuthMethod](ctx, a, http.MethodPut, "/v1/acl/auth-method/"+seg(spec.Name), spec)
}

// DeleteAuthMethod deletes an auth method and its binding rules.
func (a *ACL) DeleteAuthMethod(ctx context.Context, name string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/auth-method/"+seg(name), nil, nil, nil)
}

// BindingRules lists the binding rules.
func (a *ACL) BindingRules(ctx context.Context) ([]*structs.ACLBindingRule, error) {
	return aclList[*structs.ACLBindingRule](ctx, a, "/v1/acl/binding-rules")
}

// BindingRule returns one binding rule.
func (a *ACL) BindingRule(ctx context.Context, id string) (*structs.ACLBindingRule, error) {
	return aclGet[structs.ACLBindingRule](ctx, a, "/v1/acl/binding-rule/"+seg(id))
}

// CreateBindingRule creates a binding rule; the server names it.
func (a *ACL) CreateBindingRule(ctx context.Context, spec *structs.ACLBindingRuleSpec) (*structs.ACLBindingRule, error) {
	return aclWrite[structs.ACLBindingRule](ctx, a, http.MethodPost, "/v1/acl/binding-rule", spec)
}

// UpdateBindingRule replaces a binding rule.
func (a *ACL) UpdateBindingRule(ctx context.Context, id string, spec *structs.ACLBindingRuleSpec) (*structs.ACLBindingRule, error) {
	return aclWrite[structs.ACLBindingRule](ctx, a, http.MethodPut, "/v1/acl/binding-rule/"+seg(id), spec)
}

// DeleteBindingRule deletes a binding rule.
func (a *ACL) DeleteBindingRule(ctx context.Context, id string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/binding-rule/"+seg(id), nil, nil, nil)
}

// OIDCAuthURL starts an OIDC login.
func (a *ACL) OIDCAuthURL(ctx context.Context, req *structs.ACLOIDCAuthURLRequest) (*structs.ACLOIDCAuthURLResponse, error) {
	return aclWrite[structs.ACLOIDCAuthURLResponse](ctx, a, http.MethodPost, "/v1/acl/oidc/auth-url", req)
}

// OIDCCompleteAuth ends an OIDC login and returns the new token.
func (a *ACL) OIDCCompleteAuth(ctx context.Context, req *structs.ACLOIDCCompleteAuthRequest) (*structs.ACLTokenView, error) {
	return aclWrite[structs.ACLTokenView](ctx, a, http.MethodPost, "/v1/acl/oidc/complete-auth", req)
}

// JWTLogin exchanges a JWT for a token with a JWT auth method.
func (a *ACL) JWTLogin(ctx context.Context, method, jwt string) (*structs.ACLTokenView, error) {
	body := &structs.ACLLoginRequest{AuthMethod: method, LoginToken: jwt}
	return aclWrite[structs.ACLTokenView](ctx, a, http.MethodPost, "/v1/acl/login", body)
}

// aclList reads the list at path.
func aclList[T any](ctx context.Context, a *ACL, path string) ([]T, error) {
	var out []T
	_, err := a.c.get(ctx, path, nil, nil, &out)
	return out, err
}

// aclGet reads the object at path. Like every method of ACL, it returns
// the object, zero, with an error.
func aclGet[T any](ctx context.Context, a *ACL, path string) (*T, error) {
	out := new(T)
	_, err := a.c.get(ctx, path, nil, nil, out)
	return out, err
}

// aclWrite sends body to path with method and reads the object answered.
func aclWrite[T any](ctx context.Context, a *ACL, method, path string, body any) (*T, error) {
	out := new(T)
	return out, a.c.write(ctx, method, path, nil, body, out)
}
