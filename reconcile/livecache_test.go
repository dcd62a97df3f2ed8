package reconcile

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// TestLiveJobsCached_KeptUntilTheStreamReportsAChange: while Nomad's event
// stream is up and reports no job change, the list of live jobs is reused;
// a change of any job (managed or not) makes the next cycle list again,
// and that list waits for the change's index, so that a list made before
// the change became readable is not kept as the new one.
func TestLiveJobsCached_KeptUntilTheStreamReportsAChange(t *testing.T) {
	var lists atomic.Int64
	var lastIndex atomic.Value
	lastIndex.Store("")
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/jobs" {
			lists.Add(1)
			lastIndex.Store(r.URL.Query().Get("index"))
		}
		w.Header().Set("X-Nomad-Index", "100")
		_, _ = w.Write([]byte(`[{"ID":"web","Namespace":"default","JobModifyIndex":7}]`))
	}))
	t.Cleanup(stub.Close)
	nomad, err := nomadx.New(nomadx.Config{Address: stub.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{DriftInterval: time.Minute}, nil, nomad, nil, hclog.NewNullLogger()).Detector()
	m.streamUp = map[string]bool{"default": true}
	ctx := context.Background()

	for range 3 {
		live, _, err := m.liveJobsCached(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s := live["default/web"]; s == nil || s.JobModifyIndex != 7 {
			t.Fatalf("live jobs: %+v", live)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d lists for three cycles with no reported change, want 1", n)
	}

	// A list older than the drift interval is still what Nomad holds
	// while the stream reports no change: it is reused up to the full
	// re-plan interval, and no further.
	m.rules.every.Store(int64(24 * time.Hour))
	m.liveList.at = time.Now().Add(-10 * time.Minute)
	if _, _, err := m.liveJobsCached(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d lists after an idle 10 minutes with no reported change, want 1", n)
	}
	m.liveList.at = time.Now().Add(-25 * time.Hour)
	if _, _, err := m.liveJobsCached(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 2 {
		t.Fatalf("%d lists once the kept list is older than the full re-plan interval, want 2", n)
	}
	// With the re-plan off, the drift interval bounds it.
	m.rules.every.Store(0)
	m.liveList.at = time.Now().Add(-2 * time.Minute)
	if _, _, err := m.liveJobsCached(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 3 {
		t.Fatalf("%d lists with the re-plan off and a list older than the drift interval, want 3", n)
	}

	m.jobsChanged(42)
	if _, _, err := m.liveJobsCached(ctx); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 4 {
		t.Fatalf("%d lists after a reported change, want 4", n)
	}
	// A blocking query waits for an index above the one it names.
	if got := lastIndex.Load().(string); got != "41" {
		t.Fatalf("the list after a change at index 42 asked for what is past index %q, want 41", got)
	}

	m.setStreaming("default", false)
	for range 2 {
		if _, _, err := m.liveJobsCached(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := lists.Load(); n != 6 {
		t.Fatalf("%d lists, want 6: with the stream down every cycle lists", n)
	}
}
