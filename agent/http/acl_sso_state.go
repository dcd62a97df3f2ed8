package agenthttp

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// maxPendingOIDCLogins bounds the OIDC logins begun and not completed:
// past it, a new auth URL is refused until older ones expire. A login
// takes a few hundred bytes.
const maxPendingOIDCLogins = 10000

// oidcLogins holds the OIDC logins begun on this server, the leader: the
// state each auth URL was issued with, bound to the auth method, redirect
// URI, client nonce and PKCE challenge it was issued for. complete-auth
// accepts a state only with the values it was issued for, within
// oidcRequestExpiry of its issue, and for one successful login; a state this server did not issue (a
// forged one, or one from before a leader change) is refused.
type oidcLogins struct {
	mu      sync.Mutex
	pending map[string]oidcLogin
}

// oidcLogin is what an auth URL's state was issued for.
type oidcLogin struct {
	method, redirect, nonce, challenge string
	expires                            time.Time
}

// begin records the login of state, issued at now.
func (l *oidcLogins) begin(state string, login oidcLogin, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) >= maxPendingOIDCLogins {
		l.prune(now)
	}
	if len(l.pending) >= maxPendingOIDCLogins {
		return &HTTPError{Code: http.StatusServiceUnavailable,
			Msg: fmt.Sprintf("too many OIDC logins in progress (%d): retry in a few minutes", maxPendingOIDCLogins)}
	}
	if l.pending == nil {
		l.pending = map[string]oidcLogin{}
	}
	l.pending[state] = login
	return nil
}

// check reports whether state was issued for want and has not expired at
// now. It leaves the login in place: a code the provider refuses may be
// tried again with the same state until the login expires or succeeds.
func (l *oidcLogins) check(state string, want oidcLogin, now time.Time) error {
	l.mu.Lock()
	got, ok := l.pending[state]
	l.mu.Unlock()
	if !ok || !now.Before(got.expires) {
		return errUnauthorized("OIDC login refused: its state was not issued by this cluster's leader, was already used, or expired; start the login again")
	}
	for _, f := range []struct{ name, got, want string }{
		{"auth method", got.method, want.method},
		{"redirect_uri", got.redirect, want.redirect},
		{"client_nonce", got.nonce, want.nonce},
		{"code_verifier", got.challenge, want.challenge},
	} {
		if f.got != f.want {
			return errUnauthorized(fmt.Sprintf("OIDC login refused: its state was issued for another %s", f.name))
		}
	}
	return nil
}

// consume removes the login of state once its code was exchanged, and
// refuses a second login with it (two exchanges that ran at once).
func (l *oidcLogins) consume(state string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[state]; !ok {
		return errUnauthorized("OIDC login refused: its state was already used; start the login again")
	}
	delete(l.pending, state)
	return nil
}

// prune drops the expired logins; l.mu is held.
func (l *oidcLogins) prune(now time.Time) {
	for state, login := range l.pending {
		if !now.Before(login.expires) {
			delete(l.pending, state)
		}
	}
}
