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
// kills: enough for a median (one in a smoke run).
func killsPerIteration() int { return testutil.BenchSize(5, 1) }

// startBenchCluster starts a 3-process cluster (with args) against a
// Nomad agent, with one managed job in git, and waits until the job is
// deployed. It returns the cluster and the node ID of each server.
func startBenchCluster(b *testing.B, args ...string) (*nopstest.ProcessCluster, []string) {
	b.Helper()
	nomad := testutil.StartNomad(b)
	repo := testutil.NewGitRepoWith(b, "web", map[string]string{"jobs/web.nomad.hcl": managedJob("web", structs.PolicyAuto)})
	c := nopstest.StartProcessCluster(b, 3, nomad.Addr, repo.URL()+"#main:jobs", args...)
	c.Server(c.Leader()).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StateCompleted))
	nodeIDs := make([]string, c.Len())
	for i := range c.Len() {
		self, err := c.Server(i).Self()
		if err != nil {
			b.Fatal(err)
		}
		nodeIDs[i] = self.NodeID
	}
	return c, nodeIDs
}

// BenchmarkFailover_KillToFirstCycle measures the time from the SIGKILL of
// the leader process to the end of the first detection cycle its successor
// completes (the cycle's finished_at, as GET /v1/status/cycle on a survivor
// reports it), with the default Raft timings. The repository holds one
// managed job, deployed before the first kill, so a cycle parses and plans a
// real job. After each kill the killed server starts again and rejoins
// before the next one.
//
// It reports, in seconds, the median and the worst time to the first cycle
// (target: a median of at most 3s), and the median time to the first cycle
// that saw the job in git ("full"): the two differ while a new leader can
// complete a cycle before its first fetch of the repository.
func BenchmarkFailover_KillToFirstCycle(b *testing.B) {
	c, nodeIDs := startBenchCluster(b)

	var firsts, fulls []time.Duration
	b.ResetTimer()
	for range b.N {
		killLeaders(b, c, killsPerIteration(), func(leader int) {
			first, full := killToFirstCycle(b, c, leader, nodeIDs, 1)
			firsts = append(firsts, first.FinishedAt.Sub(first.start))
			fulls = append(fulls, full.FinishedAt.Sub(full.start))
			b.Logf("killed %s: the new leader %s completed its first detection cycle %s after the kill (%d jobs), its first over every job %s after",
				c.Server(leader).Name, first.Leader, firsts[len(firsts)-1].Round(time.Millisecond), first.Jobs, fulls[len(fulls)-1].Round(time.Millisecond))
		})
	}
	b.StopTimer()

	b.ReportMetric(testutil.Median(firsts).Seconds(), "median-s")
	b.ReportMetric(slices.Max(firsts).Seconds(), "max-s")
	b.ReportMetric(testutil.Median(fulls).Seconds(), "median-full-s")
	b.Logf("kill to first cycle of the new leader over %d kills: %v (median %s); to its first cycle over every job: %v (median %s)",
		len(firsts), firsts, testutil.Median(firsts).Round(time.Millisecond), fulls, testutil.Median(fulls).Round(time.Millisecond))
}

// killLeaders runs kill n times on the leader of c, timed; the wait for a
// whole cluster before each and the restart of the killed server after it
// are out of the timer.
func killLeaders(b *testing.B, c *nopstest.ProcessCluster, n int, kill func(leader int)) {
	b.Helper()
	for range n {
		b.StopTimer()
		leader := c.WaitForCluster()
		b.StartTimer()
		kill(leader)
		b.StopTimer()
		c.Restart(leader)
		b.StartTimer()
	}
}

// seenCycle is a detection cycle seen on a survivor, with the time of the
// kill it follows.
type seenCycle struct {
	structs.DetectionCycle
	start time.Time
}

// killToFirstCycle kills the leader and polls the survivors until one of
// them shows a detection cycle completed by another server after the kill
// over at least jobs jobs. It returns the first cycle of the new leader it
// saw, and the first one over every job.
func killToFirstCycle(b *testing.B, c *nopstest.ProcessCluster, leader int, nodeIDs []string, jobs int) (first, full seenCycle) {
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
			if cycle == nil || cycle.Leader == killed || !cycle.FinishedAt.After(start) {
				continue
			}
			seen := seenCycle{DetectionCycle: *cycle, start: start}
			if first.start.IsZero() || seen.FinishedAt.Before(first.FinishedAt) {
				first = seen
			}
			if cycle.Jobs >= jobs {
				return first, seen
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("no detection cycle of a new leader over %d jobs within %s of the kill of %s (last error: %v)",
		jobs, nopstest.ProcessLeaderTimeout, c.Server(leader).Name, lastErr)
	return first, full
}
