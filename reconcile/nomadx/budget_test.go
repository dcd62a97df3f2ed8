package nomadx

import "testing"

func TestBudget_GrantsItsRateAtOnceThenDefers(t *testing.T) {
	b := NewBudget(5)
	granted := 0
	for range 20 {
		if b.Take(1) {
			granted++
		}
	}
	// The burst is one second's worth; a little refill may come in while
	// the loop runs, never a second's.
	if granted < 5 || granted > 6 {
		t.Fatalf("granted %d of 20 at once, want the rate of 5", granted)
	}
	if b.Take(5) {
		t.Fatal("a budget just emptied granted 5 more at once")
	}
}

func TestBudget_SetRate(t *testing.T) {
	b := NewBudget(DefaultReplanRate)
	if b.Rate() != DefaultReplanRate {
		t.Fatalf("rate %d, want %d", b.Rate(), DefaultReplanRate)
	}
	b.SetRate(0)
	if b.Rate() != 1 {
		t.Fatalf("rate %d after SetRate(0), want the minimum of 1", b.Rate())
	}
	b.SetRate(50)
	if b.Rate() != 50 {
		t.Fatalf("rate %d, want 50", b.Rate())
	}
	if b.Take(51) {
		t.Fatal("granted more than the burst of one second's worth at once")
	}
}
