package agent_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// openMonitor opens a log stream on s and returns its lines.
func openMonitor(t *testing.T, s *nopstest.Server, query string) (<-chan string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/agent/monitor?"+query, nil)
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("monitor %s: %d %s", query, resp.StatusCode, raw)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	return lines, cancel
}

// waitLine logs with logf until a line containing want arrives, and
// returns every line seen until then.
func waitLine(t *testing.T, lines <-chan string, want string, logf func()) []string {
	t.Helper()
	var seen []string
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stream ended before %q; saw:\n%s", want, strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, want) {
				return seen
			}
		case <-tick.C:
			logf()
		case <-deadline:
			t.Fatalf("no line with %q; saw:\n%s", want, strings.Join(seen, "\n"))
		}
	}
}

// A monitor asked of one server streams another server's logs at the
// level asked (debug, below the level the server logs at), with its
// secrets redacted.
func TestMonitor_StreamsAnotherServerAtItsLevel(t *testing.T) {
	const secret = "planted-nomad-token-7d1c"
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.NomadToken = secret
	}))
	target, via := c.Server(0), c.Server(2)
	lines, stop := openMonitor(t, via, "log_level=debug&server="+target.Config().NodeName)
	defer stop()
	seen := waitLine(t, lines, "planted debug line", func() {
		target.Logger().Debug("planted debug line", "token", secret)
	})
	if !strings.Contains(seen[0], "streaming the logs of "+target.Config().NodeName) {
		t.Errorf("first line %q does not name the target server", seen[0])
	}
	for _, l := range seen {
		if strings.Contains(l, secret) {
			t.Fatalf("the secret was streamed: %q", l)
		}
	}
	if last := seen[len(seen)-1]; !strings.Contains(last, "[redacted]") {
		t.Errorf("line %q does not show the redaction", last)
	}

	// At info, the debug lines are not streamed.
	info, stopInfo := openMonitor(t, target, "log_level=info")
	defer stopInfo()
	seen = waitLine(t, info, "planted info line", func() {
		target.Logger().Debug("quiet debug line")
		target.Logger().Info("planted info line")
	})
	for _, l := range seen {
		if strings.Contains(l, "quiet debug line") {
			t.Fatalf("an info monitor streamed a debug line: %q", l)
		}
	}
}

// A client that does not read cannot slow the server: its lines are
// dropped, and it is told how many.
func TestMonitor_SlowClientNeverBlocksTheServer(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/agent/monitor?log_level=debug", nil)
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The client reads nothing while the server logs 200,000 lines of 1 KiB.
	payload := strings.Repeat("x", 1024)
	start := time.Now()
	for i := 0; i < 200000; i++ {
		s.Logger().Debug("flood", "i", i, "payload", payload)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("logging 200,000 lines with a stalled monitor took %s", took)
	}
	done := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "log lines dropped") {
				done <- sc.Text()
				return
			}
		}
		close(done)
	}()
	select {
	case l, ok := <-done:
		if !ok {
			t.Fatal("the stream ended without saying lines were dropped")
		}
		t.Logf("%s (logging took %s)", l, time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("the stream never said lines were dropped")
	}
}

func TestMonitor_BadRequests(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/v1/agent/monitor?log_level=loud", 400, "log_level"},
		{"/v1/agent/monitor?server=nosuchserver", 404, "nosuchserver"},
		{"/v1/agent/debug/nosuchitem", 404, "no debug item"},
		{"/v1/agent/debug/heap", 404, "enable_debug"},
		{"/v1/agent/debug/goroutine?server=nosuchserver", 404, "nosuchserver"},
		{"/debug/pprof/", 404, "enable_debug"},
		{"/debug/pprof/goroutine", 404, "enable_debug"},
	} {
		code, body := s.Do(http.MethodGet, tc.path, nil, nil)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %s, want %d naming %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	// A forwarded request that names another server is refused: never two
	// hops.
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/v1/agent/debug/self?server=other", nil)
	req.Header.Set("X-Nops-Forwarded", "someone")
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a forwarded request naming another server: %d", resp.StatusCode)
	}
	// At most 16 monitors at once.
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for i := 0; i < 16; i++ {
		_, stop := openMonitor(t, s, "log_level=info")
		stops = append(stops, stop)
	}
	code, body := s.Do(http.MethodGet, "/v1/agent/monitor", nil, nil)
	if code != http.StatusTooManyRequests {
		t.Errorf("17th monitor: %d %s", code, body)
	}
}

// With enable_debug, /debug/pprof serves the profiler, but not the
// command line, which can hold -encrypt or -nomad-token.
func TestDebug_PprofWhenEnabled(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) { cfg.EnableDebug = true }))
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
		code, body := s.Do(http.MethodGet, path, nil, nil)
		if code != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: %d %.200s", path, code, body)
		}
	}
	if code, body := s.Do(http.MethodGet, "/debug/pprof/cmdline", nil, nil); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/cmdline: %d %.200s; want 404", code, body)
	}
	if code, body := s.Do(http.MethodGet, "/v1/agent/debug/goroutine", nil, nil); code != 200 || !strings.Contains(body, "goroutine ") {
		t.Errorf("goroutine item: %d %.200s", code, body)
	}
}
