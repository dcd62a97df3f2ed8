//go:build unix

package command

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
)

// nops serve raises its GOGC above 100 while its live heap is small (the
// default gc_min_heap, agent/gctune), and -gc-min-heap 0 leaves GOGC at
// the 100 of its environment: the Go collector's own gauge says which.
func TestServe_GCMinHeapRaisesGOGC(t *testing.T) {
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
			gauge := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\d+)$`)
			var last string
			testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
				resp, err := http.Get(url)
				if err != nil {
					return false, err
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				m := gauge.FindSubmatch(raw)
				if m == nil {
					return false, fmt.Errorf("no go_gc_gogc_percent in /metrics (%d)", resp.StatusCode)
				}
				last = string(m[1])
				n, _ := strconv.Atoi(last)
				return c.want(n), fmt.Errorf("go_gc_gogc_percent = %d, want %s", n, c.says)
			})
			if c.name == "off" {
				// It is still 100 two seconds later.
				time.Sleep(2 * time.Second)
				resp, err := http.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if m := gauge.FindSubmatch(raw); m == nil || string(m[1]) != "100" {
					t.Fatalf("go_gc_gogc_percent with -gc-min-heap 0 became %q", m)
				}
			}
			t.Logf("go_gc_gogc_percent = %s", last)
		})
	}
}
