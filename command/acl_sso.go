package command

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

func (m *runner) ssoCommands() map[string]command {
	cmds := map[string]command{}
	add := func(c *aclCommand) {
		c.m = m
		cmds[c.name] = c
	}

	// Auth methods.
	var (
		amType, amDisplay, amTTL, amConfig string
		amDefault                          bool
	)
	amFlags := func(fs *flag.FlagSet) {
		fs.StringVar(&amType, "type", "", "")
		fs.StringVar(&amDisplay, "display-name", "", "")
		fs.StringVar(&amTTL, "token-ttl", "", "")
		fs.StringVar(&amConfig, "config", "", "")
		fs.BoolVar(&amDefault, "default", false, "")
	}
	amHelp := `
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
	for _, verb := range []string{"create", "update"} {
		create := verb == "create"
		add(&aclCommand{name: "acl auth-method " + verb, min: 1, max: 1, desc: "an auth method name", flags: amFlags,
			synopsis: map[bool]string{true: "Create an SSO auth method", false: "Replace an SSO auth method"}[create],
			help:     fmt.Sprintf("Usage: nops acl auth-method %s [options] <name>\n\n  %s an SSO auth method (OIDC or JWT).\n%s", verb, map[bool]string{true: "Creates", false: "Replaces"}[create], amHelp),
			check: func([]string) error {
				if amConfig == "" {
					return errors.New("-config is required")
				}
				return nil
			},
			run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
				cfg := &structs.ACLAuthMethodConfig{}
				if err := jsonFlag(amConfig, cfg); err != nil {
					return nil, nil, fmt.Errorf("-config: %w", err)
				}
				_, err := api.ACLAuthMethod(ctx, pos[0])
				switch {
				case create && err == nil:
					return nil, nil, fmt.Errorf("auth method %q already exists: use nops acl auth-method update", pos[0])
				case !create && err != nil:
					return nil, nil, fmt.Errorf("auth method %q: %w", pos[0], err)
				}
				am, err := api.PutACLAuthMethod(ctx, &structs.ACLAuthMethodSpec{Name: pos[0], Type: amType, DisplayName: amDisplay,
					TokenTTL: amTTL, Default: amDefault, Config: cfg})
				if err != nil {
					return nil, nil, fmt.Errorf("%s auth method %q: %w", verb, pos[0], err)
				}
				return am, func() { fmt.Fprintf(m.stdout, "Auth method %q %sd\n", am.Name, verb) }, nil
			}})
	}
	add(&aclCommand{name: "acl auth-method list", synopsis: "List the SSO auth methods", max: 0,
		help: "Usage: nops acl auth-method list [options]\n\n  Lists the SSO auth methods.\n",
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			list, err := api.ACLAuthMethods(ctx)
			if list == nil {
				list = []*structs.ACLAuthMethod{}
			}
			return list, func() {
				table[*structs.ACLAuthMethod]{header: "Name\tType\tDefault\tToken TTL", empty: "No auth methods",
					row: func(a *structs.ACLAuthMethod) string {
						return a.Name + "\t" + a.Type + "\t" + yesNo(a.Default) + "\t" + orDash(a.TokenTTL)
					}}.print(m, list)
			}, err
		}})
	add(&aclCommand{name: "acl auth-method info", synopsis: "Show an SSO auth method", min: 1, max: 1, desc: "an auth method name",
		help: "Usage: nops acl auth-method info [options] <name>\n\n  Shows an auth method (its client secret redacted).\n",
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			a, err := api.ACLAuthMethod(ctx, pos[0])
			if err != nil {
				return nil, nil, fmt.Errorf("auth method %q: %w", pos[0], err)
			}
			return a, func() {
				m.kv("Name", a.Name, "Type", a.Type, "Display Name", orDash(a.DisplayName), "Default", yesNo(a.Default), "Token TTL", orDash(a.TokenTTL))
				_ = m.printJSON(a.Config)
			}, nil
		}})
	add(m.deleteCommand("acl auth-method delete", "an SSO auth method and its binding rules", "a name", func(ctx context.Context, api *client.Client, n string) error {
		return api.DeleteACLAuthMethod(ctx, n)
	}))

	// Binding rules.
	var br structs.ACLBindingRuleSpec
	brFlags := func(fs *flag.FlagSet) {
		fs.StringVar(&br.AuthMethod, "auth-method", "", "")
		fs.StringVar(&br.Selector, "selector", "", "")
		fs.StringVar(&br.BindType, "bind-type", "", "")
		fs.StringVar(&br.BindName, "bind-name", "", "")
		fs.StringVar(&br.Description, "description", "", "")
	}
	brHelp := `
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
	add(&aclCommand{name: "acl binding-rule create", synopsis: "Create a binding rule", max: 0, flags: brFlags,
		help: "Usage: nops acl binding-rule create [options]\n\n  Creates a rule that maps the claims of SSO logins to a policy, a role or\n  a management token.\n" + brHelp,
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			r, err := api.CreateACLBindingRule(ctx, &br)
			if err != nil {
				return nil, nil, fmt.Errorf("create binding rule: %w", err)
			}
			return r, func() { fmt.Fprintf(m.stdout, "Binding rule %s created\n", r.ID) }, nil
		}})
	add(&aclCommand{name: "acl binding-rule update", synopsis: "Replace a binding rule", min: 1, max: 1, desc: "a rule ID", flags: brFlags,
		help: "Usage: nops acl binding-rule update [options] <id>\n\n  Replaces a binding rule.\n" + brHelp,
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			r, err := api.UpdateACLBindingRule(ctx, pos[0], &br)
			if err != nil {
				return nil, nil, fmt.Errorf("update binding rule %s: %w", pos[0], err)
			}
			return r, func() { fmt.Fprintf(m.stdout, "Binding rule %s updated\n", r.ID) }, nil
		}})
	add(&aclCommand{name: "acl binding-rule list", synopsis: "List the binding rules", max: 0,
		help: "Usage: nops acl binding-rule list [options]\n\n  Lists the binding rules.\n",
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			list, err := api.ACLBindingRules(ctx)
			if list == nil {
				list = []*structs.ACLBindingRule{}
			}
			return list, func() {
				table[*structs.ACLBindingRule]{header: "ID\tAuth Method\tBind\tSelector", empty: "No binding rules",
					row: func(r *structs.ACLBindingRule) string {
						return r.ID + "\t" + r.AuthMethod + "\t" + r.BindType + ":" + r.BindName + "\t" + orDash(r.Selector)
					}}.print(m, list)
			}, err
		}})
	add(&aclCommand{name: "acl binding-rule info", synopsis: "Show a binding rule", min: 1, max: 1, desc: "a rule ID",
		help: "Usage: nops acl binding-rule info [options] <id>\n\n  Shows a binding rule.\n",
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			r, err := api.ACLBindingRule(ctx, pos[0])
			if err != nil {
				return nil, nil, fmt.Errorf("binding rule %s: %w", pos[0], err)
			}
			return r, func() {
				m.kv("ID", r.ID, "Auth Method", r.AuthMethod, "Selector", orDash(r.Selector), "Bind Type", r.BindType,
					"Bind Name", orDash(r.BindName), "Description", orDash(r.Description))
			}, nil
		}})
	add(m.deleteCommand("acl binding-rule delete", "a binding rule", "a rule ID", func(ctx context.Context, api *client.Client, n string) error {
		return api.DeleteACLBindingRule(ctx, n)
	}))

	// Login.
	var (
		method, jwtToken, jwtFile, callback, tokenFile string
		timeout                                        time.Duration
	)
	add(&aclCommand{name: "login", synopsis: "Log in with SSO and get a Nops token", max: 0,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&method, "method", "", "")
			fs.StringVar(&jwtToken, "jwt", "", "")
			fs.StringVar(&jwtFile, "jwt-file", "", "")
			fs.StringVar(&callback, "oidc-callback-addr", "127.0.0.1:4649", "")
			fs.StringVar(&tokenFile, "token-file", "", "")
			fs.DurationVar(&timeout, "timeout", 5*time.Minute, "")
		},
		check: func([]string) error {
			if jwtToken != "" && jwtFile != "" {
				return errors.New("give -jwt or -jwt-file, not both")
			}
			return nil
		},
		help: `Usage: nops login [options]

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
`,
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			var (
				tok *structs.ACLTokenView
				err error
			)
			if jwtFile != "" {
				raw, rerr := os.ReadFile(jwtFile)
				if rerr != nil {
					return nil, nil, fmt.Errorf("read -jwt-file: %w", rerr)
				}
				jwtToken = strings.TrimSpace(string(raw))
			}
			if jwtToken != "" {
				tok, err = api.JWTLogin(ctx, method, jwtToken)
			} else {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				tok, err = m.oidcLogin(ctx, api, method, callback)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("login: %w", err)
			}
			if tokenFile != "" {
				if err := os.WriteFile(tokenFile, []byte(tok.SecretID+"\n"), 0o600); err != nil {
					return nil, nil, fmt.Errorf("write -token-file: %w", err)
				}
			}
			return tok, func() {
				m.printToken(tok)
				fmt.Fprintf(m.stdout, "\nUse it with: export %s=%s\n", EnvToken, tok.SecretID)
			}, nil
		}})
	return cmds
}

func (m *runner) randomURLString(n int) (string, error) {
	src := m.random
	if src == nil {
		src = rand.Reader
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(src, b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

const (
	// oidcRandomBytes is the entropy of the login's nonce and PKCE
	// verifier: 256 bits, as RFC 7636 recommends for the verifier.
	oidcRandomBytes = 32
	// callbackHeaderTimeout bounds the wait for the browser's callback
	// request headers, which it sends at once.
	callbackHeaderTimeout = 10 * time.Second
)

// oidcLogin runs the OIDC authorization code flow with PKCE: a local
// callback server, the login URL printed for the browser, and the
// exchange of the code the browser brings back. The callback's state must
// be the one the server gave.
func (m *runner) oidcLogin(ctx context.Context, api *client.Client, method, addr string) (*structs.ACLTokenView, error) {
	nonce, err := m.randomURLString(oidcRandomBytes)
	if err != nil {
		return nil, err
	}
	verifier, err := m.randomURLString(oidcRandomBytes)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(verifier))
	challenge := base64.RawURLEncoding.EncodeToString(sum[:])
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the OIDC callback on %s: %w", addr, err)
	}
	defer ln.Close()
	redirect := "http://" + ln.Addr().String() + "/oidc/callback"
	au, err := api.OIDCAuthURL(ctx, &structs.ACLOIDCAuthURLRequest{AuthMethod: method, RedirectURI: redirect, ClientNonce: nonce, CodeChallenge: challenge})
	if err != nil {
		return nil, err
	}
	type result struct{ code, state, err string }
	got := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: callbackHeaderTimeout, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/oidc/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		res := result{code: q.Get("code"), state: q.Get("state"), err: q.Get("error")}
		msg := "Login complete: you may close this window and return to the terminal."
		if res.err != "" {
			msg = "Login failed: " + res.err
		}
		fmt.Fprintf(w, "<!doctype html><title>Nops login</title><p>%s</p>", html.EscapeString(msg))
		select {
		case got <- res:
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Fprintf(m.stderr, "Complete the login in your browser:\n\n    %s\n\nWaiting for the callback on %s ...\n", au.AuthURL, redirect)
	var res result
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("no OIDC callback: %w", ctx.Err())
	case res = <-got:
	}
	if res.err != "" {
		return nil, fmt.Errorf("the identity provider refused the login: %s", res.err)
	}
	if res.state != au.State {
		return nil, errors.New("the OIDC callback's state does not match the login's: refusing it")
	}
	return api.OIDCCompleteAuth(ctx, &structs.ACLOIDCCompleteAuthRequest{AuthMethod: method, RedirectURI: redirect,
		ClientNonce: nonce, State: res.state, Code: res.code, CodeVerifier: verifier})
}
