package nomadx

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// DefaultReplanRate is the default of Budget's rate: Nomad requests per
// second the periodic re-plan of unchanged jobs may make.
const DefaultReplanRate = 20

// Budget is a token bucket for requests that can wait for a later cycle,
// such as the periodic re-plan of jobs that changed neither in git nor in
// Nomad. Its rate is requests per second and its burst one second's worth:
// it never grants more than its rate at once, and over a window of a few
// seconds or more it grants its rate a second. Taking is never blocking: a caller without a
// token defers the request, so a request that cannot wait (a changed job)
// is never queued behind the ones that can. Requests made without Take
// do not consume the budget. It is safe for concurrent use.
type Budget struct {
	l *rate.Limiter
}

// NewBudget returns a budget of perSecond requests a second; perSecond
// must be at least 1.
func NewBudget(perSecond int) *Budget {
	perSecond = max(perSecond, 1)
	return &Budget{l: rate.NewLimiter(rate.Limit(perSecond), perSecond)}
}

// SetRate changes the rate (at least 1 a second) of a budget in use.
func (b *Budget) SetRate(perSecond int) {
	perSecond = max(perSecond, 1)
	b.l.SetBurst(perSecond)
	b.l.SetLimit(rate.Limit(perSecond))
}

// Rate returns the budget's requests per second.
func (b *Budget) Rate() int {
	r := float64(b.l.Limit())
	if math.IsInf(r, 1) {
		return math.MaxInt
	}
	return int(r)
}

// Take takes n requests' tokens if they are left now, and reports whether
// it did; it takes nothing when it reports false.
func (b *Budget) Take(n int) bool { return b.l.AllowN(time.Now(), n) }
