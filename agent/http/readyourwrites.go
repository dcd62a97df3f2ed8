package agenthttp

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nops-dev/nops/fsm"
)

// Read-your-writes. Every answer carries X-Nops-Index, the Raft index of
// the state this server had applied; a write's answer the index its write
// was applied at, or later.
//
//   - A follower remembers the highest index the writes it forwarded were
//     answered with, and a read through it waits until it has applied that
//     index (at most forwardApplyWait): a read through the same follower
//     after a write through it sees the write. Past the wait the read is
//     answered anyway, with X-Nops-Warning. The wait is on the read, not
//     on the write's answer: a follower learns of a commit with the
//     leader's next append, up to 100 ms later (Raft's commit timeout),
//     which would add that to every forwarded write; a read pays it only
//     when it comes that soon after a write.
//   - A read that carries X-Nops-Min-Index: N waits until the server that
//     answers it has applied N (at most minIndexWait), for a client that
//     wrote through one server and reads through another; past the wait
//     it answers 503 naming the index it has and the one asked.
const (
	headerMinIndex = "X-Nops-Min-Index"
	headerWarning  = "X-Nops-Warning"

	// forwardApplyWait bounds a read's wait for the writes this follower
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
// X-Nops-Min-Index asks for and, with forwarded, the writes it forwarded
// (not for a peer's call: a lagging follower answers its stats at once);
// an error is the answer instead.
func (a *apiBase) awaitMinIndex(w http.ResponseWriter, r *http.Request, forwarded bool) error {
	want, err := minIndex(r)
	if err != nil {
		return err
	}
	// The writes forwarded through here, unless the state was replaced
	// since (a snapshot restored, whose index may be lower): past the
	// wait the read is answered, with a warning, as any read of a
	// lagging follower.
	if fwd := a.forwarded.Load(); forwarded && fwd != nil && fwd.store == a.s.State() && fwd.index > want {
		if got, ok := a.waitApplied(r.Context(), fwd.index, forwardApplyWait); !ok && r.Context().Err() == nil {
			w.Header().Set(headerWarning, fmt.Sprintf("this server has applied index %d, not yet %d that a write through it "+
				"was answered with: the answer may not show that write", got, fwd.index))
		}
	}
	if want == 0 {
		return nil
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

// forwardedWrite is the highest index that a write a follower forwarded
// was answered with, and the state store it was answered under.
type forwardedWrite struct {
	index uint64
	store *fsm.StateStore
}

// sawForwardedWrite records the index the leader answered a write this
// follower forwarded with, which later reads through it wait for.
func (f *forwarder) sawForwardedWrite(r *http.Request, status int, h http.Header) {
	if !stateChanging(r.Method) || status/100 != 2 {
		return
	}
	want, err := strconv.ParseUint(h.Get(headerIndex), 10, 64)
	if err != nil {
		return
	}
	next := &forwardedWrite{index: want, store: f.s.State()}
	if isSnapshotPath(r.URL.Path) {
		// A restore: the restored state's index may be lower than those
		// of the writes it undid, which reads no longer wait for.
		f.api.forwarded.Store(next)
		return
	}
	for {
		cur := f.api.forwarded.Load()
		if cur != nil && cur.store == next.store && want <= cur.index {
			return
		}
		if f.api.forwarded.CompareAndSwap(cur, next) {
			return
		}
	}
}
