//go:build unix

package command

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
)

// nops serve raises its GOGC above 100 while it allocates heavily and its
// live heap is small (the default gc_min_heap, agent/gctune), and gives
// GOGC back once the load is over; -gc-min-heap 0 leaves GOGC at the 100
// of its environment, under load too: the Go collector's own gauge says
// which.
func TestServe_GCMinHeapRaisesGOGCUnderLoad(t *testing.T) {
	if v := os.Getenv("GOGC"); v != "" {
		// The server inherits it; CI sets none.
		t.Skipf("GOGC=%s is set: this test needs the runtime's default", v)
	}
	for _, c := range []struct {
		name  string
		extra []string
		want  func(int) bool
		says  string
	}{
		{"default", nil, func(p int) bool { return p > 100 }, "above 100"},
		{"off", []string{"-gc-min-heap", "0"}, func(p int) bool { return p == 100 }, "100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, port := startServe(t, t.TempDir(), "gc", c.extra...)
			url := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
			// The load: the metrics page, read back to back by four
			// clients, which has the server allocate tens of MB a
			// second.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := gogcPercent(url); err != nil {
							time.Sleep(10 * time.Millisecond)
						}
					}
				}()
			}
			ended := false
			endLoad := func() {
				if !ended {
					ended = true
					close(stop)
					wg.Wait()
				}
			}
			defer endLoad()
			waitPercent(t, url, 30*time.Second, c.want, c.says)
			if c.name == "off" {
				// It is still 100 two seconds later.
				time.Sleep(2 * time.Second)
				if n, err := gogcPercent(url); err != nil || n != 100 {
					t.Fatalf("go_gc_gogc_percent with -gc-min-heap 0 under load became %d (%v)", n, err)
				}
				return
			}
			// Once the load is over, the floor goes with it (after
			// the tuner's quiet window of 30s).
			endLoad()
			waitPercent(t, url, time.Minute, func(p int) bool { return p == 100 }, "100 once idle")
		})
	}
}

var gogcGauge = regexp.MustCompile(`(?m)^go_gc_gogc_percent (\d+)$`)

// gogcPercent reads the server's go_gc_gogc_percent.
func gogcPercent(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := gogcGauge.FindSubmatch(raw)
	if m == nil {
		return 0, fmt.Errorf("no go_gc_gogc_percent in /metrics (%d)", resp.StatusCode)
	}
	return strconv.Atoi(string(m[1]))
}

// waitPercent waits until the server's GOGC satisfies want.
func waitPercent(t *testing.T, url string, timeout time.Duration, want func(int) bool, says string) {
	t.Helper()
	start := time.Now()
	testutil.WaitForResult(t, timeout, func() (bool, error) {
		n, err := gogcPercent(url)
		if err != nil {
			return false, err
		}
		return want(n), fmt.Errorf("go_gc_gogc_percent = %d, want %s", n, says)
	})
	t.Logf("go_gc_gogc_percent %s after %s", says, time.Since(start).Round(100*time.Millisecond))
}
