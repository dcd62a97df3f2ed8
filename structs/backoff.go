package structs

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is the wait between the attempts of a retried operation: Min
// before the first retry, doubling on each one up to Max. With Jitter
// (0 to 1) each wait is spread at random by up to that fraction of itself,
// either way. Max is at least Min. The zero value never waits. A Backoff is not safe for
// concurrent use.
type Backoff struct {
	Min, Max time.Duration
	Jitter   float64
	attempt  int
}

// Next returns the wait before the next attempt, and counts it.
func (b *Backoff) Next() time.Duration {
	b.attempt++
	return b.Delay(b.attempt)
}

// Reset starts the waits over from Min, as after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Delay returns the wait before retry number n (from 1), without counting
// it: Min·2ⁿ⁻¹ capped at Max, spread by Jitter; 0 for n below 1.
func (b *Backoff) Delay(n int) time.Duration {
	d := b.Min
	if n < 1 || d <= 0 {
		return 0
	}
	for i := 1; i < n && d < b.Max; i++ {
		d = min(2*d, b.Max)
	}
	if b.Jitter > 0 {
		d += time.Duration((2*rand.Float64() - 1) * b.Jitter * float64(d))
	}
	return d
}

// Sleep waits d, as between the attempts of a Backoff, and reports true;
// it reports false as soon as ctx is done.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
