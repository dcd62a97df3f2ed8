package failover_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// killsPerIteration is how many leaders one iteration of the benchmark
// kills: enough for a median.
const killsPerIteration = 5

// BenchmarkFailover_KillToFirstCycle measures the time from the SIGKILL of
// the leader process to the end of the first detection cycle its successor
// completes (the cycle's finished_at, as GET /v1/status/cycle on a survivor
// reports it), with the default Raft timings. The repository holds one
// managed job, deployed before the first kill, so every cycle parses and
// plans a real job. After each kill the killed server starts again and
// rejoins before the next one.
//
// It reports the median and the worst time in seconds (target: a median of
// at most 3s).
func BenchmarkFailover_KillToFirstCycle(b *testing.B) {
	nomad := testutil.StartNomad(b)
	repo := testutil.NewGitRepo(b)
	repo.WriteFile("jobs/web.nomad.hcl", managedJob("web", structs.PolicyAuto))
	repo.Commit("web")
	c := nopstest.StartProcessCluster(b, 3, nomad.Addr, repo.URL()+"#main:jobs")
	leader := c.Leader()
	c.Server(leader).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StateCompleted))

	nodeIDs := make([]string, c.Len())
	for i := range c.Len() {
		self, err := c.Server(i).Self()
		if err != nil {
			b.Fatal(err)
		}
		nodeIDs[i] = self.NodeID
	}

	var samples []time.Duration
	b.ResetTimer()
	for range b.N {
		for range killsPerIteration {
			b.StopTimer()
			leader := c.WaitForCluster()
			b.StartTimer()

			d, cycle := killToFirstCycle(b, c, leader, nodeIDs)
			samples = append(samples, d)
			b.Logf("killed %s: %s led its first detection cycle %s after the kill (%d jobs, %d drifted)",
				c.Server(leader).Name, cycle.Leader, d.Round(time.Millisecond), cycle.Jobs, cycle.Drifted)

			b.StopTimer()
			c.Restart(leader)
			b.StartTimer()
		}
	}
	b.StopTimer()

	slices.Sort(samples)
	median := samples[len(samples)/2]
	if len(samples)%2 == 0 {
		median = (samples[len(samples)/2-1] + samples[len(samples)/2]) / 2
	}
	b.ReportMetric(median.Seconds(), "median-s")
	b.ReportMetric(samples[len(samples)-1].Seconds(), "max-s")
	b.Logf("kill to first cycle of the new leader over %d kills: %v (median %s)", len(samples), samples, median.Round(time.Millisecond))
}

// killToFirstCycle kills the leader and polls the survivors until one of
// them shows a detection cycle completed by another server after the kill.
// It returns the time from the kill to that cycle's end, and the cycle.
func killToFirstCycle(b *testing.B, c *nopstest.ProcessCluster, leader int, nodeIDs []string) (time.Duration, *structs.DetectionCycle) {
	b.Helper()
	killed := nodeIDs[leader]
	start := time.Now()
	c.Kill(leader)
	// A fast poll, so that a later cycle seldom hides the first one.
	deadline := start.Add(nopstest.ProcessLeaderTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		for _, i := range c.Running() {
			cycle, err := c.Server(i).Cycle()
			if err != nil {
				lastErr = err
				continue
			}
			if cycle != nil && cycle.Leader != killed && cycle.FinishedAt.After(start) {
				return cycle.FinishedAt.Sub(start), cycle
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("no detection cycle of a new leader within %s of the kill of %s (last error: %v)", nopstest.ProcessLeaderTimeout, c.Server(leader).Name, lastErr)
	return 0, nil
}
