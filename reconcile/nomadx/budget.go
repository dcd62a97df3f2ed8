package nomadx

import (
	"sync"
	"time"
)

// DefaultReplanRate is the default of Budget's rate: Nomad requests per
// second the periodic re-plan of unchanged jobs may make.
const DefaultReplanRate = 20

// Budget grants requests that can wait for a later cycle, such as the
// periodic re-plan of jobs that changed neither in git nor in Nomad, at
// most its rate in any one second: it remembers when it granted the last
// rate requests (a sliding window of one second), so neither a burst nor
// cycles that come close together exceed it. Taking never blocks: a caller
// without a grant defers the request, so a request that cannot wait (a
// changed job) is never queued behind those that can. Requests made
// without Take do not count. It is safe for concurrent use.
type Budget struct {
	mu sync.Mutex
	// grants holds the times of the last len(grants) grants, the oldest
	// at next; a zero time is a grant never made.
	grants []time.Time
	next   int
	now    func() time.Time
}

// NewBudget returns a budget of perSecond requests a second (at least 1).
func NewBudget(perSecond int) *Budget {
	return &Budget{grants: make([]time.Time, max(perSecond, 1)), now: time.Now}
}

// SetRate changes the rate (at least 1 a second) of a budget in use; the
// grants of the last second still count.
func (b *Budget) SetRate(perSecond int) {
	perSecond = max(perSecond, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	// The old grants, oldest first; the newest of them are kept.
	old := append(append([]time.Time(nil), b.grants[b.next:]...), b.grants[:b.next]...)
	grants := make([]time.Time, perSecond)
	for i := 1; i <= min(len(old), perSecond); i++ {
		grants[perSecond-i] = old[len(old)-i]
	}
	b.grants, b.next = grants, 0
}

// Rate returns the budget's requests a second.
func (b *Budget) Rate() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.grants)
}

// Take grants n requests if the last second's grants leave room for them,
// and reports whether it did; it grants nothing when it reports false. A
// request of more than the rate is granted as the whole second's worth.
func (b *Budget) Take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	rate := len(b.grants)
	n = min(max(n, 1), rate)
	now := b.now()
	// The n oldest grants must all be a second old.
	if now.Sub(b.grants[(b.next+n-1)%rate]) < time.Second {
		return false
	}
	for range n {
		b.grants[b.next] = now
		b.next = (b.next + 1) % rate
	}
	return true
}
