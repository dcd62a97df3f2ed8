package agent_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkWrite_ThroughFollowerACL measures, as BenchmarkWrite_ThroughFollower
// does, the latency of one write sent to a follower, forwarded to the
// leader, committed and applied, with ACLs off and on. With ACLs on, the
// write carries a client token of 100 policies, checked on the leader
// where the write is applied. The difference of the p50s is the cost of
// the check on the request path.
func BenchmarkWrite_ThroughFollowerACL(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("acl=%v", on), func(b *testing.B) {
			c := nopstest.StartCluster(b, 3, nopstest.WithoutReconcilers(),
				nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = on }))
			c.WaitForPeers(30*time.Second, c.NodeIDs()...)
			follower := c.Followers()[0]
			token := ""
			if on {
				token = benchToken(b, c)
			}
			client := &http.Client{Timeout: 30 * time.Second}
			put := func(name string) error {
				req, err := http.NewRequest("PUT", follower.URL+"/v1/window/"+name,
					bytes.NewReader([]byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`)))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				if token != "" {
					req.Header.Set("X-Nops-Token", token)
				}
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("PUT window %s: %d %s", name, resp.StatusCode, raw)
				}
				return nil
			}
			if err := put("warm"); err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := put(fmt.Sprintf("w-%d", i%100)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "ms-p99")
		})
	}
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
