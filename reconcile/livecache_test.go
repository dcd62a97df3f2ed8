package reconcile

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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
	m := streamingDetector(t, stub.URL)
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

	// A change the kept list cannot be patched with (here, one that
	// names no job) makes the next cycle list everything.
	m.jobsChanged(42, []nomadx.JobChange{{Type: "JobRegistered"}})
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

// TestLiveJobsCached_PatchedWithTheJobsReported: a change of a few jobs the
// stream reports makes the next cycle read those jobs' stubs alone (from
// Nomad's state at the change's index) into a copy of the kept list: a
// job changed, one removed, one added; the map a cycle was given is not
// changed. More changes than maxPatched, or the stream going down, make
// it list everything again.
func TestLiveJobsCached_PatchedWithTheJobsReported(t *testing.T) {
	var lists, reads atomic.Int64
	var mu sync.Mutex
	jobs := map[string]string{
		"web": `{"ID":"web","Namespace":"default","JobModifyIndex":7,"ModifyIndex":7}`,
		"db":  `{"ID":"db","Namespace":"default","JobModifyIndex":8,"ModifyIndex":8}`,
		// web-2 shares web's prefix: a read of web must not take it.
		"web-2": `{"ID":"web-2","Namespace":"default","JobModifyIndex":9,"ModifyIndex":9}`,
	}
	var indexes []string
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/jobs" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		prefix := r.URL.Query().Get("prefix")
		if prefix == "" {
			lists.Add(1)
		} else {
			reads.Add(1)
			indexes = append(indexes, prefix+"@"+r.URL.Query().Get("index"))
		}
		var out []string
		for _, id := range slices.Sorted(maps.Keys(jobs)) {
			if strings.HasPrefix(id, prefix) {
				out = append(out, jobs[id])
			}
		}
		w.Header().Set("X-Nomad-Index", "100")
		_, _ = w.Write([]byte("[" + strings.Join(out, ",") + "]"))
	}))
	t.Cleanup(stub.Close)
	m := streamingDetector(t, stub.URL)
	ctx := context.Background()
	first, _, err := m.liveJobsCached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 3 || lists.Load() != 1 {
		t.Fatalf("first cycle: %d jobs, %d lists", len(first), lists.Load())
	}

	// web changed, db was purged, api was added.
	mu.Lock()
	jobs["web"] = `{"ID":"web","Namespace":"default","JobModifyIndex":50,"ModifyIndex":50}`
	delete(jobs, "db")
	jobs["api"] = `{"ID":"api","Namespace":"default","JobModifyIndex":51,"ModifyIndex":51}`
	mu.Unlock()
	m.jobsChanged(50, []nomadx.JobChange{{Type: "JobRegistered", JobID: "web", JobModifyIndex: 50}})
	m.jobsChanged(51, []nomadx.JobChange{{Type: "JobDeregistered", JobID: "db", Deleted: true},
		{Type: "JobRegistered", Namespace: "default", JobID: "api", JobModifyIndex: 51}})
	live, _, err := m.liveJobsCached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lists.Load() != 1 || reads.Load() != 3 {
		t.Fatalf("after three reported changes: %d lists, %d reads of one job; want 1 and 3", lists.Load(), reads.Load())
	}
	if s := live["default/web"]; s == nil || s.JobModifyIndex != 50 {
		t.Errorf("web after its change: %+v", s)
	}
	if _, ok := live["default/db"]; ok {
		t.Error("db still listed after its purge")
	}
	if s := live["default/api"]; s == nil || s.JobModifyIndex != 51 {
		t.Errorf("api after it was added: %+v", s)
	}
	if s := live["default/web-2"]; s == nil || s.JobModifyIndex != 9 {
		t.Errorf("web-2, not changed: %+v", s)
	}
	if s := first["default/web"]; s == nil || s.JobModifyIndex != 7 || len(first) != 3 {
		t.Errorf("the map an earlier cycle was given changed: web %+v, %d jobs", s, len(first))
	}
	// Each read waits for the index of the job's change (the blocking
	// query names the index below it).
	slices.Sort(indexes)
	if want := []string{"api@50", "db@50", "web@49"}; !slices.Equal(indexes, want) {
		t.Errorf("reads %v, want %v", indexes, want)
	}
	// The patched list is kept: nothing read again without a change.
	again, _, err := m.liveJobsCached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lists.Load() != 1 || reads.Load() != 3 || len(again) != 3 {
		t.Fatalf("a cycle with no new change: %d lists, %d reads, %d jobs", lists.Load(), reads.Load(), len(again))
	}

	// More changes than maxPatched: one list.
	many := make([]nomadx.JobChange, maxPatched+1)
	for i := range many {
		many[i] = nomadx.JobChange{Type: "JobRegistered", JobID: fmt.Sprintf("job-%d", i)}
	}
	m.jobsChanged(60, many)
	if _, _, err := m.liveJobsCached(ctx); err != nil {
		t.Fatal(err)
	}
	if lists.Load() != 2 || reads.Load() != 3 {
		t.Fatalf("after %d changes: %d lists, %d reads; want 2 and 3", len(many), lists.Load(), reads.Load())
	}

	// A change while the stream is down, then back up: one list.
	m.setStreaming("default", false)
	m.jobsChanged(70, []nomadx.JobChange{{Type: "JobRegistered", JobID: "web"}})
	m.setStreaming("default", true)
	if _, _, err := m.liveJobsCached(ctx); err != nil {
		t.Fatal(err)
	}
	if lists.Load() != 3 || reads.Load() != 3 {
		t.Fatalf("after the stream went down and up: %d lists, %d reads; want 3 and 3", lists.Load(), reads.Load())
	}

	// A read Nomad fails fails the cycle, and the next one lists.
	m.jobsChanged(80, []nomadx.JobChange{{Type: "JobRegistered", JobID: "web"}})
	stub.Close()
	if _, _, err := m.liveJobsCached(ctx); err == nil {
		t.Fatal("a cycle whose read of a changed job failed did not fail")
	}
	m.mu.Lock()
	kept := m.liveList
	m.mu.Unlock()
	if kept != nil {
		t.Fatal("a list was kept after a failed read of a changed job")
	}
}

// streamingDetector is a detector of a Nomad at addr whose event stream is
// up in the default namespace.
func streamingDetector(t *testing.T, addr string) *Detector {
	t.Helper()
	nomad, err := nomadx.New(nomadx.Config{Address: addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{DriftInterval: time.Minute}, nil, nomad, nil, hclog.NewNullLogger()).Detector()
	m.streamUp = map[string]bool{"default": true}
	return m
}
