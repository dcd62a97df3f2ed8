package reconcile_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkMemory1k measures the memory of one `nops serve` process of the
// built binary, as an operator runs it (its own heap, and the GC policy
// `nops serve` sets from gc_min_heap), that manages 1,000 jobs in sync:
// parameterized batch jobs registered in Nomad as git has them before the
// server starts, the production drift and engine intervals (1 min, 5 s) and Nomad's event
// stream, the repository fetched over HTTP (benchRepoURL; NOPS_BENCH_GIT=file
// for its file:// URL). Once every job is in sync and the stream is up, the server is
// left alone for a settle window (10 idle minutes, ten drift intervals),
// and the benchmark reports:
//
//   - settled-RSS-MiB: the server's VmRSS at the end of the settle window;
//   - settled-RSS-anon-MiB: the anonymous part of it (RssAnon: the heap,
//     stacks and runtime structures), without the pages of the binary
//     the process maps from its file;
//   - peak-RSS-MiB: its VmHWM, the most it held over its life (the first
//     detection included);
//   - first-detection-RSS-MiB: its VmRSS when every job was first in sync;
//   - heap-inuse-MiB, heap-alloc-MiB and go-sys-MiB: the Go runtime's
//     HeapInuse, HeapAlloc and Sys at the end (from the server's /metrics);
//   - cpu-s/idle-min: the server's CPU seconds (user and system) per
//     minute of the settle window.
//
// NOPS_BENCH_MEMORY_JOBS changes the number of jobs, NOPS_BENCH_MEMORY_SETTLE
// the settle window (a duration), NOPS_BENCH_MEMORY_ARGS adds flags to the
// server's command line (e.g. "-gc-min-heap 0"), and NOPS_BENCH_HEAP_PROFILE
// names a file to write the server's heap profile to at the end (for `go
// tool pprof`; the server then runs with enable_debug, and samples its
// allocations for the profile). Run it alone:
//
//	go test -run '^$' -bench BenchmarkMemory1k -benchtime 1x -timeout 30m ./reconcile/
func BenchmarkMemory1k(b *testing.B) {
	benchMemory(b, testutil.BenchSize(1000, 40), testutil.BenchSize(10*time.Minute, 3*time.Second))
}

// BenchmarkMemory10k is BenchmarkMemory1k over 10,000 jobs with a settle
// window of 3 minutes: the memory of a leader at scale, in a process of
// its own (BenchmarkScale10k's server shares its process with the
// benchmark's own data).
func BenchmarkMemory10k(b *testing.B) {
	benchMemory(b, testutil.BenchSize(10000, 40), testutil.BenchSize(3*time.Minute, 3*time.Second))
}

func benchMemory(b *testing.B, jobs int, settle time.Duration) {
	p := memoryParams{jobs: benchEnvInt("NOPS_BENCH_MEMORY_JOBS", jobs), settle: settle}
	if v := os.Getenv("NOPS_BENCH_MEMORY_SETTLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("NOPS_BENCH_MEMORY_SETTLE: %v", err)
		}
		p.settle = d
	}
	p.args = strings.Fields(os.Getenv("NOPS_BENCH_MEMORY_ARGS"))
	w := startMemoryWorld(b, p)
	for b.Loop() {
		r := w.measure(b, p)
		b.ReportMetric(r.settled, "settled-RSS-MiB")
		b.ReportMetric(r.peak, "peak-RSS-MiB")
		b.ReportMetric(r.anon, "settled-RSS-anon-MiB")
		b.ReportMetric(w.firstRSS, "first-detection-RSS-MiB")
		b.ReportMetric(r.heapInuse, "heap-inuse-MiB")
		b.ReportMetric(r.heapAlloc, "heap-alloc-MiB")
		b.ReportMetric(r.sys, "go-sys-MiB")
		b.ReportMetric(r.cpuPerMin, "cpu-s/idle-min")
	}
	b.ReportMetric(float64(p.jobs), "jobs")
}

// TestMemory_Smoke runs the benchmark's steps over a few jobs with a short
// settle window: the server brings every job in sync, and the figures it
// gives are those of a live process.
func TestMemory_Smoke(t *testing.T) {
	p := memoryParams{jobs: 20, settle: 2 * time.Second}
	w := startMemoryWorld(t, p)
	r := w.measure(t, p)
	if r.settled <= 0 || r.peak < r.settled || r.heapInuse <= 0 || r.sys < r.heapInuse {
		t.Errorf("figures of a live server: settled RSS %.1f MiB, peak %.1f MiB, heap in use %.1f MiB, Go sys %.1f MiB", r.settled, r.peak, r.heapInuse, r.sys)
	}
}

type memoryParams struct {
	jobs   int
	settle time.Duration
	args   []string
}

type memoryWorld struct {
	nomad    *testutil.NomadAgent
	server   *nopstest.Process
	firstRSS float64
}

type memoryResult struct {
	settled, peak, anon       float64
	heapInuse, heapAlloc, sys float64
	cpuPerMin                 float64
}

// startMemoryWorld registers p.jobs managed jobs in Nomad as a git
// repository has them, starts one `nops serve` process that watches the
// repository, and waits until it sees every job in sync and watches
// Nomad's events.
func startMemoryWorld(tb testing.TB, p memoryParams) *memoryWorld {
	tb.Helper()
	w := &memoryWorld{nomad: testutil.StartNomad(tb)}
	repo := testutil.NewGitRepo(tb)
	hcl := make(map[string]string, p.jobs)
	for i := range p.jobs {
		id := scaleJobID(i)
		hcl[id] = benchJobHCL(id, structs.PolicyAuto, 0)
		repo.WriteFile(jobFile(id), hcl[id])
	}
	repo.Commit("jobs")
	repo.Pack()
	start := time.Now()
	registerInNomad(tb, w.nomad, hcl, 8)
	progress(tb, "registered %d jobs in Nomad in %s", p.jobs, time.Since(start).Round(time.Millisecond))

	// As production runs it: the Go profiler (and the runtime's sampling
	// of allocations for it) only when a heap profile is asked for.
	args := []string{"-insecure-rpc", "-drift-interval", "1m", "-engine-interval", config.DefaultEngineInterval.String(),
		"-nomad-event-stream=true", "-log-level", "info"}
	if os.Getenv("NOPS_BENCH_HEAP_PROFILE") != "" {
		args = append(args, "-enable-debug")
	}
	args = append(args, p.args...)
	start = time.Now()
	c := nopstest.StartProcessCluster(tb, 1, w.nomad.Addr, benchRepoURL(tb, repo)+"#main:"+lcRepoPath, args...)
	w.server = c.Server(c.Leader())
	shown := time.Now()
	testutil.WaitForResult(tb, 30*time.Minute, func() (bool, error) {
		in, err := processJobsInSync(w.server)
		if err != nil {
			return false, err
		}
		if in != p.jobs {
			if time.Since(shown) > 30*time.Second {
				shown = time.Now()
				progress(tb, "%d of %d jobs in sync after %s", in, p.jobs, time.Since(start).Round(time.Second))
			}
			return false, fmt.Errorf("%d of %d jobs in sync", in, p.jobs)
		}
		up, err := processMetric(w.server.URL, "nops_nomad_event_stream_up")
		if err != nil {
			return false, err
		}
		return up == 1, fmt.Errorf("the event stream is not up")
	})
	w.firstRSS = procStatusMiB(tb, w.server.PID(), "VmRSS")
	progress(tb, "first detection over %d jobs done in %s, RSS %.1f MiB", p.jobs, time.Since(start).Round(time.Millisecond), w.firstRSS)
	return w
}

// measure leaves the server alone for the settle window and reads its
// memory.
func (w *memoryWorld) measure(tb testing.TB, p memoryParams) memoryResult {
	var r memoryResult
	pid := w.server.PID()
	cpu0 := procCPU(tb, pid)
	// The resident set every few seconds (about 40 samples in the
	// window), to show how it settles.
	step := max(time.Second, p.settle/40)
	var mu sync.Mutex
	var samples []float64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(step)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			v := procStatusMiB(tb, pid, "VmRSS")
			mu.Lock()
			samples = append(samples, v)
			mu.Unlock()
		}
	}()
	time.Sleep(p.settle)
	close(stop)
	<-done
	r.cpuPerMin = (procCPU(tb, pid) - cpu0).Seconds() / p.settle.Minutes()
	r.settled = procStatusMiB(tb, pid, "VmRSS")
	r.peak = procStatusMiB(tb, pid, "VmHWM")
	r.anon = procStatusMiB(tb, pid, "RssAnon")
	stats := heapStats(tb, w.server.URL)
	r.heapInuse, r.heapAlloc, r.sys = stats["HeapInuse"]/(1<<20), stats["HeapAlloc"]/(1<<20), stats["Sys"]/(1<<20)
	mu.Lock()
	progress(tb, "settle %s: RSS every %s %s MiB; settled %.1f MiB (anonymous %.1f MiB), peak %.1f MiB, heap in use %.1f MiB, heap alloc %.1f MiB, Go sys %.1f MiB, %.2f CPU s/min",
		p.settle, step, fmtMiB(samples), r.settled, r.anon, r.peak, r.heapInuse, r.heapAlloc, r.sys, r.cpuPerMin)
	mu.Unlock()
	if path := os.Getenv("NOPS_BENCH_HEAP_PROFILE"); path != "" {
		saveHeapProfile(tb, w.server.URL, path)
	}
	return r
}

func fmtMiB(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// processJobsInSync counts the jobs in sync that a server process lists.
func processJobsInSync(p *nopstest.Process) (int, error) {
	var list []*structs.JobSummary
	if _, _, err := p.Call(http.MethodGet, "/v1/jobs", nil, &list); err != nil {
		return 0, err
	}
	in := 0
	for _, j := range list {
		if j.JobStatus != nil && j.Sync == structs.SyncInSync {
			in++
		}
	}
	return in, nil
}

// processMetric reads one unlabelled metric of a server process.
func processMetric(url, name string) (float64, error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// A metric of the reconcilers carries its cluster label:
		// name{cluster="default"} 1.
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		fields := strings.Fields(line)
		return strconv.ParseFloat(fields[len(fields)-1], 64)
	}
	return 0, fmt.Errorf("no %s in the metrics of %s", name, url)
}

// procStatusMiB reads a field of /proc/<pid>/status given in kB, in MiB.
func procStatusMiB(tb testing.TB, pid int, field string) float64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatalf("status of process %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				tb.Fatalf("%s of process %d: %v", field, pid, err)
			}
			return kb / 1024
		}
	}
	tb.Fatalf("no %s in the status of process %d", field, pid)
	return 0
}

// procCPU returns the user and system CPU time of a process, from
// /proc/<pid>/stat (in clock ticks of 10 ms).
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatalf("stat of process %d: %v", pid, err)
	}
	// utime and stime are fields 14 and 15, the 12th and 13th after the
	// command name, which is in parentheses.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	var total time.Duration
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatalf("stat of process %d: %v", pid, err)
		}
		total += time.Duration(n) * 10 * time.Millisecond
	}
	return total
}

// heapStats reads the Go runtime's memory figures a server exports on
// /metrics (HeapInuse, HeapAlloc and Sys, as runtime.MemStats names them).
func heapStats(tb testing.TB, url string) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for k, metric := range map[string]string{"HeapInuse": "go_memstats_heap_inuse_bytes",
		"HeapAlloc": "go_memstats_heap_alloc_bytes", "Sys": "go_memstats_sys_bytes"} {
		v, err := processMetric(url, metric)
		if err != nil {
			tb.Fatalf("%s of %s: %v", k, url, err)
		}
		out[k] = v
	}
	return out
}

// saveHeapProfile writes a server's heap profile (after a collection) to
// path.
func saveHeapProfile(tb testing.TB, url, path string) {
	tb.Helper()
	if err := saveProfile(url+"/debug/pprof/heap?gc=1", path); err != nil {
		tb.Fatalf("heap profile of %s: %v", url, err)
	}
	progress(tb, "heap profile written to %s", path)
}

// saveProfile writes the profile a server answers at url to path.
func saveProfile(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	if err == nil {
		err = os.WriteFile(path, raw, 0o644)
	}
	return err
}
