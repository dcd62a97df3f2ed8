package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nops-dev/nops/cmd/nops/command/oidclogin"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// authMethodFlags are the flags of acl auth-method create and update.
type authMethodFlags struct {
	typ, display, ttl, config string
	isDefault                 bool
}

func (f *authMethodFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.typ, "type", "", "")
	fs.StringVar(&f.display, "display-name", "", "")
	fs.StringVar(&f.ttl, "token-ttl", "", "")
	fs.StringVar(&f.config, "config", "", "")
	fs.BoolVar(&f.isDefault, "default", false, "")
}

// authMethodFlagsHelp documents authMethodFlags.
const authMethodFlagsHelp = `
Options:

  -type=<oidc|jwt>
    Required.

  -config=<json or @file>
    The method's configuration as JSON, inline or from a file: for OIDC
    oidc_discovery_url, oidc_client_id, oidc_client_secret, oidc_scopes,
    allowed_redirect_uris, discovery_ca_pem; for JWT one of jwks_url,
    jwt_validation_pub_keys or oidc_discovery_url, and bound_issuer; for
    both bound_audiences, signing_algs, claim_mappings,
    list_claim_mappings, user_claim (default "sub"), clock_skew_leeway.

  -token-ttl=<duration>
    Lifetime of the tokens of a login. Default: the server's acl.token_ttl.

  -display-name=<text>, -default
    A name for people; make this the method nops login uses by default.
`

// aclAuthMethodWriteCommand creates an SSO auth method, or replaces one
// (update).
type aclAuthMethodWriteCommand struct {
	m      *runner
	create writeMode
}

func (c *aclAuthMethodWriteCommand) Synopsis() string {
	if c.create {
		return "Create an SSO auth method"
	}
	return "Replace an SSO auth method"
}

func (c *aclAuthMethodWriteCommand) Help() string {
	return fmt.Sprintf("Usage: nops acl auth-method %s [options] <name>\n\n  %s an SSO auth method (OIDC or JWT).\n", c.create.verb(), c.create.does()) +
		authMethodFlagsHelp + apiFlagsHelp
}

func (c *aclAuthMethodWriteCommand) Run(ctx context.Context, args []string) int {
	var f authMethodFlags
	spec := apiArgs{name: "acl auth-method " + c.create.verb(), min: 1, max: 1, desc: "an auth method name", flags: f.register,
		check: func([]string) error {
			if f.config == "" {
				return errors.New("-config is required")
			}
			return nil
		}}
	return c.m.runACL(c, args, spec, func(api *client.Client, pos []string) (any, func(), error) {
		cfg := &structs.ACLAuthMethodConfig{}
		if err := jsonFlag(f.config, cfg); err != nil {
			return nil, nil, fmt.Errorf("-config: %w", err)
		}
		_, err := api.ACL().AuthMethod(ctx, pos[0])
		if err := c.create.check(err, "auth method", pos[0], "acl auth-method"); err != nil {
			return nil, nil, err
		}
		am, err := api.ACL().PutAuthMethod(ctx, &structs.ACLAuthMethodSpec{Name: pos[0], Type: f.typ, DisplayName: f.display,
			TokenTTL: f.ttl, Default: f.isDefault, Config: cfg})
		if err != nil {
			return nil, nil, fmt.Errorf("%s auth method %q: %w", c.create.verb(), pos[0], err)
		}
		return am, func() { fmt.Fprintf(c.m.stdout, "Auth method %q %sd\n", am.Name, c.create.verb()) }, nil
	})
}

// aclAuthMethodList lists the SSO auth methods.
func (m *runner) aclAuthMethodList() command {
	return &aclListCommand[*structs.ACLAuthMethod]{m: m, name: "acl auth-method list", synopsis: "List the SSO auth methods",
		does: "Lists the SSO auth methods.", list: (*client.ACL).AuthMethods,
		table: table[*structs.ACLAuthMethod]{header: "Name\tType\tDefault\tToken TTL", empty: "No auth methods",
			row: func(a *structs.ACLAuthMethod) string {
				return a.Name + "\t" + a.Type + "\t" + yesNo(a.Default) + "\t" + orDash(a.TokenTTL)
			}}}
}

// aclAuthMethodInfo shows an SSO auth method.
func (m *runner) aclAuthMethodInfo() command {
	return &aclInfoCommand[*structs.ACLAuthMethod]{m: m, name: "acl auth-method info", synopsis: "Show an SSO auth method",
		does: "Shows an auth method (its client secret redacted).", arg: "name", desc: "an auth method name",
		get: (*client.ACL).AuthMethod, fail: "auth method %q",
		show: func(m *runner, a *structs.ACLAuthMethod) {
			m.kv("Name", a.Name, "Type", a.Type, "Display Name", orDash(a.DisplayName), "Default", yesNo(a.Default), "Token TTL", orDash(a.TokenTTL))
			_ = m.printJSON(a.Config)
		}}
}

// bindingRuleFlags registers the flags of acl binding-rule create and
// update into r.
func bindingRuleFlags(r *structs.ACLBindingRuleSpec) func(fs *flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.StringVar(&r.AuthMethod, "auth-method", "", "")
		fs.StringVar(&r.Selector, "selector", "", "")
		fs.StringVar(&r.BindType, "bind-type", "", "")
		fs.StringVar(&r.BindName, "bind-name", "", "")
		fs.StringVar(&r.Description, "description", "", "")
	}
}

// bindingRuleFlagsHelp documents bindingRuleFlags.
const bindingRuleFlagsHelp = `
Options:

  -auth-method=<name>
    The auth method whose logins the rule maps. Required.

  -selector=<expression>
    Which logins the rule matches, over the mapped claims, for example
    '"ops" in list.groups' or 'value.email matches "@example.com$"'.
    Empty matches every login of the method.

  -bind-type=<policy|role|management>, -bind-name=<name>
    What a matching login gets.

  -description=<text>
`

// aclBindingRuleCreateCommand creates a binding rule.
type aclBindingRuleCreateCommand struct {
	m *runner
}

func (c *aclBindingRuleCreateCommand) Synopsis() string { return "Create a binding rule" }

func (c *aclBindingRuleCreateCommand) Help() string {
	return "Usage: nops acl binding-rule create [options]\n\n  Creates a rule that maps the claims of SSO logins to a policy, a role or\n  a management token.\n" +
		bindingRuleFlagsHelp + apiFlagsHelp
}

func (c *aclBindingRuleCreateCommand) Run(ctx context.Context, args []string) int {
	var br structs.ACLBindingRuleSpec
	spec := apiArgs{name: "acl binding-rule create", flags: bindingRuleFlags(&br)}
	return c.m.runACL(c, args, spec, func(api *client.Client, _ []string) (any, func(), error) {
		r, err := api.ACL().CreateBindingRule(ctx, &br)
		if err != nil {
			return nil, nil, fmt.Errorf("create binding rule: %w", err)
		}
		return r, func() { fmt.Fprintf(c.m.stdout, "Binding rule %s created\n", r.ID) }, nil
	})
}

// aclBindingRuleUpdateCommand replaces a binding rule.
type aclBindingRuleUpdateCommand struct {
	m *runner
}

func (c *aclBindingRuleUpdateCommand) Synopsis() string { return "Replace a binding rule" }

func (c *aclBindingRuleUpdateCommand) Help() string {
	return "Usage: nops acl binding-rule update [options] <id>\n\n  Replaces a binding rule.\n" + bindingRuleFlagsHelp + apiFlagsHelp
}

func (c *aclBindingRuleUpdateCommand) Run(ctx context.Context, args []string) int {
	var br structs.ACLBindingRuleSpec
	spec := apiArgs{name: "acl binding-rule update", min: 1, max: 1, desc: "a rule ID", flags: bindingRuleFlags(&br)}
	return c.m.runACL(c, args, spec, func(api *client.Client, pos []string) (any, func(), error) {
		r, err := api.ACL().UpdateBindingRule(ctx, pos[0], &br)
		if err != nil {
			return nil, nil, fmt.Errorf("update binding rule %s: %w", pos[0], err)
		}
		return r, func() { fmt.Fprintf(c.m.stdout, "Binding rule %s updated\n", r.ID) }, nil
	})
}

// aclBindingRuleList lists the binding rules.
func (m *runner) aclBindingRuleList() command {
	return &aclListCommand[*structs.ACLBindingRule]{m: m, name: "acl binding-rule list", synopsis: "List the binding rules",
		does: "Lists the binding rules.", list: (*client.ACL).BindingRules,
		table: table[*structs.ACLBindingRule]{header: "ID\tAuth Method\tBind\tSelector", empty: "No binding rules",
			row: func(r *structs.ACLBindingRule) string {
				return r.ID + "\t" + r.AuthMethod + "\t" + r.BindType + ":" + r.BindName + "\t" + orDash(r.Selector)
			}}}
}

// aclBindingRuleInfo shows a binding rule.
func (m *runner) aclBindingRuleInfo() command {
	return &aclInfoCommand[*structs.ACLBindingRule]{m: m, name: "acl binding-rule info", synopsis: "Show a binding rule",
		does: "Shows a binding rule.", arg: "id", desc: "a rule ID", get: (*client.ACL).BindingRule, fail: "binding rule %s",
		show: func(m *runner, r *structs.ACLBindingRule) {
			m.kv("ID", r.ID, "Auth Method", r.AuthMethod, "Selector", orDash(r.Selector), "Bind Type", r.BindType,
				"Bind Name", orDash(r.BindName), "Description", orDash(r.Description))
		}}
}

// loginCommand logs in with an SSO auth method.
type loginCommand struct {
	m *runner
}

func (c *loginCommand) Synopsis() string { return "Log in with SSO and get a Nops token" }

func (c *loginCommand) Help() string {
	return `Usage: nops login [options]

  Logs in with an SSO auth method and prints a Nops token with its expiry.

  With an OIDC method, it listens on -oidc-callback-addr, prints the
  provider's login URL for the browser, and completes the authorization
  code flow with PKCE when the browser comes back to
  http://<addr>/oidc/callback (an allowed redirect URI of the method).
  With a JWT method, it exchanges the JWT given by -jwt or -jwt-file.

Options:

  -method=<name>
    The auth method. Default: the method marked default.

  -jwt=<token>, -jwt-file=<path>
    Exchange this JWT (JWT methods).

  -oidc-callback-addr=<host:port>
    Where the OIDC callback is served. Default: 127.0.0.1:4649.

  -token-file=<path>
    Also write the token's secret to this file (mode 0600), for NOPS_TOKEN.

  -timeout=<duration>
    How long to wait for the browser. Default: 5m.
` + apiFlagsHelp
}

// loginFlags are the flags of nops login.
type loginFlags struct {
	method, jwt, jwtFile, callback, tokenFile string
	timeout                                   time.Duration
}

func (f *loginFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.method, "method", "", "")
	fs.StringVar(&f.jwt, "jwt", "", "")
	fs.StringVar(&f.jwtFile, "jwt-file", "", "")
	fs.StringVar(&f.callback, "oidc-callback-addr", "127.0.0.1:4649", "")
	fs.StringVar(&f.tokenFile, "token-file", "", "")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "")
}

func (c *loginCommand) Run(ctx context.Context, args []string) int {
	var f loginFlags
	spec := apiArgs{name: "login", flags: f.register, check: func([]string) error {
		if f.jwt != "" && f.jwtFile != "" {
			return errors.New("give -jwt or -jwt-file, not both")
		}
		return nil
	}}
	return c.m.runACL(c, args, spec, func(api *client.Client, _ []string) (any, func(), error) {
		tok, err := c.login(ctx, api, &f)
		if err != nil {
			return nil, nil, err
		}
		if f.tokenFile != "" {
			if err := os.WriteFile(f.tokenFile, []byte(tok.SecretID+"\n"), 0o600); err != nil {
				return nil, nil, fmt.Errorf("write -token-file: %w", err)
			}
		}
		return tok, func() {
			c.m.printToken(tok)
			fmt.Fprintf(c.m.stdout, "\nUse it with: export %s=%s\n", EnvToken, tok.SecretID)
		}, nil
	})
}

// login exchanges the JWT of -jwt or -jwt-file, or runs the OIDC flow.
func (c *loginCommand) login(ctx context.Context, api *client.Client, f *loginFlags) (*structs.ACLTokenView, error) {
	jwt := f.jwt
	if f.jwtFile != "" {
		raw, err := os.ReadFile(f.jwtFile)
		if err != nil {
			return nil, fmt.Errorf("read -jwt-file: %w", err)
		}
		jwt = strings.TrimSpace(string(raw))
	}
	var (
		tok *structs.ACLTokenView
		err error
	)
	if jwt != "" {
		tok, err = api.ACL().JWTLogin(ctx, f.method, jwt)
	} else {
		ctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		tok, err = oidclogin.Login(ctx, api, oidclogin.Config{Method: f.method, CallbackAddr: f.callback, Random: c.m.random, Prompt: c.m.stderr})
	}
	if err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	return tok, nil
}
