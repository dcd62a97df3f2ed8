package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

const (
	// pollMinInterval and pollMaxInterval bound the interval between two
	// checks of a condition: polling starts fast so that a quick condition
	// costs little, and backs off so that a slow one does not burn CPU.
	pollMinInterval = 10 * time.Millisecond
	pollMaxInterval = 250 * time.Millisecond
)

// errConditionNotMet is reported on a timeout when the condition never
// returned an error of its own.
var errConditionNotMet = errors.New("condition not met")

// WaitForResult calls fn until it returns true, and fails the test with the
// last error fn returned if that does not happen within timeout. fn returns
// (false, err) to say "not yet, because err"; the error is only reported, it
// does not stop the polling.
func WaitForResult(t testing.TB, timeout time.Duration, fn func() (bool, error)) {
	t.Helper()
	if err := poll(context.Background(), timeout, fn); err != nil {
		t.Fatalf("testutil: %v", err)
	}
}

// WaitForListen waits until addr ("host:port") accepts TCP connections.
func WaitForListen(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	WaitForResult(t, timeout, func() (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false, err
		}
		_ = conn.Close()
		return true, nil
	})
}

// WaitForHTTPStatus waits until a GET of url answers with status want.
func WaitForHTTPStatus(t testing.TB, url string, want int, timeout time.Duration) {
	t.Helper()
	// Each try is short, so a hung server is tried again within timeout.
	client := &http.Client{Timeout: 5 * time.Second}
	WaitForResult(t, timeout, func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			return false, fmt.Errorf("GET %s: status %d, want %d", url, resp.StatusCode, want)
		}
		return true, nil
	})
}

// poll calls fn until it returns true, ctx ends or timeout passes. It
// returns nil on success, and otherwise an error that wraps the last error
// fn returned (or errConditionNotMet).
func poll(ctx context.Context, timeout time.Duration, fn func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	start := time.Now()
	interval := pollMinInterval
	timer := time.NewTimer(0)
	defer timer.Stop()

	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return pollError(ctx, start, lastErr)
		case <-timer.C:
		}

		ok, err := fn()
		if ok {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		if ctx.Err() != nil {
			return pollError(ctx, start, lastErr)
		}

		timer.Reset(interval)
		interval = min(2*interval, pollMaxInterval)
	}
}

// pollError explains why poll stopped: the deadline passed (reported with
// the last error of the condition), or the context was canceled with a cause
// (reported alone: it is why the condition can never be met).
func pollError(ctx context.Context, start time.Time, lastErr error) error {
	elapsed := time.Since(start).Round(time.Millisecond)
	if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("gave up after %s: %w", elapsed, cause)
	}
	if lastErr == nil {
		lastErr = errConditionNotMet
	}
	return fmt.Errorf("timed out after %s: %w", elapsed, lastErr)
}
