package command

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

func TestCLI_Notify(t *testing.T) {
	var fail atomic.Bool
	var got atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rcv.Close)
	s := nopstest.StartDev(t, nopstest.WithConfig(func(c *config.Config) {
		c.Notify = []config.NotifyConfig{{Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.URL,
			Events: []string{structs.NotifyPaused}, Jobs: []string{"web"}}}
	}))
	c := newCLI(t, s)

	if out := c.ok("notify", "targets"); !strings.Contains(out, "ops") || !strings.Contains(out, "webhook") ||
		!strings.Contains(out, "paused") || strings.Contains(out, rcv.URL) {
		t.Errorf("targets:\n%s", out)
	}
	if out := c.ok("notify", "test", "ops"); !strings.Contains(out, `"ops" accepted the test message`) {
		t.Errorf("test:\n%s", out)
	}
	fail.Store(true)
	if out := c.fails(1, "notify", "test", "ops"); !strings.Contains(out, "503") {
		t.Errorf("failing test:\n%s", out)
	}
	c.fails(1, "notify", "test", "nope")
	c.fails(2, "notify", "test")
	fail.Store(false)

	c.ok("job", "pause", "-reason", "x", "web")
	waitFor(t, func() bool {
		var n []*structs.Notification
		c.okJSON(&n, "notify", "list", "-state", "delivered")
		for _, x := range n {
			if x.Kind == structs.NotifyPaused && x.Target("ops") != nil {
				return true
			}
		}
		return false
	})
	if out := c.ok("notify", "list"); !strings.Contains(out, "paused") || !strings.Contains(out, "ops:delivered/1") {
		t.Errorf("list:\n%s", out)
	}
	if out := c.fails(2, "notify", "list", "-state", "lost"); !strings.Contains(out, "lost") {
		t.Errorf("bad state:\n%s", out)
	}
}
