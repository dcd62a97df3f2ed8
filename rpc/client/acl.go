package client

import (
	"context"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// ACLBootstrap creates the first management token. Its secret is in the
// answer only.
func (c *Client) ACLBootstrap(ctx context.Context) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	return &out, c.write(ctx, http.MethodPost, "/v1/acl/bootstrap", nil, nil, &out)
}

// ACLPolicies lists the ACL policies.
func (c *Client) ACLPolicies(ctx context.Context) ([]*structs.ACLPolicy, error) {
	var out []*structs.ACLPolicy
	_, err := c.get(ctx, "/v1/acl/policies", nil, nil, &out)
	return out, err
}

// ACLPolicy returns one policy.
func (c *Client) ACLPolicy(ctx context.Context, name string) (*structs.ACLPolicy, error) {
	var out structs.ACLPolicy
	_, err := c.get(ctx, "/v1/acl/policy/"+seg(name), nil, nil, &out)
	return &out, err
}

// PutACLPolicy creates or replaces a policy.
func (c *Client) PutACLPolicy(ctx context.Context, spec *structs.ACLPolicySpec) (*structs.ACLPolicy, error) {
	var out structs.ACLPolicy
	return &out, c.write(ctx, http.MethodPut, "/v1/acl/policy/"+seg(spec.Name), nil, spec, &out)
}

// DeleteACLPolicy deletes a policy.
func (c *Client) DeleteACLPolicy(ctx context.Context, name string) error {
	return c.write(ctx, http.MethodDelete, "/v1/acl/policy/"+seg(name), nil, nil, nil)
}

// ACLRoles lists the ACL roles.
func (c *Client) ACLRoles(ctx context.Context) ([]*structs.ACLRole, error) {
	var out []*structs.ACLRole
	_, err := c.get(ctx, "/v1/acl/roles", nil, nil, &out)
	return out, err
}

// ACLRole returns one role.
func (c *Client) ACLRole(ctx context.Context, name string) (*structs.ACLRole, error) {
	var out structs.ACLRole
	_, err := c.get(ctx, "/v1/acl/role/"+seg(name), nil, nil, &out)
	return &out, err
}

// PutACLRole creates or replaces a role.
func (c *Client) PutACLRole(ctx context.Context, spec *structs.ACLRoleSpec) (*structs.ACLRole, error) {
	var out structs.ACLRole
	return &out, c.write(ctx, http.MethodPut, "/v1/acl/role/"+seg(spec.Name), nil, spec, &out)
}

// DeleteACLRole deletes a role.
func (c *Client) DeleteACLRole(ctx context.Context, name string) error {
	return c.write(ctx, http.MethodDelete, "/v1/acl/role/"+seg(name), nil, nil, nil)
}

// ACLTokens lists the tokens, without their secrets.
func (c *Client) ACLTokens(ctx context.Context) ([]*structs.ACLTokenView, error) {
	var out []*structs.ACLTokenView
	_, err := c.get(ctx, "/v1/acl/tokens", nil, nil, &out)
	return out, err
}

// ACLToken returns one token by accessor ID.
func (c *Client) ACLToken(ctx context.Context, accessorID string) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	_, err := c.get(ctx, "/v1/acl/token/"+seg(accessorID), nil, nil, &out)
	return &out, err
}

// ACLTokenSelf returns the client's own token.
func (c *Client) ACLTokenSelf(ctx context.Context) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	_, err := c.get(ctx, "/v1/acl/token/self", nil, nil, &out)
	return &out, err
}

// CreateACLToken creates a token; its secret is in the answer only.
func (c *Client) CreateACLToken(ctx context.Context, spec *structs.ACLTokenSpec) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	return &out, c.write(ctx, http.MethodPost, "/v1/acl/token", nil, spec, &out)
}

// UpdateACLToken changes a token's name, type, policies and roles.
func (c *Client) UpdateACLToken(ctx context.Context, accessorID string, spec *structs.ACLTokenSpec) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	return &out, c.write(ctx, http.MethodPost, "/v1/acl/token/"+seg(accessorID), nil, spec, &out)
}

// DeleteACLToken deletes a token.
func (c *Client) DeleteACLToken(ctx context.Context, accessorID string) error {
	return c.write(ctx, http.MethodDelete, "/v1/acl/token/"+seg(accessorID), nil, nil, nil)
}

// ACLAuthMethods lists the auth methods (client secrets redacted).
func (c *Client) ACLAuthMethods(ctx context.Context) ([]*structs.ACLAuthMethod, error) {
	var out []*structs.ACLAuthMethod
	_, err := c.get(ctx, "/v1/acl/auth-methods", nil, nil, &out)
	return out, err
}

// ACLAuthMethod returns one auth method.
func (c *Client) ACLAuthMethod(ctx context.Context, name string) (*structs.ACLAuthMethod, error) {
	var out structs.ACLAuthMethod
	_, err := c.get(ctx, "/v1/acl/auth-method/"+seg(name), nil, nil, &out)
	return &out, err
}

// PutACLAuthMethod creates or replaces an auth method.
func (c *Client) PutACLAuthMethod(ctx context.Context, spec *structs.ACLAuthMethodSpec) (*structs.ACLAuthMethod, error) {
	var out structs.ACLAuthMethod
	return &out, c.write(ctx, http.MethodPut, "/v1/acl/auth-method/"+seg(spec.Name), nil, spec, &out)
}

// DeleteACLAuthMethod deletes an auth method and its binding rules.
func (c *Client) DeleteACLAuthMethod(ctx context.Context, name string) error {
	return c.write(ctx, http.MethodDelete, "/v1/acl/auth-method/"+seg(name), nil, nil, nil)
}

// ACLBindingRules lists the binding rules.
func (c *Client) ACLBindingRules(ctx context.Context) ([]*structs.ACLBindingRule, error) {
	var out []*structs.ACLBindingRule
	_, err := c.get(ctx, "/v1/acl/binding-rules", nil, nil, &out)
	return out, err
}

// ACLBindingRule returns one binding rule.
func (c *Client) ACLBindingRule(ctx context.Context, id string) (*structs.ACLBindingRule, error) {
	var out structs.ACLBindingRule
	_, err := c.get(ctx, "/v1/acl/binding-rule/"+seg(id), nil, nil, &out)
	return &out, err
}

// CreateACLBindingRule creates a binding rule; the server names it.
func (c *Client) CreateACLBindingRule(ctx context.Context, spec *structs.ACLBindingRuleSpec) (*structs.ACLBindingRule, error) {
	var out structs.ACLBindingRule
	return &out, c.write(ctx, http.MethodPost, "/v1/acl/binding-rule", nil, spec, &out)
}

// UpdateACLBindingRule replaces a binding rule.
func (c *Client) UpdateACLBindingRule(ctx context.Context, id string, spec *structs.ACLBindingRuleSpec) (*structs.ACLBindingRule, error) {
	var out structs.ACLBindingRule
	return &out, c.write(ctx, http.MethodPut, "/v1/acl/binding-rule/"+seg(id), nil, spec, &out)
}

// DeleteACLBindingRule deletes a binding rule.
func (c *Client) DeleteACLBindingRule(ctx context.Context, id string) error {
	return c.write(ctx, http.MethodDelete, "/v1/acl/binding-rule/"+seg(id), nil, nil, nil)
}

// OIDCAuthURL starts an OIDC login.
func (c *Client) OIDCAuthURL(ctx context.Context, req *structs.ACLOIDCAuthURLRequest) (*structs.ACLOIDCAuthURLResponse, error) {
	var out structs.ACLOIDCAuthURLResponse
	return &out, c.write(ctx, http.MethodPost, "/v1/acl/oidc/auth-url", nil, req, &out)
}

// OIDCCompleteAuth ends an OIDC login and returns the new token.
func (c *Client) OIDCCompleteAuth(ctx context.Context, req *structs.ACLOIDCCompleteAuthRequest) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	return &out, c.write(ctx, http.MethodPost, "/v1/acl/oidc/complete-auth", nil, req, &out)
}

// JWTLogin exchanges a JWT for a token with a JWT auth method.
func (c *Client) JWTLogin(ctx context.Context, method, jwt string) (*structs.ACLTokenView, error) {
	var out structs.ACLTokenView
	body := &structs.ACLLoginRequest{AuthMethod: method, LoginToken: jwt}
	return &out, c.write(ctx, http.MethodPost, "/v1/acl/login", nil, body, &out)
}
