package testutil

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestSyncBuffer_ConcurrentWritesAndReads writes lines from many goroutines
// while another reads: every line arrives whole. Run with -race.
func TestSyncBuffer_ConcurrentWritesAndReads(t *testing.T) {
	t.Parallel()
	var b SyncBuffer
	const writers, lines = 8, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			select {
			case <-stop:
				return
			default:
				_ = b.String()
			}
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				fmt.Fprintf(&b, "writer %d line %d\n", w, i)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-read

	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	seen := map[string]bool{}
	for _, line := range got {
		var w, i int
		if _, err := fmt.Sscanf(line, "writer %d line %d", &w, &i); err != nil {
			t.Fatalf("line %q is not whole: %v", line, err)
		}
		seen[line] = true
	}
	if len(seen) != writers*lines {
		t.Fatalf("%d distinct lines, want %d", len(seen), writers*lines)
	}
}
