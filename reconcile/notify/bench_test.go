package notify_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// arrivals is a webhook receiver that notes when each key first arrived,
// and can hold every request until released.
type arrivals struct {
	mu   sync.Mutex
	at   map[string]time.Time
	job  map[string]string
	gate chan struct{}
	cond *sync.Cond
}

func newArrivals() *arrivals {
	a := &arrivals{at: map[string]time.Time{}, job: map[string]string{}}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	a.mu.Lock()
	gate := a.gate
	a.mu.Unlock()
	if gate != nil {
		<-gate
		now = time.Now()
	}
	key := r.Header.Get(notify.HeaderIdempotency)
	a.mu.Lock()
	if _, ok := a.at[key]; !ok {
		a.at[key] = now
	}
	a.cond.Broadcast()
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// waitCount waits until n keys arrived, or the timeout.
func (a *arrivals) waitCount(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.at) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d arrived", len(a.at), n)
		}
		a.mu.Unlock()
		time.Sleep(time.Millisecond)
		a.mu.Lock()
	}
	return nil
}

func benchServer(b *testing.B, url string) *nopstest.Server {
	return nopstest.Start(b, "", nopstest.WithoutReconcilers(), withTarget(config.NotifyConfig{
		Name: "bench", Kind: config.NotifyKindWebhook, URL: url, Events: []string{structs.NotifyPaused, structs.NotifyResumed},
	}))
}

func pause(b *testing.B, s *nopstest.Server, job string, resume bool) {
	t, req := structs.PauseRequestType, &structs.PauseRequest{WriteMeta: structs.WriteMeta{Time: time.Now().UTC(), Actor: "bench"},
		Namespace: "default", JobID: job, Reason: "bench"}
	var err error
	if resume {
		_, err = s.Apply(structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: req.WriteMeta, Namespace: "default", JobID: job})
	} else {
		_, err = s.Apply(t, req)
	}
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDeliveryLatency measures the time from a state change committed
// through Raft (a pause) to its notification's arrival at a webhook
// receiver, one change at a time. It reports the median and the 99th
// percentile.
func BenchmarkDeliveryLatency(b *testing.B) {
	rcv := newArrivals()
	srv := httptest.NewServer(rcv)
	b.Cleanup(srv.Close)
	s := benchServer(b, srv.URL)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		pause(b, s, "web", i%2 == 1)
		if err := rcv.waitCount(i+1, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(testutil.Percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(testutil.Percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkThroughput1000 queues 1,000 notifications (pauses of 1,000
// jobs) while the receiver holds every request, then releases it and
// measures how fast the leader delivers the queue and records every
// delivery through Raft.
func BenchmarkThroughput1000(b *testing.B) {
	const queued = 1000
	var rates []float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rcv := newArrivals()
		rcv.gate = make(chan struct{})
		srv := httptest.NewServer(rcv)
		s := benchServer(b, srv.URL)
		for j := 0; j < queued; j++ {
			pause(b, s, fmt.Sprintf("job-%04d", j), false)
		}
		b.StartTimer()
		start := time.Now()
		rcv.mu.Lock()
		close(rcv.gate)
		rcv.gate = nil
		rcv.mu.Unlock()
		if err := rcv.waitCount(queued, time.Minute); err != nil {
			b.Fatal(err)
		}
		testutil.WaitForResult(b, time.Minute, func() (bool, error) {
			p, _, err := s.State().Notifications(fsmPending)
			return err == nil && len(p) == 0, fmt.Errorf("%d pending", len(p))
		})
		elapsed := time.Since(start)
		b.StopTimer()
		rates = append(rates, queued/elapsed.Seconds())
		s.Shutdown()
		srv.Close()
	}
	slices.Sort(rates)
	b.ReportMetric(rates[len(rates)/2], "notifications/s")
}

var fsmPending = fsm.NotificationFilter{State: structs.NotificationPending}
