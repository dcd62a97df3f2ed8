package reconcile_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkIdle1k runs one Nops server, the built binary in its own
// process, that manages 1,000 jobs in sync (parameterized batch jobs,
// policy auto, registered in Nomad as git has them before it starts), with
// the production settings (drift interval 1 min, engine interval 5 s,
// full_replan_interval 24h, Nomad's event stream), the repository fetched
// over HTTP (benchRepoURL) and a counting proxy in front of Nomad, and
// measures an idle window of 10 minutes (a few seconds under NOPS_BENCH_SMOKE; NOPS_BENCH_IDLE_WINDOW
// sets another, e.g. 2m):
//
//   - settled-rss-mb: the server's VmRSS once every job is in sync and the
//     first detection's work has run out, 90 s after: the GC tuner gives
//     the heap of a heavy phase and the binary's pages back once the
//     process has been quiet for 30 s, and the first drift interval's
//     work (the git poll, Nomad's version check) maps again what it runs;
//   - idle-median-rss-mb and idle-max-rss-mb: the median and the largest
//     of its VmRSS every 5 s over the window (the tuner releases the
//     binary's pages again every 10 quiet minutes, so that a reading at
//     one moment may fall just after a release);
//   - idle-end-rss-mb: its VmRSS at the end of the window; peak-rss-mb its
//     VmHWM then (its whole life, the first detection included);
//   - cpu-s/idle-min: its CPU time (user and system) a minute of the window;
//   - nomad-req/idle-min and nomad-plans/idle-min: every request the proxy
//     passed to Nomad, and the plans among them, a minute of the window;
//   - nomad-cpu-s/idle-min, and nomad-alone-cpu-s/idle-min over a window
//     as long (at most 2 minutes) before Nops started: Nomad's own CPU.
//
// NOPS_BENCH_IDLE_JOBS changes the number of jobs.
func BenchmarkIdle1k(b *testing.B) {
	n := benchEnvInt("NOPS_BENCH_IDLE_JOBS", testutil.BenchSize(1000, 30))
	window := testutil.BenchSize(10*time.Minute, 4*time.Second)
	if v := os.Getenv("NOPS_BENCH_IDLE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("NOPS_BENCH_IDLE_WINDOW=%q: not a positive duration", v)
		}
		window = d
	}
	settle := testutil.BenchSize(90*time.Second, time.Second)
	nomad, repo := testutil.StartNomad(b), testutil.NewGitRepo(b)
	hcl := make(map[string]string, n)
	for i := range n {
		id := scaleJobID(i)
		hcl[id] = benchJobHCL(id, structs.PolicyAuto, 0)
		repo.WriteFile(jobFile(id), hcl[id])
	}
	repo.Commit("jobs")
	repo.Pack()
	registerInNomad(b, nomad, hcl, 8)
	hcl = nil
	// Nomad alone, its jobs registered, nothing watching it.
	baseline := min(window, 2*time.Minute)
	alone := cpuOver(b, nomad.Pid(), baseline)
	proxy := newNomadProxy(b, nomad.Addr)
	c := nopstest.StartProcessCluster(b, 1, proxy.URL, benchRepoURL(b, repo)+"#main:"+jobsDir, "-insecure-rpc",
		"-drift-interval", "1m", "-engine-interval", config.DefaultEngineInterval.String(), "-log-level", "info")
	srv := c.Server(0)
	start := time.Now()
	testutil.WaitForResult(b, 20*time.Minute, func() (bool, error) {
		var list []*structs.JobSummary
		if code, _, err := srv.Call("GET", "/v1/jobs", nil, &list); err != nil || code != 200 {
			return false, fmt.Errorf("list jobs: %d %v", code, err)
		}
		in := 0
		for _, j := range list {
			if j.JobStatus != nil && j.Sync == structs.SyncInSync {
				in++
			}
		}
		return in == n, fmt.Errorf("%d of %d jobs in sync", in, n)
	})
	progress(b, "%d jobs in sync after %s", n, time.Since(start).Round(time.Millisecond))
	time.Sleep(settle)
	proxy.quietFor(b, settle)
	pid := srv.PID()
	for b.Loop() {
		settled := procStatusMB(b, pid, "VmRSS")
		mark := proxy.mark()
		cpu0, nomad0 := procCPUSeconds(b, pid), procCPUSeconds(b, nomad.Pid())
		rss := sampleRSS(b, pid, min(5*time.Second, window/4), window)
		cpu, nomadCPU := procCPUSeconds(b, pid)-cpu0, procCPUSeconds(b, nomad.Pid())-nomad0
		reqs := proxy.since(mark)
		plans := 0
		for _, k := range plansByJob(reqs) {
			plans += k
		}
		mins := window.Minutes()
		progress(b, "idle %s: %s", window, describe(byPath(reqs)))
		end := procStatusMB(b, pid, "VmRSS")
		b.ReportMetric(settled, "settled-rss-mb")
		b.ReportMetric(end, "idle-end-rss-mb")
		b.ReportMetric(testutil.Median(rss), "idle-median-rss-mb")
		b.ReportMetric(slices.Max(rss), "idle-max-rss-mb")
		// The kernel updates VmHWM lazily: it can read a hair below a
		// VmRSS read before.
		b.ReportMetric(max(procStatusMB(b, pid, "VmHWM"), settled, end), "peak-rss-mb")
		b.ReportMetric(cpu/mins, "cpu-s/idle-min")
		b.ReportMetric(float64(len(reqs))/mins, "nomad-req/idle-min")
		b.ReportMetric(float64(plans)/mins, "nomad-plans/idle-min")
		b.ReportMetric(nomadCPU/mins, "nomad-cpu-s/idle-min")
		b.ReportMetric(alone/baseline.Minutes(), "nomad-alone-cpu-s/idle-min")
	}
	b.ReportMetric(float64(n), "jobs")
}

// sampleRSS reads the VmRSS of process pid every step for d, and returns
// the readings (at least one).
func sampleRSS(tb testing.TB, pid int, step, d time.Duration) []float64 {
	tb.Helper()
	tick := time.NewTicker(step)
	defer tick.Stop()
	end := time.After(d)
	var out []float64
	for {
		select {
		case <-tick.C:
			out = append(out, procStatusMB(tb, pid, "VmRSS"))
		case <-end:
			return append(out, procStatusMB(tb, pid, "VmRSS"))
		}
	}
}

// cpuOver returns the CPU seconds process pid used over a window of d.
func cpuOver(tb testing.TB, pid int, d time.Duration) float64 {
	before := procCPUSeconds(tb, pid)
	time.Sleep(d)
	return procCPUSeconds(tb, pid) - before
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every Linux Go runs on.
const clockTicks = 100

// procCPUSeconds returns the user and system CPU time of process pid, from
// /proc/<pid>/stat (fields 14 and 15).
func procCPUSeconds(tb testing.TB, pid int) float64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatalf("CPU time of process %d: %v", pid, err)
	}
	// The command name, in parentheses, may hold spaces: count after it.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		tb.Fatalf("CPU time of process %d: short /proc stat %q", pid, s)
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("CPU time of process %d: %q", pid, s)
	}
	return (utime + stime) / clockTicks
}

// procStatusMB returns a memory line of /proc/<pid>/status (VmRSS, VmHWM)
// in MiB.
func procStatusMB(tb testing.TB, pid int, key string) float64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatalf("memory of process %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}
