package failover_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// slowReceiver is a webhook receiver that takes a while to answer, so that
// a leader killed while it waits dies in the middle of a delivery. It
// counts a notification as received when the request arrives, whether or
// not the sender lives to read the answer.
type slowReceiver struct {
	mu   sync.Mutex
	keys []string
	kind map[string]string
}

func (r *slowReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	var p notify.WebhookPayload
	_ = json.Unmarshal(body, &p)
	r.mu.Lock()
	r.keys = append(r.keys, req.Header.Get(notify.HeaderIdempotency))
	r.kind[req.Header.Get(notify.HeaderIdempotency)] = p.JobID
	r.mu.Unlock()
	time.Sleep(150 * time.Millisecond)
	w.WriteHeader(http.StatusNoContent)
}

func (r *slowReceiver) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// sawJobPrefix reports whether a request about a job whose ID starts with
// prefix arrived.
func (r *slowReceiver) sawJobPrefix(prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, job := range r.kind {
		if strings.HasPrefix(job, prefix) {
			return true
		}
	}
	return false
}

// TestNotifyFailoverKillLeader kills the leader with SIGKILL in the middle
// of notification deliveries, 20 times, on a 3-server cluster of the built
// binary. Every notification reaches the receiver at least once; none is
// lost; by idempotency key there are no repeats, and each key is the one
// of a committed notification.
func TestNotifyFailoverKillLeader(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 3
	}
	rcv := &slowReceiver{kind: map[string]string{}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	cfg := filepath.Join(t.TempDir(), "notify.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
notify "rcv" {
  kind          = "webhook"
  url           = %q
  events        = ["paused", "resumed"]
  retry_initial = "100ms"
  retry_max     = "500ms"
}
`, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, map[string]string{"jobs/README.md": "no jobs"}, "-config", cfg)
	c := f.cluster
	c.WaitForCluster()

	const perRound = 4
	for round := 0; round < rounds; round++ {
		leader := c.Leader()
		p := c.Server(leader)
		prefix := fmt.Sprintf("r%02d-", round)
		for j := 0; j < perRound; j++ {
			job := fmt.Sprintf("%s%d", prefix, j)
			p.Do("POST", "/v1/job/default/"+job+"/pause", map[string]string{"reason": "round"}, nil, http.StatusOK)
			p.Do("POST", "/v1/job/default/"+job+"/resume", map[string]string{"reason": "round"}, nil, http.StatusOK)
		}
		// Kill the leader once a delivery of this round is under way.
		testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
			return rcv.sawJobPrefix(prefix), fmt.Errorf("no delivery of round %d started", round)
		})
		c.Kill(leader)
		c.Leader()
		c.Restart(leader)
	}
	c.WaitForCluster()

	// Every committed notification ends delivered; list them from any
	// server.
	var outbox []*structs.Notification
	testutil.WaitForResult(t, 2*time.Minute, func() (bool, error) {
		outbox = nil
		if _, _, err := c.Server(c.Leader()).Call("GET", "/v1/notifications", nil, &outbox); err != nil {
			return false, err
		}
		pending := 0
		for _, n := range outbox {
			if n.State != structs.NotificationDelivered && (n.Kind == structs.NotifyPaused || n.Kind == structs.NotifyResumed) {
				pending++
			}
		}
		return pending == 0, fmt.Errorf("%d notifications not delivered yet", pending)
	})
	want := map[string]bool{}
	for _, n := range outbox {
		if n.Kind == structs.NotifyPaused || n.Kind == structs.NotifyResumed {
			want[n.IdempotencyKey("rcv")] = true
		}
	}
	if len(want) != rounds*perRound*2 {
		t.Fatalf("the outbox holds %d pause and resume notifications, want %d", len(want), rounds*perRound*2)
	}
	got := rcv.received()
	seen := map[string]int{}
	for _, k := range got {
		if !want[k] {
			t.Errorf("the receiver got key %q, which no committed notification has", k)
		}
		seen[k]++
	}
	lost, repeats := 0, 0
	for k := range want {
		if seen[k] == 0 {
			lost++
			t.Errorf("notification %s never reached the receiver", k)
		}
		if seen[k] > 1 {
			repeats += seen[k] - 1
		}
	}
	t.Logf("%d rounds: %d notifications, %d requests, %d lost, %d repeated deliveries (same key, removed by de-duplication)",
		rounds, len(want), len(got), lost, repeats)
	if len(seen) != len(want) {
		t.Errorf("de-duplicated by key the receiver has %d notifications, want %d", len(seen), len(want))
	}
}
