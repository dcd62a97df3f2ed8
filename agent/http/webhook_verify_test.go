package agenthttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/nops-dev/nops/structs"
)

// TestVerifyPush: the agent hands the reconcilers a push only once its
// signature matches, and says which check refused one.
func TestVerifyPush(t *testing.T) {
	const secret = "webhook-secret"
	body := []byte(`{"ref":"refs/heads/main","after":"0123abcd","repository":{"clone_url":"https://git.example/o/r.git","ssh_url":"git@git.example:o/r.git"}}`)
	sign := func(b []byte) string {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(b)
		return "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}
	signed := http.Header{}
	signed.Set("X-Hub-Signature-256", sign(body))
	signed.Set("X-GitHub-Delivery", "d-1")

	got, err := verifyPush(signed, body, secret)
	if err != nil {
		t.Fatalf("a signed push: %v", err)
	}
	want := &structs.Push{URLs: []string{"https://git.example/o/r.git", "git@git.example:o/r.git"}, Branch: "main",
		After: "0123abcd", Provider: "github", Delivery: "d-1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("push %+v, want %+v", got, want)
	}

	forged := http.Header{}
	forged.Set("X-Hub-Signature-256", sign([]byte("another body")))
	tag := []byte(`{"ref":"refs/tags/v1","repository":{"clone_url":"https://git.example/o/r.git"}}`)
	tagged := http.Header{}
	tagged.Set("X-Hub-Signature-256", sign(tag))
	for _, c := range []struct {
		name   string
		h      http.Header
		body   []byte
		secret string
		want   error
	}{
		{"no secret configured", signed, body, "", structs.ErrNotFound},
		{"forged signature", forged, body, secret, structs.ErrUnauthorized},
		{"no signature", http.Header{}, body, secret, structs.ErrUnauthorized},
		{"a tag, not a branch", tagged, tag, secret, structs.ErrInvalid},
	} {
		p, err := verifyPush(c.h, c.body, c.secret)
		if !errors.Is(err, c.want) || p != nil {
			t.Fatalf("%s: push %+v, error %v, want %v", c.name, p, err, c.want)
		}
	}
}
