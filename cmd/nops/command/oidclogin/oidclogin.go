// Package oidclogin runs the OIDC authorization code flow with PKCE that
// `nops login` uses to get a Nops token from an identity provider: a local
// callback server, the login URL printed for the browser, and the exchange
// of the code the browser brings back for a token.
//
// Guarantees: the nonce and the PKCE verifier carry 256 bits of entropy;
// a callback whose state is not the one the server gave is refused; the
// callback server is closed when the login ends, and the wait for the
// callback ends with the context.
package oidclogin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

const (
	// oidcRandomBytes is the entropy of the login's nonce and PKCE
	// verifier: 256 bits, as RFC 7636 recommends for the verifier.
	oidcRandomBytes = 32
	// callbackHeaderTimeout bounds the wait for the browser's callback
	// request headers, which it sends at once.
	callbackHeaderTimeout = 10 * time.Second
)

// Config is a login.
type Config struct {
	// Method is the name of the OIDC auth method.
	Method string
	// CallbackAddr is the local address the callback server listens on.
	CallbackAddr string
	// Random, when set, replaces crypto/rand for the nonce and the PKCE
	// verifier.
	Random io.Reader
	// Prompt is where the login URL is printed for the user.
	Prompt io.Writer
}

// Login runs the OIDC authorization code flow with PKCE through api: a
// local callback server, the login URL printed for the browser, and the
// exchange of the code the browser brings back. The callback's state must
// be the one the server gave.
func Login(ctx context.Context, api *client.Client, cfg Config) (*structs.ACLTokenView, error) {
	method, addr := cfg.Method, cfg.CallbackAddr
	nonce, err := randomURLString(cfg.Random, oidcRandomBytes)
	if err != nil {
		return nil, err
	}
	verifier, err := randomURLString(cfg.Random, oidcRandomBytes)
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
	au, err := api.ACL().OIDCAuthURL(ctx, &structs.ACLOIDCAuthURLRequest{AuthMethod: method, RedirectURI: redirect, ClientNonce: nonce, CodeChallenge: challenge})
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
	fmt.Fprintf(cfg.Prompt, "Complete the login in your browser:\n\n    %s\n\nWaiting for the callback on %s ...\n", au.AuthURL, redirect)
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
	return api.ACL().OIDCCompleteAuth(ctx, &structs.ACLOIDCCompleteAuthRequest{AuthMethod: method, RedirectURI: redirect,
		ClientNonce: nonce, State: res.state, Code: res.code, CodeVerifier: verifier})
}

// randomURLString returns n bytes of src (crypto/rand when nil), base64url.
func randomURLString(src io.Reader, n int) (string, error) {
	if src == nil {
		src = rand.Reader
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(src, b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
