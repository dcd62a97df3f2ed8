package agenthttp

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Read-your-writes. Every answer carries X-Nops-Index, the Raft index of
// the state this server had applied; a write's answer the index its write
// was applied at, or later.
//
//   - A write that a follower forwards is answered only once the follower
//     itself has applied the index the leader answered with (at most
//     forwardApplyWait): any later read through the same follower sees
//     the write. Past the wait the answer goes out anyway, with
//     X-Nops-Warning: the write is committed, only this server is behind.
//   - A read that carries X-Nops-Min-Index: N waits until the server that
//     answers it has applied N (at most minIndexWait), for a client that
//     wrote through one server and reads through another; past the wait
//     it answers 503 naming the index it has and the one asked.
const (
	headerMinIndex = "X-Nops-Min-Index"
	headerWarning  = "X-Nops-Warning"

	// forwardApplyWait bounds a follower's wait to apply a write it
	// forwarded: the leader tells it the commit within its commit timeout
	// (50 to 100 ms), so more is a follower that lags.
	forwardApplyWait = 2 * time.Second
	// minIndexWait bounds a read's wait for X-Nops-Min-Index.
	minIndexWait = 5 * time.Second
)

// waitApplied waits until this server has applied index, at most d or
// until ctx ends, and returns the index it has applied and whether that
// reaches index. It holds no goroutine but its caller's.
func (a *apiBase) waitApplied(ctx context.Context, index uint64, d time.Duration) (uint64, bool) {
	if got := a.s.State().LatestIndex(); got >= index {
		return got, true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		// A snapshot restore replaces the store, after closing the old
		// one's Changed: the store is looked up again each time.
		st := a.s.State()
		changed := st.Changed()
		if got := st.LatestIndex(); got >= index {
			return got, true
		}
		select {
		case <-changed:
		case <-timer.C:
			return a.s.State().LatestIndex(), false
		case <-ctx.Done():
			return a.s.State().LatestIndex(), false
		}
	}
}

// minIndex is the X-Nops-Min-Index of r, 0 when it has none.
func minIndex(r *http.Request) (uint64, error) {
	v := strings.TrimSpace(r.Header.Get(headerMinIndex))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, badRequest(fmt.Sprintf("%s: %q is not a Raft index (a whole number from X-Nops-Index)", headerMinIndex, v))
	}
	return n, nil
}

// awaitMinIndex holds a read until this server has applied the index its
// X-Nops-Min-Index asks for; an error is the answer instead.
func (a *apiBase) awaitMinIndex(r *http.Request) error {
	want, err := minIndex(r)
	if err != nil || want == 0 {
		return err
	}
	got, ok := a.waitApplied(r.Context(), want, minIndexWait)
	if ok {
		return nil
	}
	if r.Context().Err() != nil {
		return &HTTPError{Code: http.StatusServiceUnavailable,
			Msg: fmt.Sprintf("request ended while this server waited to apply index %d (%s); it has applied %d", want, headerMinIndex, got)}
	}
	return &HTTPError{Code: http.StatusServiceUnavailable,
		Msg: fmt.Sprintf("this server has applied Raft index %d, not yet index %d that %s asks for (waited %s): "+
			"it lags the leader or the index is not written yet; retry, or read with ?consistent", got, want, headerMinIndex, minIndexWait)}
}

// awaitForwardedWrite holds the answer of a write this follower forwarded
// until it has applied the index the leader answered with; past
// forwardApplyWait it sets X-Nops-Warning in the answer's header h.
func (f *forwarder) awaitForwardedWrite(r *http.Request, status int, h http.Header) {
	if !stateChanging(r.Method) || status/100 != 2 {
		return
	}
	want, err := strconv.ParseUint(h.Get(headerIndex), 10, 64)
	if err != nil || want == 0 {
		return
	}
	if got, ok := f.api.waitApplied(r.Context(), want, forwardApplyWait); !ok {
		h.Set(headerWarning, fmt.Sprintf("the write is committed at index %d, but this server has applied only %d: "+
			"a read from it may not show the write yet (send %s: %d)", want, got, headerMinIndex, want))
	}
}
