package command

import "testing"

// TestMemProfileRate: a server samples its allocations for the heap
// profile only when it serves the profile (enable_debug).
func TestMemProfileRate(t *testing.T) {
	if got := memProfileRate(false); got != 0 {
		t.Errorf("without enable_debug: rate %d, want 0 (no sampling)", got)
	}
	if got := memProfileRate(true); got != 512*1024 {
		t.Errorf("with enable_debug: rate %d, want Go's default 524288", got)
	}
}
