package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// rywCall sends one request to s with the headers given and returns the
// status, the answer's headers and body.
func rywCall(t *testing.T, ctx context.Context, hc *http.Client, s *nopstest.Server, method, path, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, s.URL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

func headerIndex(t *testing.T, h http.Header) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(h.Get("X-Nops-Index"), 10, 64)
	if err != nil {
		t.Fatalf("X-Nops-Index %q: %v", h.Get("X-Nops-Index"), err)
	}
	return n
}

// TestReadYourWritesThroughFollower runs on a real three-server cluster
// over TCP: a read through a follower right after a write through it
// waits until that follower has applied the write, so it always shows it
// (200 times); a read with X-Nops-Min-Index through a follower shows a
// write made on the leader; a min index that is never reached answers 503
// naming both indexes after the bounded wait, and neither it nor a client
// that gives up waiting leaves a goroutine behind.
func TestReadYourWritesThroughFollower(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ctx := context.Background()
	const window = `{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`

	t.Run("write then read through the same follower", func(t *testing.T) {
		warned := 0
		for i := range 200 {
			name := fmt.Sprintf("ryw-%d", i)
			code, h, body := rywCall(t, ctx, hc, follower, "PUT", "/v1/window/"+name, window, nil)
			if code != http.StatusOK {
				t.Fatalf("PUT %s through the follower: %d %s", name, code, body)
			}
			wrote := headerIndex(t, h)
			code, h, body = rywCall(t, ctx, hc, follower, "GET", "/v1/window/"+name, "", nil)
			if w := h.Get("X-Nops-Warning"); w != "" {
				// The follower lagged past its wait: the answer says so,
				// and only then may it be stale.
				warned++
				t.Logf("read %d: %s", i, w)
				continue
			}
			if code != http.StatusOK {
				t.Fatalf("read %d through the follower that answered the write (index %d): %d %s: stale", i, wrote, code, body)
			}
			if got := headerIndex(t, h); got < wrote {
				t.Fatalf("read %d answered index %d, before the write's %d", i, got, wrote)
			}
		}
		if warned > 20 {
			t.Fatalf("%d of 200 reads were answered before the follower applied the write before them", warned)
		}
	})

	t.Run("min index header through another server", func(t *testing.T) {
		for i := range 50 {
			name := fmt.Sprintf("hdr-%d", i)
			code, h, body := rywCall(t, ctx, hc, leader, "PUT", "/v1/window/"+name, window, nil)
			if code != http.StatusOK {
				t.Fatalf("PUT %s on the leader: %d %s", name, code, body)
			}
			wrote := headerIndex(t, h)
			code, h, body = rywCall(t, ctx, hc, c.Followers()[i%2], "GET", "/v1/window/"+name, "",
				map[string]string{"X-Nops-Min-Index": strconv.FormatUint(wrote, 10)})
			if code != http.StatusOK || headerIndex(t, h) < wrote {
				t.Fatalf("read %d with X-Nops-Min-Index %d through a follower: %d index %s %s", i, wrote, code, h.Get("X-Nops-Index"), body)
			}
		}
	})

	t.Run("bad min index", func(t *testing.T) {
		code, _, body := rywCall(t, ctx, hc, follower, "GET", "/v1/windows", "", map[string]string{"X-Nops-Min-Index": "soon"})
		if code != http.StatusBadRequest || !strings.Contains(body, "X-Nops-Min-Index") {
			t.Fatalf("X-Nops-Min-Index: soon answered %d %s, want 400 naming the header", code, body)
		}
	})

	t.Run("a restore through the follower", func(t *testing.T) {
		a := call(t, leader, "GET", "/v1/operator/snapshot", nil)
		a.ok(t, "snapshot save", nil)
		for i := range 5 {
			if code, _, body := rywCall(t, ctx, hc, follower, "PUT", fmt.Sprintf("/v1/window/after-%d", i), window, nil); code != http.StatusOK {
				t.Fatalf("PUT through the follower: %d %s", code, body)
			}
		}
		before := follower.State()
		call(t, follower, "PUT", "/v1/operator/snapshot", a.body).ok(t, "restore", nil)
		testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
			return follower.State() != before, fmt.Errorf("the follower has not installed the restored state")
		})
		// The writes the restore undid are not waited for: the restored
		// state's index is older than theirs.
		start := time.Now()
		code, h, body := rywCall(t, ctx, hc, follower, "GET", "/v1/window/after-0", "", nil)
		if took := time.Since(start); code != http.StatusNotFound || h.Get("X-Nops-Warning") != "" || took > 1500*time.Millisecond {
			t.Fatalf("a read after the restore: %d in %s, warning %q: %s", code, took, h.Get("X-Nops-Warning"), body)
		}
	})

	t.Run("a min index never reached", func(t *testing.T) {
		before := runtime.NumGoroutine()
		const far = uint64(1) << 60
		start := time.Now()
		code, _, body := rywCall(t, ctx, hc, follower, "GET", "/v1/windows", "", map[string]string{"X-Nops-Min-Index": strconv.FormatUint(far, 10)})
		took := time.Since(start)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, strconv.FormatUint(far, 10)) || !strings.Contains(body, "has applied Raft index") {
			t.Fatalf("a min index far ahead answered %d %s, want 503 naming the index asked and the one applied", code, body)
		}
		if took < 4*time.Second || took > 30*time.Second {
			t.Fatalf("the wait for a min index took %s, want about 5s", took)
		}
		// Clients that give up: the server stops waiting with them.
		done := make(chan struct{})
		for range 10 {
			go func() {
				defer func() { done <- struct{}{} }()
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(cctx, "GET", follower.URL+"/v1/windows", nil)
				req.Header.Set("X-Nops-Min-Index", strconv.FormatUint(far, 10))
				if resp, err := hc.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		for range 10 {
			<-done
		}
		testutil.WaitForResult(t, 3*time.Second, func() (bool, error) {
			if n := runtime.NumGoroutine(); n > before+5 {
				return false, fmt.Errorf("%d goroutines, %d before the waits", n, before)
			}
			return true, nil
		})
	})
}
