package agent_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkLogLine_Monitor measures what one debug log line costs the
// server with no monitor, with a monitor whose client reads, and with one
// whose client never reads (its lines are dropped).
func BenchmarkLogLine_Monitor(b *testing.B) {
	s := nopstest.Start(b, "", nopstest.WithoutReconcilers())
	open := func(b *testing.B, read bool) func() {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/agent/monitor?log_level=debug", nil)
		resp, err := s.HTTPClient().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		if read {
			go func() { _, _ = io.Copy(io.Discard, resp.Body) }()
		}
		return func() {
			cancel()
			resp.Body.Close()
		}
	}
	for _, bc := range []struct {
		name          string
		monitor, read bool
	}{{"none", false, false}, {"reading", true, true}, {"stalled", true, false}} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.monitor {
				stop := open(b, bc.read)
				defer stop()
			}
			logger := s.Logger().Named("bench")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				logger.Debug("benchmark line", "i", i, "job", "default/web")
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/line")
		})
	}
}
