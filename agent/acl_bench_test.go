package agent_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkWrite_ThroughFollowerACL measures, as BenchmarkWrite_ThroughFollower
// does, the latency of one write sent to a follower, forwarded to the
// leader, committed and applied, on two 3-server clusters side by side:
// one with ACLs off, one with ACLs on, where the write carries a client
// token of 100 policies, checked on the leader that applies it. Writes
// alternate between the two clusters, so that both see the same load of
// the machine; the difference of the p50s is the cost of the check.
func BenchmarkWrite_ThroughFollowerACL(b *testing.B) {
	nopstest.AgentGC(b)
	type target struct {
		put func(name string) error
		lat []time.Duration
	}
	targets := make([]*target, 2)
	for i, on := range []bool{false, true} {
		c := nopstest.StartCluster(b, 3, nopstest.WithoutReconcilers(),
			nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = on }))
		c.WaitForPeers(30*time.Second, c.NodeIDs()...)
		follower := c.Followers()[0]
		w := newWriter(follower)
		if on {
			w.token = benchToken(b, c)
		}
		t := &target{put: w.put, lat: make([]time.Duration, 0, b.N)}
		if err := t.put("warm"); err != nil {
			b.Fatal(err)
		}
		targets[i] = t
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, t := range targets {
			start := time.Now()
			if err := t.put(fmt.Sprintf("w-%d", i%100)); err != nil {
				b.Fatal(err)
			}
			t.lat = append(t.lat, time.Since(start))
		}
	}
	b.StopTimer()
	off, on := testutil.Percentile(targets[0].lat, 0.5), testutil.Percentile(targets[1].lat, 0.5)
	b.ReportMetric(float64(off.Microseconds())/1000, "ms-p50-acl-off")
	b.ReportMetric(float64(on.Microseconds())/1000, "ms-p50-acl-on")
	b.ReportMetric(100*(float64(on)-float64(off))/float64(off), "%-p50-change")
}

// benchToken bootstraps the cluster and returns a client token of 100
// policies, one of which grants windows on the cluster.
func benchToken(b *testing.B, c *nopstest.Cluster) string {
	leader := c.WaitForLeader(30 * time.Second)
	var boot structs.ACLTokenView
	aclCall(b, leader, "", "POST", "/v1/acl/bootstrap", nil).ok(b, "bootstrap", &boot)
	var names []string
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("p%d", i)
		rules := fmt.Sprintf("namespace \"team-%d-*\" {\n capabilities = [\"read\"]\n}", i)
		if i == 99 {
			rules = "cluster {\n capabilities = [\"windows\"]\n}"
		}
		aclCall(b, leader, boot.SecretID, "PUT", "/v1/acl/policy/"+name, map[string]string{"rules": rules}).ok(b, "policy", nil)
		names = append(names, name)
	}
	var tok structs.ACLTokenView
	aclCall(b, leader, boot.SecretID, "POST", "/v1/acl/token", map[string]any{"name": "bench", "policies": names}).ok(b, "token", &tok)
	syncAll(b, c)
	return tok.SecretID
}
