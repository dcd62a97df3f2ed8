package failover_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// leaderKills is how many leaders one iteration of
// BenchmarkFailover_KillToLeader kills (two in a smoke run).
func leaderKills() int { return testutil.BenchSize(20, 2) }

// BenchmarkFailover_KillToLeader SIGKILLs the leader of a 3-process cluster
// leaderKills times, with the default Raft timings (raft_multiplier 1), and
// measures from each kill to an agreed leader: both survivors name the same
// new leader and that server reports itself leader with its loops running
// (its barrier passed). It also measures from the kill to the end of the
// first detection cycle the new leader completes. After each kill the
// killed server starts again and the cluster is whole (every server a
// voter) before the next.
//
// It reports the median and the worst of each, in seconds (targets: a
// median of at most 1s and a worst of at most 1.5s to an agreed leader).
func BenchmarkFailover_KillToLeader(b *testing.B) {
	// The production timings, not the test clusters' patient ones.
	c, nodeIDs := startBenchCluster(b, "-raft-multiplier", "1")

	var leaders, cycles []time.Duration
	b.ResetTimer()
	for range b.N {
		killLeaders(b, c, leaderKills(), func(old int) {
			toLeader, toCycle := killToLeader(b, c, old, nodeIDs[old])
			leaders, cycles = append(leaders, toLeader), append(cycles, toCycle)
			b.Logf("killed %s: agreed leader after %s, its first detection cycle after %s",
				c.Server(old).Name, toLeader.Round(time.Millisecond), toCycle.Round(time.Millisecond))
		})
	}
	b.StopTimer()
	b.ReportMetric(testutil.Median(leaders).Seconds(), "leader-p50-s")
	b.ReportMetric(slices.Max(leaders).Seconds(), "leader-max-s")
	b.ReportMetric(testutil.Median(cycles).Seconds(), "first-cycle-p50-s")
	b.ReportMetric(slices.Max(cycles).Seconds(), "first-cycle-max-s")
	b.ReportMetric(float64(len(leaders)), "kills")
	b.Logf("kill to agreed leader over %d kills: %v (median %s, max %s); to first detection cycle: median %s, max %s",
		len(leaders), leaders, testutil.Median(leaders).Round(time.Millisecond), slices.Max(leaders).Round(time.Millisecond),
		testutil.Median(cycles).Round(time.Millisecond), slices.Max(cycles).Round(time.Millisecond))
}

// killToLeader kills the leader and polls the survivors until they agree on
// a new leader, then until that leader has completed a detection cycle
// after the kill. It returns both times from the kill.
func killToLeader(b *testing.B, c *nopstest.ProcessCluster, leader int, killed string) (toLeader, toCycle time.Duration) {
	b.Helper()
	start := time.Now()
	c.Kill(leader)
	deadline := start.Add(nopstest.ProcessLeaderTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if toLeader == 0 {
			i, err := c.LeaderIndex()
			if err != nil || i == leader {
				lastErr = err
				time.Sleep(2 * time.Millisecond)
				continue
			}
			toLeader = time.Since(start)
		}
		for _, i := range c.Running() {
			cycle, err := c.Server(i).Cycle()
			if err != nil {
				lastErr = err
				continue
			}
			if cycle != nil && cycle.Leader != killed && cycle.FinishedAt.After(start) {
				return toLeader, cycle.FinishedAt.Sub(start)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.Fatalf("no agreed leader with a detection cycle within %s of the kill of %s (leader after %s; last error: %v)",
		nopstest.ProcessLeaderTimeout, c.Server(leader).Name, toLeader, lastErr)
	return 0, 0
}
