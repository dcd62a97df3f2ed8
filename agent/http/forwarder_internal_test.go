package agenthttp

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestInterruptReadClosesTheConnection: a follower interrupts its read of
// an upload the leader answered before the follower saw the upload's end
// go out. When the body had in fact been read to its end, the deadline it
// sets makes the HTTP server's background read fail and cancel the
// connection's context: a keep-alive request after it would start
// cancelled (a forwarded write answered 503 "request cancelled: context
// canceled" at once, as a CI run saw). The interrupted answer closes its
// connection, and the next request, on a new one, runs.
func TestInterruptReadClosesTheConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PUT" {
			if _, err := io.ReadAll(r.Body); err != nil {
				t.Errorf("read the upload: %v", err)
			}
			interruptRead(w)()
			// The background read meets the deadline before the
			// handler ends, as when the goroutine sending the upload's
			// last frame is slow to return.
			time.Sleep(50 * time.Millisecond)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if err := r.Context().Err(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	client := srv.Client()
	for i := 0; i < 3; i++ {
		req, err := http.NewRequest("PUT", srv.URL, strings.NewReader(strings.Repeat("x", 1000)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !resp.Close {
			t.Fatal("an interrupted upload's answer keeps its connection alive")
		}
		resp, err = client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the request after an interrupted upload: %d %s", resp.StatusCode, body)
		}
	}
}
