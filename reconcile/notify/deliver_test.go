package notify_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// secretFile writes a signing secret to a file and returns its path.
func secretFile(t testing.TB, secret string) string {
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// withTarget adds a webhook notify block.
func withTarget(nc config.NotifyConfig) nopstest.Option {
	return nopstest.WithConfig(func(c *config.Config) {
		c.Notify = append(c.Notify, nc)
	})
}

func notifications(t testing.TB, s *nopstest.Server, state string) []*structs.Notification {
	t.Helper()
	var out []*structs.Notification
	if code, body := s.Do("GET", "/v1/notifications?state="+state, nil, &out); code != http.StatusOK {
		t.Fatalf("list notifications: %d %s", code, body)
	}
	return out
}

// TestRetryKeepsKey: a receiver that answers 500 three times then 200 gets
// the notification four times with one idempotency key and a valid
// signature, and nothing after it acknowledged it.
func TestRetryKeepsKey(t *testing.T) {
	rcv := newReceiver(t, "s3cret", func(n int, _ *notify.WebhookPayload) int {
		if n <= 3 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), withTarget(config.NotifyConfig{
		Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.srv.URL, SecretFile: secretFile(t, "s3cret"),
		Events: []string{structs.NotifyPaused}, RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
	}))
	if code, body := s.Do("POST", "/v1/job/default/web/pause", map[string]string{"reason": "incident"}, nil); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, body)
	}
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		d := notifications(t, s, "delivered")
		for _, n := range d {
			if n.Kind == structs.NotifyPaused {
				return true, nil
			}
		}
		return false, fmt.Errorf("not delivered yet; receiver got %d", len(rcv.requests()))
	})
	// Nothing more may come after the acknowledgement: give a wrong
	// retry the time of several backoffs to show itself.
	time.Sleep(time.Second)
	got := rcv.requests()
	if len(got) != 4 {
		t.Fatalf("receiver got %d requests, want 4: %+v", len(got), got)
	}
	for i, g := range got {
		if g.Key != got[0].Key || g.Key == "" {
			t.Errorf("request %d has key %q, want %q", i+1, g.Key, got[0].Key)
		}
		if !g.SigOK {
			t.Errorf("request %d has a bad signature", i+1)
		}
		if g.Payload.Kind != structs.NotifyPaused || g.Payload.Namespace != "default" || g.Payload.JobID != "web" || g.Payload.Actor != "tester" {
			t.Errorf("request %d payload %+v", i+1, g.Payload)
		}
	}
	var n *structs.Notification
	for _, c := range notifications(t, s, "") {
		if c.Kind == structs.NotifyPaused {
			n = c
		}
	}
	tg := n.Target("ops")
	if n.State != structs.NotificationDelivered || tg == nil || tg.Attempts != 4 || tg.State != structs.TargetDelivered || tg.LastError != "" {
		t.Fatalf("outbox entry %+v target %+v", n, tg)
	}
	if got[0].Key != n.IdempotencyKey("ops") {
		t.Errorf("key %q, want %q", got[0].Key, n.IdempotencyKey("ops"))
	}
	// The metrics count the attempts.
	_, metrics := s.Do("GET", "/metrics", nil, nil)
	for _, want := range []string{`nops_notifications_sent_total{target="ops"} 1`, `nops_notifications_failed_total{target="ops"} 3`,
		`nops_notifications_retried_total{target="ops"} 3`, "nops_notifications_queue_depth"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestGiveUpDead: a receiver down for longer than the give-up age leaves a
// dead entry, visible in the API with its last error.
func TestGiveUpDead(t *testing.T) {
	rcv := newReceiver(t, "", func(int, *notify.WebhookPayload) int { return http.StatusServiceUnavailable })
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), withTarget(config.NotifyConfig{
		Name: "down", Kind: config.NotifyKindWebhook, URL: rcv.srv.URL, Events: []string{structs.NotifyPaused},
		GiveUpAfter: 700 * time.Millisecond, RetryInitial: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond,
	}))
	// The target's counters are exported at 0 before any delivery.
	if v, err := testutil.MetricValue(s.Metrics(), "nops_notifications_dead_total", "target", "down"); err != nil || v != 0 {
		t.Fatalf("dead letters before any delivery: %v (%v), want 0", v, err)
	}
	s.Do("POST", "/v1/pause", map[string]string{"reason": "freeze"}, nil)
	var dead []*structs.Notification
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		dead = notifications(t, s, "dead")
		return len(dead) == 1, fmt.Errorf("%d dead notifications", len(dead))
	})
	tg := dead[0].Target("down")
	if tg == nil || tg.State != structs.TargetDead || tg.Attempts < 2 || !strings.Contains(tg.LastError, "gave up") ||
		!strings.Contains(tg.LastError, "503") {
		t.Fatalf("dead target %+v", tg)
	}
	if p := notifications(t, s, "pending"); len(p) != 0 {
		t.Errorf("%d still pending", len(p))
	}
	if v, err := testutil.MetricValue(s.Metrics(), "nops_notifications_dead_total", "target", "down"); err != nil || v != 1 {
		t.Errorf("dead letters: %v (%v), want 1", v, err)
	}
	n := len(rcv.requests())
	time.Sleep(500 * time.Millisecond)
	if m := len(rcv.requests()); m != n {
		t.Errorf("a dead notification was sent again: %d then %d requests", n, m)
	}
	// Bad filter input is refused and names the problem.
	if code, body := s.Do("GET", "/v1/notifications?state=lost", nil, nil); code != http.StatusBadRequest || !strings.Contains(body, "lost") {
		t.Errorf("bad state filter: %d %s", code, body)
	}
}

// TestTestNotification sends a test message through a target, through the
// API.
func TestTestNotification(t *testing.T) {
	rcv := newReceiver(t, "k", nil)
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), withTarget(config.NotifyConfig{
		Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.srv.URL, SecretFile: secretFile(t, "k"),
	}))
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if code, body := s.Do("POST", "/v1/notify/ops/test", nil, &res); code != http.StatusOK || !res.OK {
		t.Fatalf("test: %d %s", code, body)
	}
	var test []received
	for _, g := range rcv.requests() {
		if g.Payload.Kind == structs.NotifyTest {
			test = append(test, g)
		}
	}
	if len(test) != 1 || !test[0].SigOK {
		t.Fatalf("test requests %+v", test)
	}
	if code, _ := s.Do("POST", "/v1/notify/nope/test", nil, nil); code != http.StatusNotFound {
		t.Errorf("unknown target: %d", code)
	}
	if code, _ := s.Do("POST", "/v1/notify/ops/test", `{"x":1}`, nil); code != http.StatusBadRequest {
		t.Errorf("unknown field: %d", code)
	}
	if code, _ := s.Do("POST", "/v1/notify/ops/test", `{"a":"`+strings.Repeat("x", 2<<20)+`"}`, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("huge body: %d", code)
	}
	if code, _ := s.Do("POST", "/v1/notify/ops/test", "{garbage", nil); code != http.StatusBadRequest {
		t.Errorf("garbage body: %d", code)
	}
	if code, body := s.Do("GET", "/v1/notifications?limit=-3", nil, nil); code != http.StatusBadRequest || !strings.Contains(body, "limit") {
		t.Errorf("bad limit: %d %s", code, body)
	}
	if code, _ := s.Do("GET", "/v1/notification/no-such-id", nil, nil); code != http.StatusNotFound {
		t.Errorf("unknown notification: %d", code)
	}
	// Only the test messages reached the receiver: the refused requests
	// sent nothing.
	if n := len(rcv.requests()); n != 1+countKind(rcv.requests(), structs.NotifyLeaderChanged) {
		t.Errorf("receiver got %d requests", n)
	}
}

// TestLeaderAndWindowNotifications: the leader records its election and
// each sync window that opens, once, and delivers them.
func TestLeaderAndWindowNotifications(t *testing.T) {
	rcv := newReceiver(t, "", nil)
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), withTarget(config.NotifyConfig{
		Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.srv.URL,
		Events: []string{structs.NotifyLeaderChanged, structs.NotifyWindowOpened, structs.NotifyWindowClosed},
	}))
	// Active at every minute for an hour: open as soon as it exists. The
	// other never is.
	for name, sched := range map[string]string{"always": "* * * * *", "never": "0 0 29 2 1"} {
		if code, body := s.Do("PUT", "/v1/window/"+name, map[string]any{"kind": "allow", "schedule": sched, "duration": "1h"}, nil); code != http.StatusOK {
			t.Fatalf("put window: %d %s", code, body)
		}
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return len(rcv.accepted()) >= 2, fmt.Errorf("%d received", len(rcv.accepted()))
	})
	time.Sleep(300 * time.Millisecond)
	var kinds []string
	for _, g := range rcv.accepted() {
		kinds = append(kinds, g.Payload.Kind+":"+g.Payload.Object+":"+g.Payload.To)
	}
	want := []string{structs.NotifyLeaderChanged + ":cluster:" + s.Config().NodeName, structs.NotifyWindowOpened + ":always:open"}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("received %v, want %v", kinds, want)
	}
}

// TestWindowBurstIsObservedWhole: windows written faster than the loop
// looks at them (one look per windowsGap) are all observed: the writes
// that came too soon after a look wait for the next, none is skipped.
func TestWindowBurstIsObservedWhole(t *testing.T) {
	rcv := newReceiver(t, "", nil)
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), withTarget(config.NotifyConfig{
		Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.srv.URL,
		Events: []string{structs.NotifyWindowOpened},
	}))
	const burst = 40
	for i := range burst {
		if code, body := s.Do("PUT", fmt.Sprintf("/v1/window/always-%d", i), map[string]any{"kind": "allow", "schedule": "* * * * *", "duration": "1h"}, nil); code != http.StatusOK {
			t.Fatalf("put window: %d %s", code, body)
		}
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		open := 0
		for i := range burst {
			if m, _ := s.State().Mark(structs.MarkWindow, fmt.Sprintf("always-%d", i)); m != nil && m.Value == "open" {
				open++
			}
		}
		return open == burst, fmt.Errorf("%d of %d windows observed open", open, burst)
	})
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return countKind(rcv.accepted(), structs.NotifyWindowOpened) == burst,
			fmt.Errorf("%d window-opened notifications received", countKind(rcv.accepted(), structs.NotifyWindowOpened))
	})
}

// TestOrderPerJobAndPrune: a notification about a job is not sent while an
// earlier one about the same job is still being retried, while another
// job's goes ahead; delivered notifications are pruned after the
// retention.
func TestOrderPerJobAndPrune(t *testing.T) {
	failFirst := 0
	rcv := newReceiver(t, "", func(_ int, p *notify.WebhookPayload) int {
		if p.JobID == "web" && p.Kind == structs.NotifyPaused && failFirst < 3 {
			failFirst++
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(),
		nopstest.WithConfig(func(c *config.Config) { c.NotifyRetention = 2 * time.Second }),
		withTarget(config.NotifyConfig{
			Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.srv.URL, Events: []string{structs.NotifyPaused, structs.NotifyResumed},
			RetryInitial: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		}))
	s.Do("POST", "/v1/job/default/web/pause", nil, nil)
	s.Do("POST", "/v1/job/default/web/resume", nil, nil)
	s.Do("POST", "/v1/job/default/api/pause", nil, nil)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return len(rcv.accepted()) == 3, fmt.Errorf("%d accepted", len(rcv.accepted()))
	})
	var order []string
	for _, g := range rcv.requests() {
		order = append(order, fmt.Sprintf("%s/%s:%d", g.Payload.JobID, g.Payload.Kind, g.Answered))
	}
	webPaused, webResumed, apiPaused := -1, -1, -1
	for i, o := range order {
		switch o {
		case "web/paused:200":
			webPaused = i
		case "web/resumed:200":
			webResumed = i
		case "api/paused:200":
			apiPaused = i
		}
	}
	if webPaused < 0 || webResumed < webPaused || apiPaused < 0 || apiPaused > webPaused {
		t.Fatalf("order %v: web's resume must follow its pause, and api must not wait for web", order)
	}
	for _, o := range order {
		if o == "web/resumed:502" {
			t.Fatalf("order %v", order)
		}
	}
	// After the retention the leader prunes what it delivered.
	testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
		d := notifications(t, s, "delivered")
		return len(d) == 0, fmt.Errorf("%d delivered notifications still in the outbox", len(d))
	})
}

func countKind(rs []received, kind string) int {
	n := 0
	for _, r := range rs {
		if r.Payload.Kind == kind {
			n++
		}
	}
	return n
}
