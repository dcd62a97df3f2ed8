package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"html"
	"net/http"
	"sort"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// safeNext keeps a post-login target on the dashboard.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}

type loginData struct {
	Next    string
	Error   string
	Expired bool
	// SSO lists the auth methods to log in with; the login page offers
	// none when there is none.
	SSO []LoginMethod
}

// ssoMethods lists the auth methods the login page offers, the default
// one first.
func (u *UI) ssoMethods() []LoginMethod {
	if !u.cfg.ACLs {
		return nil
	}
	list := u.cfg.Backend.LoginMethods()
	sort.SliceStable(list, func(i, j int) bool { return list[i].Default && !list[j].Default })
	return list
}

func (u sessions) loginPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	u.render(w, r, http.StatusOK, "login", "Log in", &loginData{
		Next: safeNext(q.Get("next")), Expired: q.Get("expired") != "", Error: q.Get("error"), SSO: u.ssoMethods(),
	})
}

// login checks a token against the API (GET /v1/acl/token/self, which the
// server answers from its replicated state or, for a token it does not
// know yet, from the leader) and keeps it in the session cookie.
func (u sessions) login(w http.ResponseWriter, r *http.Request) {
	if err := u.checkCSRF(r); err != nil {
		u.fail(w, r, err)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	// One byte over the bound, so that a secret too long is refused, not cut.
	secret := field(r, "token", structs.MaxSecretLen+1)
	fail := func(code int, msg string) {
		u.render(w, r, code, "login", "Log in", &loginData{Next: next, Error: msg, SSO: u.ssoMethods()})
	}
	if !u.cfg.ACLs {
		fail(http.StatusBadRequest, "ACLs are disabled on this cluster: the dashboard needs no login.")
		return
	}
	if secret == "" || len(secret) > structs.MaxSecretLen {
		fail(http.StatusBadRequest, "token: enter the secret ID of an ACL token.")
		return
	}
	self, code, msg := u.tokenSelf(r, secret)
	if self == nil {
		fail(code, "token: "+msg)
		return
	}
	u.startSession(w, r, secret, next)
}

// tokenSelf reads the token a login presents, as the API shows it.
func (u sessions) tokenSelf(r *http.Request, secret string) (*structs.ACLTokenView, int, string) {
	resp, err := u.cfg.Backend.Do(r.Context(), &Viewer{Token: secret}, http.MethodGet, "/v1/acl/token/self", nil)
	if err != nil {
		return nil, http.StatusBadGateway, err.Error()
	}
	var self structs.ACLTokenView
	if err := resp.Decode(&self); err != nil {
		code := resp.Code
		if code < 400 {
			code = http.StatusBadGateway
		}
		return nil, code, err.Error()
	}
	return &self, 0, ""
}

// startSession sets the session cookie, a fresh CSRF token, and sends the
// browser on. It answers with a page that moves on by itself rather than a
// redirect: after the SSO callback (a navigation from the identity
// provider's site) a SameSite=Strict cookie is sent only on a navigation
// that starts on this site.
func (u sessions) startSession(w http.ResponseWriter, r *http.Request, secret, next string) {
	http.SetCookie(w, u.cookie(cookieToken, secret, 0, http.SameSiteStrictMode))
	http.SetCookie(w, u.cookie(cookieCSRF, randomToken(), 0, http.SameSiteStrictMode))
	http.SetCookie(w, u.cookie(cookieOIDC, "", -1, http.SameSiteLaxMode))
	SetHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Refresh", "0; url="+next)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Logged in</title>` +
		`<link rel="stylesheet" href="` + u.asset("app.css") + `"></head><body><main><p>Logged in. <a id="continue" href="` +
		html.EscapeString(next) + `">Continue</a></p></main></body></html>`))
}

func (u sessions) logout(w http.ResponseWriter, r *http.Request) {
	if err := u.checkCSRF(r); err != nil {
		u.fail(w, r, err)
		return
	}
	http.SetCookie(w, u.cookie(cookieToken, "", -1, http.SameSiteStrictMode))
	http.SetCookie(w, u.cookie(cookieCSRF, "", -1, http.SameSiteStrictMode))
	SetHeaders(w.Header())
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// oidcState is what the browser keeps between the SSO start and the
// callback: the client nonce, the PKCE verifier and the state the server
// returned, as `nomad login` keeps them in memory.
type oidcState struct {
	Method   string `json:"m,omitempty"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	State    string `json:"s"`
	Next     string `json:"x"`
}

func (u sessions) redirectURI(r *http.Request) string {
	if u.cfg.UIURL != "" {
		return u.cfg.UIURL + "/ui/oidc/callback"
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/ui/oidc/callback"
}

// ssoStart asks the server for the OIDC auth URL of the auth method (the
// default one unless ?method= names one) and sends the browser there.
func (u sessions) ssoStart(w http.ResponseWriter, r *http.Request) {
	if !u.cfg.ACLs {
		u.Fail(w, r, http.StatusBadRequest, "ACLs are disabled on this cluster: there is nothing to log in to.")
		return
	}
	q := r.URL.Query()
	st := &oidcState{Method: q.Get("method"), Nonce: randomToken(), Verifier: randomToken(), Next: safeNext(q.Get("next"))}
	if len(st.Method) > maxAuthMethodName {
		u.Fail(w, r, http.StatusBadRequest, "method: too long")
		return
	}
	sum := sha256.Sum256([]byte(st.Verifier))
	resp, err := u.cfg.Backend.Do(r.Context(), &Viewer{}, http.MethodPost, "/v1/acl/oidc/auth-url", &structs.ACLOIDCAuthURLRequest{
		AuthMethod: st.Method, RedirectURI: u.redirectURI(r), ClientNonce: st.Nonce,
		CodeChallenge: base64.RawURLEncoding.EncodeToString(sum[:]),
	})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	var au structs.ACLOIDCAuthURLResponse
	if err := resp.Decode(&au); err != nil {
		u.loginError(w, r, err.Error())
		return
	}
	st.State = au.State
	raw, _ := json.Marshal(st)
	// Lax: the callback is a navigation from the provider's site.
	http.SetCookie(w, u.cookie(cookieOIDC, base64.RawURLEncoding.EncodeToString(raw), oidcCookieMaxAge, http.SameSiteLaxMode))
	SetHeaders(w.Header())
	http.Redirect(w, r, au.AuthURL, http.StatusSeeOther)
}

func (u sessions) loginError(w http.ResponseWriter, r *http.Request, msg string) {
	u.render(w, r, http.StatusBadRequest, "login", "Log in", &loginData{Next: "/ui/", Error: "SSO: " + msg, SSO: u.ssoMethods()})
}

// ssoCallback completes the OIDC flow: it checks the state against the
// browser's cookie, exchanges the code for a token through the API and
// starts the session.
func (u sessions) ssoCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c, err := r.Cookie(cookieOIDC)
	if err != nil || len(c.Value) > maxCookie {
		u.loginError(w, r, "no login in progress in this browser (or it took more than 10 minutes); start again")
		return
	}
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	var st oidcState
	if err != nil || json.Unmarshal(raw, &st) != nil || st.State == "" {
		u.loginError(w, r, "the login cookie is damaged; start again")
		return
	}
	if e := q.Get("error"); e != "" {
		u.loginError(w, r, "the identity provider refused: "+e+" "+q.Get("error_description"))
		return
	}
	if subtle.ConstantTimeCompare([]byte(st.State), []byte(q.Get("state"))) != 1 {
		u.loginError(w, r, "the callback's state does not match this browser's login")
		return
	}
	resp, err := u.cfg.Backend.Do(r.Context(), &Viewer{}, http.MethodPost, "/v1/acl/oidc/complete-auth", &structs.ACLOIDCCompleteAuthRequest{
		AuthMethod: st.Method, RedirectURI: u.redirectURI(r), ClientNonce: st.Nonce,
		State: st.State, Code: q.Get("code"), CodeVerifier: st.Verifier,
	})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	var tok structs.ACLTokenView
	err = resp.Decode(&tok)
	if err == nil {
		// The token was made on the leader: the next page, served from
		// this server's state, must know it.
		u.catchUp(r, resp)
	}
	if err != nil || tok.SecretID == "" {
		msg := "no token in the answer"
		if err != nil {
			msg = err.Error()
		}
		u.loginError(w, r, msg)
		return
	}
	u.startSession(w, r, tok.SecretID, safeNext(st.Next))
}
