package testutil

import (
	"testing"
	"time"
)

// TestPercentile: nearest rank, the lower middle for an even count's
// median, the largest for p = 1, zero for no samples, and the samples
// left as they were.
func TestPercentile(t *testing.T) {
	v := []time.Duration{40, 10, 30, 20}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.01, 10}, {0.25, 10}, {0.5, 20}, {0.75, 30}, {0.99, 40}, {1, 40}} {
		if got := Percentile(v, c.p); got != c.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", v, c.p, got, c.want)
		}
	}
	if got := Median([]int64{3, 1, 2}); got != 2 {
		t.Errorf("Median of 3, 1, 2 = %d, want 2", got)
	}
	if got := Median([]time.Duration(nil)); got != 0 {
		t.Errorf("Median of nothing = %v", got)
	}
	if v[0] != 40 {
		t.Errorf("Percentile sorted its argument: %v", v)
	}
}
