package agenthttp

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOIDCLoginsExpireAndAreBounded: a state is refused once its login
// expired, and past maxPendingOIDCLogins a new login is refused until the
// expired ones are dropped.
func TestOIDCLoginsExpireAndAreBounded(t *testing.T) {
	var l oidcLogins
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	login := oidcLogin{method: "corp", redirect: "http://127.0.0.1/cb", nonce: "n", challenge: "c", expires: now.Add(oidcRequestExpiry)}
	if err := l.begin("st_1", login, now); err != nil {
		t.Fatal(err)
	}
	if err := l.check("st_1", login, now.Add(oidcRequestExpiry)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired state: %v", err)
	}
	for i := range maxPendingOIDCLogins {
		if err := l.begin("st_"+strconv.Itoa(i), login, now); err != nil {
			t.Fatalf("login %d: %v", i, err)
		}
	}
	if err := l.begin("st_full", login, now); err == nil || !strings.Contains(err.Error(), "too many OIDC logins") {
		t.Fatalf("a login past the bound: %v", err)
	}
	later := now.Add(oidcRequestExpiry)
	fresh := login
	fresh.expires = later.Add(oidcRequestExpiry)
	if err := l.begin("st_later", fresh, later); err != nil {
		t.Fatalf("a login once the others expired: %v", err)
	}
	if len(l.pending) != 1 {
		t.Fatalf("%d logins pending, want 1", len(l.pending))
	}
	if err := l.check("st_later", login, later); err != nil {
		t.Fatal(err)
	}
	if err := l.consume("st_later"); err != nil {
		t.Fatal(err)
	}
	if err := l.consume("st_later"); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("a second login with one state: %v", err)
	}
}
