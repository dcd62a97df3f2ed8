package reconcile_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkScale10k measures a leader that manages 10,000 jobs (issue 14):
// parameterized batch jobs with policy auto, registered in Nomad as git
// has them before Nops starts (a shop adopting Nops), a Nops server with
// the production drift interval (1 min), full_replan_interval at its
// default (24h) and Nomad's event stream, and a webhook. Once every job is
// in sync it reports:
//
//   - nomad-req/idle-min: Nomad requests of an idle minute, every request
//     of the server counted over an idle window of 3 minutes, longer than
//     any periodic work but the safety net (the version check comes every
//     drift interval);
//   - nomad-plans/idle-hour: the plans of that window, an hour's worth;
//     safety-net-plans/hour: what the safety net adds on average, jobs /
//     full_replan_interval (paced at nomad_replan_rate when it comes);
//   - nomad-cpu-s/idle-min: Nomad's own CPU time over the idle window, a
//     minute's worth, beside nomad-alone-cpu-s/idle-min over a window as
//     long before Nops started (the jobs registered, nothing watching);
//   - commit-to-register-p50-ms: from a push webhook of a commit that
//     changes one job to Nomad's new version of it, idle;
//   - rss-mb: VmRSS of the benchmark process, which runs the Nops server
//     in-process (the harness included: rss-before-nops-mb is the same
//     process before the server started, heap-live-mb the Go heap live
//     after a collection, rss-after-gc-mb VmRSS once the free memory is
//     given back to the system);
//   - the safety net's full re-plan, forced by moving the reconcilers'
//     clock one full_replan_interval forward: replan-peak-req/s and
//     replan-mean-req/s (every Nomad request of the server, per second,
//     over the re-plan window), replan-plans (plans in the window),
//     replan-peak-plans/s (plans in its busiest second, the commits'
//     included), replan-own-peak-plans/s (the re-plan's own plans in its
//     busiest second, from the server's nops_detection_replans_total: what
//     nomad_replan_rate bounds, for jobs without a scaling block), and
//     commit-to-register-replanning-p50-ms, commits pushed meanwhile.
//
// Run it alone, with -benchtime 1x and a long -timeout:
//
//	go test -run '^$' -bench BenchmarkScale10k -benchtime 1x -timeout 60m ./reconcile/
//
// NOPS_BENCH_SCALE_JOBS changes the number of jobs, NOPS_BENCH_REPLAN_RATE
// the server's nomad_replan_rate (default 20).
func BenchmarkScale10k(b *testing.B) {
	nopstest.AgentGC(b)
	p := scaleParams{
		jobs:          benchEnvInt("NOPS_BENCH_SCALE_JOBS", testutil.BenchSize(10000, 40)),
		replanRate:    benchEnvInt("NOPS_BENCH_REPLAN_RATE", config.DefaultNomadReplanRate),
		idle:          testutil.BenchSize(3*time.Minute, 3*time.Second),
		replanWindow:  testutil.BenchSize(90*time.Second, 4*time.Second),
		commits:       testutil.BenchSize(5, 2),
		replanCommits: testutil.BenchSize(5, 1),
	}
	w := startScaleWorld(b, p)
	for b.Loop() {
		r := w.measure(b, p)
		b.ReportMetric(r.idlePerMin, "nomad-req/idle-min")
		b.ReportMetric(float64(r.idle.Operations["job.plan"].Requests)*float64(time.Hour)/float64(p.idle), "nomad-plans/idle-hour")
		b.ReportMetric(float64(p.jobs)*float64(time.Hour)/float64(w.fullReplan), "safety-net-plans/hour")
		b.ReportMetric(r.nomadCPU/p.idle.Minutes(), "nomad-cpu-s/idle-min")
		b.ReportMetric(w.nomadAloneCPU/p.idle.Minutes(), "nomad-alone-cpu-s/idle-min")
		b.ReportMetric(ms(testutil.Median(r.idleLatency)), "commit-to-register-p50-ms")
		b.ReportMetric(ms(slices.Max(r.idleLatency)), "commit-to-register-max-ms")
		b.ReportMetric(r.rssMB, "rss-mb")
		b.ReportMetric(r.rssAfterGCMB, "rss-after-gc-mb")
		b.ReportMetric(w.rssBeforeMB, "rss-before-nops-mb")
		b.ReportMetric(r.heapMB, "heap-live-mb")
		b.ReportMetric(float64(r.peak), "replan-peak-req/s")
		b.ReportMetric(r.mean, "replan-mean-req/s")
		b.ReportMetric(float64(r.plans), "replan-plans")
		b.ReportMetric(ms(testutil.Median(r.replanLatency)), "commit-to-register-replanning-p50-ms")
		b.ReportMetric(ms(slices.Max(r.replanLatency)), "commit-to-register-replanning-max-ms")
		b.ReportMetric(float64(r.peakPlans), "replan-peak-plans/s")
		b.ReportMetric(float64(r.ownPeak), "replan-own-peak-plans/s")
	}
	b.ReportMetric(float64(p.jobs), "jobs")
	b.ReportMetric(float64(p.replanRate), "replan-rate")
}

// TestScale_Smoke runs the benchmark's steps over a few jobs with short
// windows: every job in sync, an idle window without plans, commits
// registered, and a forced full re-plan that stays within the budget yet
// goes on.
func TestScale_Smoke(t *testing.T) {
	p := scaleParams{jobs: 40, replanRate: 4, idle: 3 * time.Second, replanWindow: 4 * time.Second, commits: 2}
	// No commit during the re-plan: its plans (detection's, the apply's,
	// and detection's again on the live change) are not paced.
	w := startScaleWorld(t, p)
	r := w.measure(t, p)
	// 40 jobs come due at once at 4 a second: most still wait at the end
	// of the window, and none waits that has been re-planned (but for the
	// re-plans of a cycle under way when the two were read: the pending
	// count is the last finished cycle's).
	if r.pending == 0 || r.pending+r.own > uint64(p.jobs+p.replanRate) {
		t.Errorf("nops_detection_replans_pending %d at the end of the re-plan window, with %d of %d jobs re-planned", r.pending, r.own, p.jobs)
	}
	// A server that stops leading has none pending.
	w.s.Shutdown()
	if v, err := testutil.MetricValue(w.s.Metrics(), "nops_detection_replans_pending"); err != nil || v != 0 {
		t.Errorf("nops_detection_replans_pending %v, %v once the server stopped leading", v, err)
	}
	if r.idle.Operations["job.plan"].Requests != 0 || r.idle.Operations["jobs.parse"].Requests != 0 {
		t.Errorf("an idle window planned or parsed: %s", r.idle)
	}
	if r.peakPlans > uint64(p.replanRate) {
		t.Errorf("%d plans in one second of the re-plan, budget %d a second", r.peakPlans, p.replanRate)
	}
	if r.plans < uint64(p.replanRate) || r.plans >= uint64(p.jobs) {
		t.Errorf("%d re-plans in %s over %d jobs at %d a second: not paced, or not going on", r.plans, p.replanWindow, p.jobs, p.replanRate)
	}
	// The server's own count of its re-plans: the plans of the window,
	// which are all re-plans here, within a second's worth at its ends.
	if r.ownPeak > uint64(p.replanRate) || r.own+uint64(p.replanRate) < r.plans || r.own > r.plans+uint64(p.replanRate) {
		t.Errorf("nops_detection_replans_total counted %d re-plans (%d in its busiest second) where Nomad saw %d plans, at %d a second",
			r.own, r.ownPeak, r.plans, p.replanRate)
	}
}

type scaleParams struct {
	jobs, replanRate int
	idle             time.Duration
	replanWindow     time.Duration
	// commits are pushed while idle, replanCommits during the re-plan.
	commits, replanCommits int
}

type scaleWorld struct {
	*benchWorld
	// offset shifts the reconcilers' clock from the real time.
	offset      atomic.Int64
	drift       time.Duration
	fullReplan  time.Duration
	rev         map[string]int
	rssBeforeMB float64
	// nomadAloneCPU is Nomad's CPU time over an idle window before Nops
	// started.
	nomadAloneCPU float64
}

func scaleJobID(i int) string { return fmt.Sprintf("job-%05d", i) }

func (w *scaleWorld) now() time.Time { return time.Now().Add(time.Duration(w.offset.Load())) }

// startScaleWorld registers p.jobs managed jobs in Nomad as a git repository
// has them and starts a Nops server that watches the repository, then
// waits until it sees every job in sync and watches Nomad's events.
func startScaleWorld(tb testing.TB, p scaleParams) *scaleWorld {
	tb.Helper()
	w := &scaleWorld{benchWorld: &benchWorld{nomad: testutil.StartNomad(tb), repo: testutil.NewGitRepo(tb), n: p.jobs,
		secret: "bench-secret"}, drift: time.Minute, fullReplan: config.DefaultFullReplanInterval, rev: map[string]int{}}
	hcl := make(map[string]string, p.jobs)
	for i := range p.jobs {
		id := scaleJobID(i)
		hcl[id] = benchJobHCL(id, structs.PolicyAuto, 0)
		w.repo.WriteFile(jobFile(id), hcl[id])
	}
	w.repo.Commit("jobs")
	w.repo.Pack()

	start := time.Now()
	registerInNomad(tb, w.nomad, hcl, 8)
	progress(tb, "registered %d jobs in Nomad in %s", p.jobs, time.Since(start).Round(time.Millisecond))
	hcl = nil
	w.rssBeforeMB = rssMB(tb)
	w.nomadAloneCPU = cpuOver(tb, w.nomad.Pid(), p.idle)

	tb.Setenv(benchSecretEnv, w.secret)
	w.url = w.repo.ServeHTTP(tb)
	start = time.Now()
	w.s = nopstest.Start(tb, "", nopstest.WithNomad(w.nomad.Addr), nopstest.WithRepo("main", w.url, "main", lcRepoPath),
		nopstest.WithClockFunc(w.now),
		nopstest.WithConfig(func(c *config.Config) {
			c.DriftInterval, c.EngineInterval = w.drift, config.DefaultEngineInterval
			c.NomadEventStream = true
			c.NomadReplanRate = p.replanRate
			c.FullReplanInterval = w.fullReplan
			// The Go profiler on the HTTP API, to look inside a run.
			c.EnableDebug = true
			c.Webhook.SecretEnv = benchSecretEnv
			for i := range c.Repositories {
				c.Repositories[i].PollInterval = time.Hour
			}
		}))
	w.m = w.s.Manager()
	progress(tb, "server at %s (profiles under /debug/pprof)", w.s.URL)
	shown := time.Now()
	testutil.WaitForResult(tb, 30*time.Minute, func() (bool, error) {
		in, err := jobsInSync(w.s)
		if err != nil {
			return false, err
		}
		if in != p.jobs {
			if time.Since(shown) > 30*time.Second {
				shown = time.Now()
				progress(tb, "%d of %d jobs in sync after %s: %s", in, p.jobs, time.Since(start).Round(time.Second), w.m.Nomad().Stats())
			}
			return false, fmt.Errorf("%d of %d jobs in sync", in, p.jobs)
		}
		return w.m.WatchingEvents(), fmt.Errorf("the event stream is not up")
	})
	progress(tb, "first detection over %d jobs done in %s: %s", p.jobs, time.Since(start).Round(time.Millisecond), w.m.Nomad().Stats())
	// Let the cycles that the stream's replay of the registrations
	// triggers run out.
	time.Sleep(min(5*time.Second, p.idle))
	return w
}

type scaleResult struct {
	idle       nomadx.Stats
	idlePerMin float64
	// nomadCPU is Nomad's CPU time over the idle window.
	nomadCPU                   float64
	idleLatency, replanLatency []time.Duration
	rssMB, rssAfterGCMB        float64
	heapMB                     float64
	peak, peakPlans            uint64
	mean                       float64
	plans                      uint64
	// ownPeak and own are the re-plan's own plans (the server's
	// nops_detection_replans_total{result="planned"}) in the busiest
	// second and in the whole window: peakPlans adds the plans of the
	// commits pushed meanwhile, which are not paced.
	ownPeak, own uint64
	// pending is nops_detection_replans_pending at the window's end.
	pending uint64
}

func (w *scaleWorld) measure(tb testing.TB, p scaleParams) scaleResult {
	var r scaleResult
	before, cpu := w.m.Nomad().Stats(), procCPUSeconds(tb, w.nomad.Pid())
	time.Sleep(p.idle)
	r.idle = w.m.Nomad().Stats().Sub(before)
	r.nomadCPU = procCPUSeconds(tb, w.nomad.Pid()) - cpu
	r.idlePerMin = float64(r.idle.Requests) / p.idle.Minutes()
	progress(tb, "idle %s: %s", p.idle, r.idle)

	next := 0
	change := func() time.Duration {
		// Jobs spread over the key order, since a cycle walks it.
		id := scaleJobID(next * 997 % p.jobs)
		next++
		return w.commitOne(tb, id)
	}
	for range p.commits {
		r.idleLatency = append(r.idleLatency, change())
		time.Sleep(time.Second)
	}
	r.rssMB = rssMB(tb)
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	r.heapMB = float64(mem.HeapAlloc) / (1 << 20)
	// What the process holds once the garbage (much of it the harness's:
	// its registrations, its polls of 10,000 statuses) is given back.
	debug.FreeOSMemory()
	r.rssAfterGCMB = rssMB(tb)

	// Force the safety net's full re-plan: every job's last plan is now
	// one full_replan_interval old.
	w.offset.Add(int64(w.fullReplan + time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	var perSecond, plansPerSecond, ownPerSecond []uint64
	own0, err := w.replanned()
	if err != nil {
		tb.Fatal(err)
	}
	// sampleErr is the ticker's first error, for this goroutine to fail on.
	var sampleErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, lastOwn := w.m.Nomad().Stats(), own0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s := w.m.Nomad().Stats()
			own, err := w.replanned()
			if err != nil {
				sampleErr = err
				return
			}
			d := s.Sub(last)
			perSecond = append(perSecond, d.Requests)
			plansPerSecond = append(plansPerSecond, d.Operations["job.plan"].Requests)
			ownPerSecond = append(ownPerSecond, own-lastOwn)
			last, lastOwn = s, own
		}
	}()
	start := w.m.Nomad().Stats()
	w.s.Trigger()
	gap := p.replanWindow / time.Duration(p.replanCommits+1)
	began := time.Now()
	for i := range p.replanCommits {
		time.Sleep(time.Until(began.Add(time.Duration(i+1) * gap)))
		r.replanLatency = append(r.replanLatency, change())
	}
	time.Sleep(time.Until(began.Add(p.replanWindow)))
	cancel()
	<-done
	d := w.m.Nomad().Stats().Sub(start)
	r.plans = d.Operations["job.plan"].Requests
	r.peak, r.peakPlans = slices.Max(perSecond), slices.Max(plansPerSecond)
	if sampleErr != nil {
		tb.Fatal(sampleErr)
	}
	own, err := w.replanned()
	if err != nil {
		tb.Fatal(err)
	}
	r.ownPeak, r.own = slices.Max(ownPerSecond), own-own0
	pending, err := testutil.MetricValue(w.s.Metrics(), "nops_detection_replans_pending")
	if err != nil {
		tb.Fatal(err)
	}
	r.pending = uint64(pending)
	r.mean = float64(d.Requests) / time.Since(began).Seconds()
	progress(tb, "re-plan window %s: %s; requests a second: %v; the re-plan's own plans a second: %v", p.replanWindow, d, perSecond, ownPerSecond)
	progress(tb, "commit to register: idle %v, during the re-plan %v", r.idleLatency, r.replanLatency)
	return r
}

// replanned returns the server's nops_detection_replans_total: the
// periodic re-plans it has made.
func (w *scaleWorld) replanned() (uint64, error) {
	v, err := testutil.MetricValue(w.s.Metrics(), "nops_detection_replans_total")
	return uint64(v), err
}

// commitOne commits a change of job id, posts a signed push and returns the
// time from the post to Nomad's new version of the job.
func (w *scaleWorld) commitOne(tb testing.TB, id string) time.Duration {
	w.rev[id]++
	live, _, err := w.nomad.Client.Jobs().Info(id, nil)
	if err != nil {
		tb.Fatal(err)
	}
	w.repo.WriteFile(jobFile(id), benchJobHCL(id, structs.PolicyAuto, w.rev[id]))
	commit := w.repo.Commit("change " + id)
	body := githubPush(w.url, "main", commit)
	start := time.Now()
	if code, raw := postWebhook(tb, w.s.URL, body, map[string]string{"X-Hub-Signature-256": githubSignature(w.secret, body)}); code != 200 {
		tb.Fatalf("webhook: %d %s", code, raw)
	}
	fetched := time.Since(start)
	index := *live.ModifyIndex
	for time.Since(start) < 2*time.Minute {
		j, meta, err := w.nomad.Client.Jobs().Info(id, &nomadapi.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second})
		if err == nil && *j.Version > *live.Version {
			d := time.Since(start)
			// Where the time went, on the server's clock.
			var created, register time.Duration
			for _, dep := range w.s.Deployments("default", id) {
				if dep.Commit == commit {
					off := time.Duration(w.offset.Load())
					created, register = dep.CreatedAt.Add(-off).Sub(start), dep.RegisterStartedAt.Add(-off).Sub(start)
				}
			}
			progress(tb, "commit of %s: webhook answered (fetched) after %s, deployment created after %s, register began after %s, new version after %s",
				id, fetched.Round(time.Millisecond), created.Round(time.Millisecond), register.Round(time.Millisecond), d.Round(time.Millisecond))
			return d
		}
		if err == nil {
			index = meta.LastIndex
		}
	}
	tb.Fatalf("Nomad never saw the push of commit %s", commit[:8])
	return 0
}

// rssMB is the resident set of this process, from /proc/self/status.
func rssMB(tb testing.TB) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		progress(tb, "no resident set size: %v", err)
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

// progress logs a step; a benchmark's log shows only at its end, so it
// goes to stderr at once too.
func progress(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Logf(format, args...)
	if _, ok := tb.(*testing.B); ok {
		fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
	}
}
