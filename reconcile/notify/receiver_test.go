package notify_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/nops-dev/nops/reconcile/notify"
)

// received is one request a test receiver got.
type received struct {
	Key      string
	SigOK    bool
	Payload  notify.WebhookPayload
	Answered int
}

// receiver is a real HTTP server that records every webhook delivery and
// answers with the status answer returns for the n'th request (from 1).
type receiver struct {
	t      testing.TB
	srv    *httptest.Server
	secret string

	mu     sync.Mutex
	got    []received
	answer func(n int, p *notify.WebhookPayload) int
}

func newReceiver(t testing.TB, secret string, answer func(n int, p *notify.WebhookPayload) int) *receiver {
	r := &receiver{t: t, secret: secret, answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var p notify.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	sigOK := r.secret == "" || req.Header.Get(notify.HeaderSignature) == notify.Sign(r.secret, body)
	r.mu.Lock()
	n := len(r.got) + 1
	code := http.StatusOK
	if r.answer != nil {
		code = r.answer(n, &p)
	}
	r.got = append(r.got, received{Key: req.Header.Get(notify.HeaderIdempotency), SigOK: sigOK, Payload: p, Answered: code})
	r.mu.Unlock()
	w.WriteHeader(code)
}

// requests returns a copy of what the receiver got.
func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// accepted returns the requests answered 2xx.
func (r *receiver) accepted() []received {
	var out []received
	for _, g := range r.requests() {
		if g.Answered/100 == 2 {
			out = append(out, g)
		}
	}
	return out
}
