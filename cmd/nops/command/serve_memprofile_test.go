package command

import "testing"

// TestMemProfileRate: a server samples its allocations for the heap
// profile only when it serves the profile (enable_debug), and then at the
// rate the process had (Go's default, or GODEBUG=memprofilerate's).
func TestMemProfileRate(t *testing.T) {
	if got := memProfileRate(false, 512*1024); got != 0 {
		t.Errorf("without enable_debug: rate %d, want 0 (no sampling)", got)
	}
	if got := memProfileRate(true, 512*1024); got != 512*1024 {
		t.Errorf("with enable_debug: rate %d, want Go's default 524288", got)
	}
	if got := memProfileRate(true, 4096); got != 4096 {
		t.Errorf("with enable_debug and GODEBUG=memprofilerate=4096: rate %d, want 4096", got)
	}
}
