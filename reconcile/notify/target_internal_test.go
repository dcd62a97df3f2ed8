package notify

import (
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

func TestTargetMatches_FiltersByEventNamespaceAndJob(t *testing.T) {
	job := &structs.Notification{Kind: structs.NotifyFailed, Namespace: "prod-eu", JobID: "api-v2"}
	global := &structs.Notification{Kind: structs.NotifyLeaderChanged, Object: "cluster"}
	cases := []struct {
		name        string
		target      Target
		job, global bool
	}{
		{"no filters", Target{}, true, true},
		{"events match", Target{Events: []string{structs.NotifyFailed, structs.NotifyLeaderChanged}}, true, true},
		{"events miss", Target{Events: []string{structs.NotifyCompleted}}, false, false},
		{"namespace glob", Target{Namespaces: []string{"prod-*"}}, true, false},
		{"namespace miss", Target{Namespaces: []string{"dev"}}, false, false},
		{"job glob", Target{Jobs: []string{"web", "api-*"}}, true, false},
		{"job miss", Target{Jobs: []string{"web"}}, false, false},
		{"both", Target{Namespaces: []string{"prod-eu"}, Jobs: []string{"api-v*"}}, true, false},
		{"question mark is a character", Target{Jobs: []string{"api-v?"}}, false, false},
	}
	for _, tc := range cases {
		if got := tc.target.Matches(job); got != tc.job {
			t.Errorf("%s: job notification matches %t, want %t", tc.name, got, tc.job)
		}
		if got := tc.target.Matches(global); got != tc.global {
			t.Errorf("%s: global notification matches %t, want %t", tc.name, got, tc.global)
		}
	}
}

// TestRetryDelay_ExponentialWithJitterUpToMax checks the backoff:
// exponential from the initial delay, with jitter of ±50%, capped at the
// maximum.
func TestRetryDelay_ExponentialWithJitterUpToMax(t *testing.T) {
	tg := &Target{RetryInitial: 100 * time.Millisecond, RetryMax: time.Second}
	seen := map[time.Duration]bool{}
	for attempt := 1; attempt <= 10; attempt++ {
		base := min(tg.RetryInitial<<(attempt-1), tg.RetryMax)
		for range 20 {
			d := retryDelay(tg, attempt)
			seen[d] = true
			if d < base/2 || d > base*3/2 {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, d, base/2, base*3/2)
			}
		}
	}
	if len(seen) < 10 {
		t.Errorf("only %d distinct delays: no jitter", len(seen))
	}
}

// TestLink_JobOfACluster: a notification about a job of the default cluster
// links its page as before; one of another cluster names the cluster, so
// the dashboard opens that cluster's job and not the default cluster's of
// the same namespace and ID (SPEC section 16).
func TestLink_JobOfACluster(t *testing.T) {
	for _, tc := range []struct {
		cluster, want string
	}{
		{"", "https://nops.example/ui/job/default/web"},
		{structs.DefaultCluster, "https://nops.example/ui/job/default/web"},
		{"eu", "https://nops.example/ui/job/default/web?cluster=eu"},
	} {
		n := &structs.Notification{Kind: structs.NotifyFailed, Object: "x", Cluster: tc.cluster, Namespace: "default", JobID: "web"}
		if got := link("https://nops.example/", n); got != tc.want {
			t.Errorf("cluster %q: link %q, want %q", tc.cluster, got, tc.want)
		}
	}
}
