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
	var out structs.ACLTokenView
	return &out, a.c.write(ctx, http.MethodPost, "/v1/acl/bootstrap", nil, nil, &out)
}

// Policies lists the ACL policies.
func (a *ACL) Policies(ctx context.Context) ([]*structs.ACLPolicy, error) {
	var out []*structs.ACLPolicy
	_, err := a.c.get(ctx, "/v1/acl/policies", nil, nil, &out)
	return out, err
}

// Policy returns one policy.
func (a *ACL) Policy(ctx context.Context, name string) (*structs.ACLPolicy, error) {
	var out structs.ACLPolicy
	_, err := a.c.get(ctx, "/v1/acl/policy/"+seg(name), nil, nil, &out)
	return &out, err
}

// PutPolicy creates or replaces a policy.
func (a *ACL) PutPolicy(ctx context.Context, spec *structs.ACLPolicySpec) (*structs.ACLPolicy, error) {
	var out structs.ACLPolicy
	return &out, a.c.write(ctx, http.MethodPut, "/v1/acl/policy/"+seg(spec.Name), nil, spec, &out)
}

// DeletePolicy deletes a policy.
func (a *ACL) DeletePolicy(ctx context.Context, name string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/policy/"+seg(name), nil, nil, nil)
}

// Roles lists the ACL roles.
func (a *ACL) Roles(ctx context.Context) ([]*structs.ACLRole, error) {
	var out []*structs.ACLRole
	_, err := a.c.get(ctx, "/v1/acl/roles", nil, nil, &out)
	return out, err
}

// Role returns one role.
func (a *ACL) Role(ctx context.Context, name string) (*structs.ACLRole, error) {
	var out structs.ACLRole
	_, err := a.c.get(ctx, "/v1/acl/role/"+seg(name), nil, nil, &out)
	return &out, err
}

// PutRole creates or replaces a role.
func (a *ACL) PutRole(ctx context.Context, spec *structs.ACLRoleSpec) (*structs.ACLRole, error) {
	var out structs.ACLRole
	return &out, a.c.write(ctx, http.MethodPut, "/v1/acl/role/"+seg(spec.Name), nil, spec, &out)
}

// DeleteRole deletes a role.
func (a *ACL) DeleteRole(ctx context.Context, name string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/role/"+seg(name), nil, nil, nil)
}

// Tokens lists the tokens, without their secrets.
func (a *ACL) Tokens(ctx context.Context) ([]*structs.ACLTokenView, error) {
	var out []*structs.ACLTokenView
	_, err := a.c.get(ctx, "/v1/acl/tokens", nil, nil, &out)
	return out, err
}

// Token returns one token by accessor ID.
func (a *ACL) Token(ctx context.Context, accessorID string) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	_, err := a.c.get(ctx, "/v1/acl/token/"+seg(accessorID), nil, nil, &out)
	return &out, err
}

// TokenSelf returns the client's own token.
func (a *ACL) TokenSelf(ctx context.Context) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	_, err := a.c.get(ctx, "/v1/acl/token/self", nil, nil, &out)
	return &out, err
}

// CreateToken creates a token; its secret is in the answer only.
func (a *ACL) CreateToken(ctx context.Context, spec *structs.ACLTokenSpec) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	return &out, a.c.write(ctx, http.MethodPost, "/v1/acl/token", nil, spec, &out)
}

// UpdateToken changes a token's name, type, policies and roles.
func (a *ACL) UpdateToken(ctx context.Context, accessorID string, spec *structs.ACLTokenSpec) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	return &out, a.c.write(ctx, http.MethodPost, "/v1/acl/token/"+seg(accessorID), nil, spec, &out)
}

// DeleteToken deletes a token.
func (a *ACL) DeleteToken(ctx context.Context, accessorID string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/token/"+seg(accessorID), nil, nil, nil)
}

// AuthMethods lists the auth methods (client secrets redacted).
func (a *ACL) AuthMethods(ctx context.Context) ([]*structs.ACLAuthMethod, error) {
	var out []*structs.ACLAuthMethod
	_, err := a.c.get(ctx, "/v1/acl/auth-methods", nil, nil, &out)
	return out, err
}

// AuthMethod returns one auth method.
func (a *ACL) AuthMethod(ctx context.Context, name string) (*structs.ACLAuthMethod, error) {
	var out structs.ACLAuthMethod
	_, err := a.c.get(ctx, "/v1/acl/auth-method/"+seg(name), nil, nil, &out)
	return &out, err
}

// PutAuthMethod creates or replaces an auth method.
func (a *ACL) PutAuthMethod(ctx context.Context, spec *structs.ACLAuthMethodSpec) (*structs.ACLAuthMethod, error) {
	var out structs.ACLAuthMethod
	return &out, a.c.write(ctx, http.MethodPut, "/v1/acl/auth-method/"+seg(spec.Name), nil, spec, &out)
}

// DeleteAuthMethod deletes an auth method and its binding rules.
func (a *ACL) DeleteAuthMethod(ctx context.Context, name string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/auth-method/"+seg(name), nil, nil, nil)
}

// BindingRules lists the binding rules.
func (a *ACL) BindingRules(ctx context.Context) ([]*structs.ACLBindingRule, error) {
	var out []*structs.ACLBindingRule
	_, err := a.c.get(ctx, "/v1/acl/binding-rules", nil, nil, &out)
	return out, err
}

// BindingRule returns one binding rule.
func (a *ACL) BindingRule(ctx context.Context, id string) (*structs.ACLBindingRule, error) {
	var out structs.ACLBindingRule
	_, err := a.c.get(ctx, "/v1/acl/binding-rule/"+seg(id), nil, nil, &out)
	return &out, err
}

// CreateBindingRule creates a binding rule; the server names it.
func (a *ACL) CreateBindingRule(ctx context.Context, spec *structs.ACLBindingRuleSpec) (*structs.ACLBindingRule, error) {
	var out structs.ACLBindingRule
	return &out, a.c.write(ctx, http.MethodPost, "/v1/acl/binding-rule", nil, spec, &out)
}

// UpdateBindingRule replaces a binding rule.
func (a *ACL) UpdateBindingRule(ctx context.Context, id string, spec *structs.ACLBindingRuleSpec) (*structs.ACLBindingRule, error) {
	var out structs.ACLBindingRule
	return &out, a.c.write(ctx, http.MethodPut, "/v1/acl/binding-rule/"+seg(id), nil, spec, &out)
}

// DeleteBindingRule deletes a binding rule.
func (a *ACL) DeleteBindingRule(ctx context.Context, id string) error {
	return a.c.write(ctx, http.MethodDelete, "/v1/acl/binding-rule/"+seg(id), nil, nil, nil)
}

// OIDCAuthURL starts an OIDC login.
func (a *ACL) OIDCAuthURL(ctx context.Context, req *structs.ACLOIDCAuthURLRequest) (*structs.ACLOIDCAuthURLResponse, error) {
	var out structs.ACLOIDCAuthURLResponse
	return &out, a.c.write(ctx, http.MethodPost, "/v1/acl/oidc/auth-url", nil, req, &out)
}

// OIDCCompleteAuth ends an OIDC login and returns the new token.
func (a *ACL) OIDCCompleteAuth(ctx context.Context, req *structs.ACLOIDCCompleteAuthRequest) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	return &out, a.c.write(ctx, http.MethodPost, "/v1/acl/oidc/complete-auth", nil, req, &out)
}

// JWTLogin exchanges a JWT for a token with a JWT auth method.
func (a *ACL) JWTLogin(ctx context.Context, method, jwt string) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	body := &structs.ACLLoginRequest{AuthMethod: method, LoginToken: jwt}
	return &out, a.c.write(ctx, http.MethodPost, "/v1/acl/login", nil, body, &out)
}
