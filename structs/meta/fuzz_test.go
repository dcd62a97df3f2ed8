package meta

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// FuzzMetaKeys reads arbitrary values of every meta key: never a panic, and
// what Read says holds together: a problem names the file, a job with no
// problem has a valid policy and positive timeouts, and hook lists hold no
// empty or repeated name.
func FuzzMetaKeys(f *testing.F) {
	f.Add("true", "", "approval", "backup, migrate", "smoke", "20m", "")
	f.Add("", "hook", "", "", "", "", "5m")
	f.Add("true", "hook", "sometimes", ",,a,a", " ", "-1s", "0")
	f.Add("TRUE", "Hook", "auto", "a,b,c", "c,b,a", "1h1h", "9223372036854775807ns")
	f.Fuzz(func(t *testing.T, managed, role, policy, pre, post, applyTimeout, hookTimeout string) {
		m := map[string]string{}
		for k, v := range map[string]string{KeyManaged: managed, KeyRole: role, KeyPolicy: policy, KeyPreHooks: pre,
			KeyPostHooks: post, KeyApplyTimeout: applyTimeout, KeyHookTimeout: hookTimeout} {
			if v != "" {
				m[k] = v
			}
		}
		d := Defaults{Policy: structs.PolicyAuto, ApplyTimeout: 15 * time.Minute, HookTimeout: 10 * time.Minute}
		j := Read("jobs/web.nomad.hcl", &api.Job{Meta: m}, d)
		for _, p := range j.Problems {
			if !strings.HasPrefix(p, "jobs/web.nomad.hcl: meta ") {
				t.Fatalf("a problem that does not name the file and key: %q", p)
			}
		}
		if _, err := structs.ParsePolicy(string(j.Policy)); err != nil {
			t.Fatalf("Read left an invalid policy %q", j.Policy)
		}
		if j.ApplyTimeout <= 0 || j.HookTimeout <= 0 {
			t.Fatalf("Read left a timeout that is not positive: %s, %s", j.ApplyTimeout, j.HookTimeout)
		}
		for _, list := range [][]string{j.PreHooks, j.PostHooks} {
			seen := map[string]bool{}
			for _, h := range list {
				if h == "" || seen[h] || h != strings.TrimSpace(h) {
					t.Fatalf("hook list %q holds an empty, repeated or untrimmed name", list)
				}
				seen[h] = true
			}
		}
		if j.Kind == Ignored && len(j.Problems) == 0 && (len(j.PreHooks) > 0 || len(j.PostHooks) > 0) {
			t.Fatalf("an ignored job has hooks")
		}
	})
}
