package nomadx

import (
	"testing"
	"time"
)

// fakeBudget returns a budget on a clock the test moves.
func fakeBudget(perSecond int) (*Budget, *time.Time) {
	now := time.Unix(1_000_000, 0)
	b := NewBudget(perSecond)
	b.now = func() time.Time { return now }
	return b, &now
}

func takeAll(b *Budget, n int) int {
	granted := 0
	for b.Take(n) {
		granted++
	}
	return granted
}

// TestBudget_NeverMoreThanItsRateInOneSecond: whatever the pattern of
// takes, no window of one second holds more grants than the rate.
func TestBudget_NeverMoreThanItsRateInOneSecond(t *testing.T) {
	b, now := fakeBudget(5)
	if got := takeAll(b, 1); got != 5 {
		t.Fatalf("granted %d at once, want the rate of 5", got)
	}
	// Half a second later, nothing: the window still holds 5.
	*now = now.Add(500 * time.Millisecond)
	if b.Take(1) {
		t.Fatal("granted a sixth request within one second")
	}
	// A second after the first grants, the 5 come back, not 10.
	*now = now.Add(500 * time.Millisecond)
	if got := takeAll(b, 1); got != 5 {
		t.Fatalf("granted %d a second later, want 5", got)
	}
	// Grants spread out: 3 now, 2 more 0.6 s later; at 1.1 s only the
	// first 3 have left the window.
	*now = now.Add(time.Second)
	for range 3 {
		b.Take(1)
	}
	*now = now.Add(600 * time.Millisecond)
	if got := takeAll(b, 1); got != 2 {
		t.Fatalf("granted %d, want the 2 left in the window", got)
	}
	*now = now.Add(500 * time.Millisecond)
	if got := takeAll(b, 1); got != 3 {
		t.Fatalf("granted %d, want the 3 that left the window", got)
	}
}

// TestBudget_TakeN: a take of several requests is granted whole or not at
// all, and one larger than the rate takes the whole second's worth.
func TestBudget_TakeN(t *testing.T) {
	b, now := fakeBudget(3)
	if !b.Take(2) || b.Take(2) || !b.Take(1) || b.Take(1) {
		t.Fatal("a budget of 3 did not grant exactly 2 then 1")
	}
	*now = now.Add(time.Second)
	if !b.Take(10) || b.Take(1) {
		t.Fatal("a take larger than the rate was not granted as the whole second's worth")
	}
}

func TestBudget_SetRate(t *testing.T) {
	b, now := fakeBudget(DefaultReplanRate)
	if b.Rate() != DefaultReplanRate {
		t.Fatalf("rate %d, want %d", b.Rate(), DefaultReplanRate)
	}
	b.SetRate(0)
	if b.Rate() != 1 {
		t.Fatalf("rate %d after SetRate(0), want the minimum of 1", b.Rate())
	}
	b.SetRate(4)
	for range 3 {
		b.Take(1)
	}
	// Raised within the same second, the 3 grants still count.
	b.SetRate(5)
	if got := takeAll(b, 1); got != 2 {
		t.Fatalf("granted %d after raising the rate to 5 with 3 granted, want 2", got)
	}
	// Lowered: the window is full.
	b.SetRate(2)
	if b.Take(1) {
		t.Fatal("granted a request over the lowered rate within the second")
	}
	*now = now.Add(time.Second)
	if got := takeAll(b, 1); got != 2 {
		t.Fatalf("granted %d a second later, want the lowered rate of 2", got)
	}
}
