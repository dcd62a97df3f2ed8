package testutil

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultProxy is an HTTP reverse proxy in front of a Nomad agent that can
// make every request slow or refuse it, as a Nomad cluster behind a slow
// link or one that no longer accepts the token looks to its client. It
// passes streaming answers (Nomad's event stream) on line by line, and
// counts the requests it receives.
//
// A change of mode ends the streams under way, so that the client's next
// stream request meets the new mode too.
type FaultProxy struct {
	// URL is the proxy's address, to give the client in place of Nomad's.
	URL string

	proxy    *httputil.ReverseProxy
	delay    atomic.Int64
	refuse   atomic.Int32
	requests atomic.Uint64

	mu      sync.Mutex
	streams map[int]context.CancelFunc
	next    int
}

// StartFaultProxy starts a proxy in front of the Nomad agent at nomadAddr,
// passing every request on at once until told otherwise; tb's cleanup
// stops it.
func StartFaultProxy(tb testing.TB, nomadAddr string) *FaultProxy {
	tb.Helper()
	target, err := url.Parse(nomadAddr)
	if err != nil {
		tb.Fatalf("fault proxy: Nomad address %q: %v", nomadAddr, err)
	}
	p := &FaultProxy{proxy: httputil.NewSingleHostReverseProxy(target), streams: map[int]context.CancelFunc{}}
	// A negative interval flushes after every write: the event stream's
	// lines reach the client at once.
	p.proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	tb.Cleanup(srv.Close)
	tb.Cleanup(p.cutStreams)
	p.URL = srv.URL
	return p
}

// SetDelay makes every request from now on wait d before it is passed on
// (0: none), and ends the streams under way.
func (p *FaultProxy) SetDelay(d time.Duration) {
	p.delay.Store(int64(d))
	p.cutStreams()
}

// Refuse makes the proxy answer every request from now on with status
// code (Nomad's body for a refused token) instead of passing it on, 0
// passes them on again; it ends the streams under way.
func (p *FaultProxy) Refuse(code int) {
	p.refuse.Store(int32(code))
	p.cutStreams()
}

// Requests returns how many requests the proxy has received.
func (p *FaultProxy) Requests() uint64 { return p.requests.Load() }

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	ctx, cancel := context.WithCancel(r.Context())
	p.mu.Lock()
	id := p.next
	p.next++
	p.streams[id] = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, id)
		p.mu.Unlock()
		cancel()
	}()
	if d := time.Duration(p.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			http.Error(w, "fault proxy: request cancelled during its delay", http.StatusBadGateway)
			return
		case <-t.C:
		}
	}
	if code := int(p.refuse.Load()); code != 0 {
		// Nomad's own words for a token it does not accept.
		http.Error(w, "Permission denied", code)
		return
	}
	p.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// cutStreams ends every request under way (event streams, blocking
// queries, requests waiting out their delay).
func (p *FaultProxy) cutStreams() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.streams {
		cancel()
	}
}
