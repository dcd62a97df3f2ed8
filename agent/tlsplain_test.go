package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestPlainHTTPOnTLSPortAnswers400: a plain-HTTP request to the TLS API
// port, of any method, is answered 400 with an error that names the
// https:// address to use; TLS clients are served as before; garbage and
// clients that send nothing or half a request are closed within the
// handshake timeout, and none of it leaves a goroutine behind.
func TestPlainHTTPOnTLSPortAnswers400(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(nopstest.NewTLS(t, ""), true),
		nopstest.WithConfig(func(c *config.Config) { c.HTTPReadTimeout = 2 * time.Second }))
	host := s.HTTPAddr()
	// exchange writes req on a new connection and reads until the server
	// closes it.
	exchange := func(t *testing.T, req string) string {
		t.Helper()
		conn := rawConn(t, s)
		_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(conn)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("read the answer: %v (after %q)", err, got)
		}
		return string(got)
	}
	before := runtime.NumGoroutine()

	big := strings.Repeat("x", 100<<10)
	for _, tc := range []struct{ method, path, extra, body string }{
		{"GET", "/v1/status/leader", "", ""},
		{"HEAD", "/v1/status/leader", "", ""},
		{"DELETE", "/v1/window/w", "", ""},
		{"PATCH", "/v1/acl/token/x", "Content-Type: application/json\r\n", "{}"},
		{"POST", "/v1/job/default/web/pause", "Content-Type: application/json\r\n", big},
		{"OPTIONS", "/v1/agent/self", "", ""},
	} {
		t.Run(tc.method, func(t *testing.T) {
			req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n%s", tc.method, tc.path, host, tc.extra, len(tc.body), tc.body)
			got := exchange(t, req)
			if !strings.HasPrefix(got, "HTTP/1.1 400 ") {
				t.Fatalf("plain %s on the TLS port answered %q, want 400", tc.method, got)
			}
			_, body, _ := strings.Cut(got, "\r\n\r\n")
			var e struct{ Error string }
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("the 400's body %q is not the API's JSON error: %v", body, err)
			}
			want := "https://" + host + tc.path
			if !strings.Contains(e.Error, "HTTP request to an HTTPS server") || !strings.Contains(e.Error, want) {
				t.Fatalf("the 400 says %q, want the https hint %s", e.Error, want)
			}
		})
	}

	t.Run("a Host not fit to repeat", func(t *testing.T) {
		got := exchange(t, "GET /v1/status/leader HTTP/1.1\r\nHost: <script>\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") || strings.Contains(got, "<script>") ||
			!strings.Contains(got, "https://"+host+"/v1/status/leader") {
			t.Fatalf("answer %q: want a 400 naming the server's own address instead of the Host header", got)
		}
	})

	t.Run("TLS still served", func(t *testing.T) {
		resp, err := s.HTTPClient().Get(s.URL + "/v1/status/leader")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.TLS == nil {
			t.Fatalf("GET over TLS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
		}
	})

	t.Run("garbage", func(t *testing.T) {
		for _, junk := range []string{"\x00\x01\x02\x03garbage\r\n\r\n", "lowercase / HTTP/1.1\r\n\r\n", "\x16\x03\x01\x00\x05hello"} {
			if got := exchange(t, junk); strings.HasPrefix(got, "HTTP/") {
				t.Fatalf("%q was answered as HTTP: %q", junk, got)
			}
		}
	})

	t.Run("slow clients are closed", func(t *testing.T) {
		start := time.Now()
		silent := rawConn(t, s)
		half := rawConn(t, s)
		fmt.Fprintf(half, "GET /v1/status/leader HTTP/1.1\r\nHost: %s\r\n", host)
		// The handshake timeout is the read timeout, 2s.
		closedByServer(t, silent, 15*time.Second)
		closedByServer(t, half, 15*time.Second)
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("slow clients held their connections %s", took)
		}
	})

	// Every connection above is closed: the server's goroutines come
	// back to what they were (the TLS client's idle connection aside).
	s.HTTPClient().CloseIdleConnections()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		if n := runtime.NumGoroutine(); n > before+2 {
			return false, fmt.Errorf("%d goroutines, %d before the plain-HTTP requests", n, before)
		}
		return true, nil
	})
}
