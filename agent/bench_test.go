package agent_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// Cluster benchmarks, on three in-process servers with real TCP on
// loopback and Raft's default timings (a cluster with -bootstrap-expect
// above 1 uses them). Each reports the median of its runs as a metric:
//
//	go test ./agent/ -run '^$' -bench . -benchtime 5x

// BenchmarkFailover_KillLeaderToFirstCycle measures, per run, the time from
// the kill of the leader (no leave) to the end of the first detection cycle
// the new leader completes over a real git repository and a real Nomad:
// election, barrier, leader loops, git fetch, parse and plan. It reports the
// time to a new established leader as well. The killed server is restarted
// between runs, out of the timer.
func BenchmarkFailover_KillLeaderToFirstCycle(b *testing.B) {
	nomad := testutil.StartNomad(b)
	repo := testutil.NewGitRepoWith(b, "web", map[string]string{
		"jobs/web.nomad.hcl": testutil.ServiceJobHCL("web", testutil.WithManaged("none")),
	})
	c := nopstest.StartCluster(b, 3, nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("ops", repo.URL(), "main", "jobs"))
	ids := c.NodeIDs()

	var toLeader, toCycle []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		old := c.WaitForLeader(30 * time.Second)
		c.WaitForPeers(30*time.Second, ids...)
		// The current leader has finished a cycle: a cycle recorded
		// after the kill is the new leader's.
		if _, _, err := waitForCycle(c, old.NodeID(), time.Time{}, time.Minute); err != nil {
			b.Fatal(err)
		}
		idx := c.Index(old)
		b.StartTimer()

		start := time.Now()
		c.Kill(idx)
		elected, finished, err := waitForCycle(c, "", start, time.Minute)
		if err != nil {
			b.Fatal(err)
		}

		b.StopTimer()
		toLeader = append(toLeader, elected.Sub(start))
		toCycle = append(toCycle, finished.Sub(start))
		b.Logf("run %d: leader killed; new leader after %s, its first cycle done after %s", i,
			elected.Sub(start).Round(time.Millisecond), finished.Sub(start).Round(time.Millisecond))
		c.Start(idx)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(testutil.Percentile(toLeader, 0.5).Seconds(), "s-to-leader-p50")
	b.ReportMetric(testutil.Percentile(toCycle, 0.5).Seconds(), "s-to-first-cycle-p50")
	b.ReportMetric(testutil.Percentile(toCycle, 1).Seconds(), "s-to-first-cycle-max")
}

// waitForCycle polls the running servers every few milliseconds until one
// of them leads (the server with node ID by, when by is not empty) and its
// state holds a detection cycle of its own that saw the job and finished
// after since. It returns when the leader was first seen established, and
// when its cycle finished (as the leader recorded it).
func waitForCycle(c *nopstest.Cluster, by string, since time.Time, timeout time.Duration) (elected, finished time.Time, err error) {
	deadline := time.Now().Add(timeout)
	last := "no leader"
	for time.Now().Before(deadline) {
		for _, s := range c.Servers() {
			if !s.IsLeader() || (by != "" && s.NodeID() != by) {
				continue
			}
			if elected.IsZero() {
				elected = time.Now()
			}
			cycle, err := s.State().DetectionCycle()
			if err != nil {
				return elected, finished, err
			}
			if cycle != nil && cycle.Leader == s.NodeID() && cycle.Jobs >= 1 && cycle.FinishedAt.After(since) {
				return elected, cycle.FinishedAt, nil
			}
			last = fmt.Sprintf("leader %s: last cycle %+v", s.Config().NodeName, cycle)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return elected, finished, fmt.Errorf("no detection cycle after %s: %s", timeout, last)
}

// writer sends window writes to one server over a kept-alive connection,
// with token when it is set.
type writer struct {
	s      *nopstest.Server
	client *http.Client
	token  string
}

func newWriter(s *nopstest.Server) *writer {
	return &writer{s: s, client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}}}
}

// windowBody is the sync window the write benchmarks put.
const windowBody = `{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`

// put writes sync window name: one Raft entry.
func (w *writer) put(name string) error {
	req, err := http.NewRequest("PUT", w.s.URL+"/v1/window/"+name, strings.NewReader(windowBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if w.token != "" {
		req.Header.Set("X-Nops-Token", w.token)
	}
	resp, err := w.client.Do(req)
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

// loadWriter is one writer of a load test, as lean as a load generator
// (wrk, hey) would be: one kept-alive connection of its own, each request
// written whole in one write, and the answer read by net/http's own
// parser, whose status and body are checked as writer.put checks them. It
// skips what net/http's client adds per request: the Transport's pool and
// the two goroutines each connection hands every request through.
type loadWriter struct {
	// addr is the server's host and port; bad says why there is none.
	addr string
	bad  error
	conn net.Conn
	br   *bufio.Reader
	req  []byte
}

func newLoadWriter(url string) *loadWriter {
	addr, ok := strings.CutPrefix(url, "http://")
	if !ok {
		return &loadWriter{bad: fmt.Errorf("a load writer speaks plain HTTP, not to %s", url)}
	}
	return &loadWriter{addr: addr}
}

// put writes sync window name, as writer.put does. A request on a
// connection the server closed fails (net/http's client would retry it
// once when nothing was written); the next put connects again. Every
// connection of the benchmark is busy throughout, so none goes stale.
func (w *loadWriter) put(name string) error {
	if err := w.roundTrip(name); err != nil {
		return fmt.Errorf("PUT window %s to %s: %w", name, w.addr, err)
	}
	return nil
}

func (w *loadWriter) roundTrip(name string) error {
	if w.bad != nil {
		return w.bad
	}
	if w.conn == nil {
		conn, err := net.DialTimeout("tcp", w.addr, 5*time.Second)
		if err != nil {
			return err
		}
		w.conn, w.br = conn, bufio.NewReader(conn)
	}
	w.req = fmt.Appendf(w.req[:0], "PUT /v1/window/%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		name, w.addr, len(windowBody), windowBody)
	_ = w.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := w.conn.Write(w.req); err != nil {
		w.close()
		return err
	}
	resp, err := http.ReadResponse(w.br, nil)
	if err != nil {
		w.close()
		return err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.Close {
		w.close()
	}
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%d %s", resp.StatusCode, raw)
	}
	return nil
}

func (w *loadWriter) close() {
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
}

// BenchmarkWrite_ThroughFollower measures the latency of one write sent to
// a follower, forwarded to the leader, committed by a quorum and applied:
// one writer, one write at a time.
func BenchmarkWrite_ThroughFollower(b *testing.B) { benchWriteThroughFollower(b) }

// BenchmarkWrite_ThroughFollowerMTLS is BenchmarkWrite_ThroughFollower
// with mutual TLS on the RPC port: the forward and Raft's replication run
// over TLS (the API itself stays plain HTTP).
func BenchmarkWrite_ThroughFollowerMTLS(b *testing.B) {
	benchWriteThroughFollower(b, nopstest.WithTLS(nopstest.NewTLS(b, ""), false))
}

func benchWriteThroughFollower(b *testing.B, opts ...nopstest.Option) {
	nopstest.AgentGC(b)
	c := nopstest.StartCluster(b, 3, append([]nopstest.Option{nopstest.WithoutReconcilers()}, opts...)...)
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	w := newWriter(c.Followers()[0])
	// Warm the forwarding connection.
	if err := w.put("warm"); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := w.put(fmt.Sprintf("w-%d", i%100)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(testutil.Percentile(lat, 0.5).Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(testutil.Percentile(lat, 0.99).Microseconds())/1000, "ms-p99")
}

// BenchmarkWrite_Throughput measures the writes per second a three-server
// cluster sustains with 32 concurrent writers spread over the three
// servers' APIs (two thirds of them forwarded). The writers are lean load
// generators (loadWriter), as a load test's clients on other machines
// would be: on this machine they share the servers' two cores.
func BenchmarkWrite_Throughput(b *testing.B) { benchWriteThroughput(b, false, false) }

// BenchmarkWrite_ThroughputToLeader is BenchmarkWrite_Throughput with
// every writer on the leader's API: the cluster's commit capacity without
// the cost of forwarding.
func BenchmarkWrite_ThroughputToLeader(b *testing.B) { benchWriteThroughput(b, true, false) }

// BenchmarkWrite_ThroughputNetHTTP is BenchmarkWrite_Throughput with
// writers that use net/http's client (a Transport with its connection pool
// and its two goroutines a connection), as the earlier figures did: the
// difference is the CPU that the writers' client takes from the servers.
func BenchmarkWrite_ThroughputNetHTTP(b *testing.B) { benchWriteThroughput(b, false, true) }

func benchWriteThroughput(b *testing.B, toLeader, netHTTP bool) {
	nopstest.AgentGC(b)
	const writers = 32
	c := nopstest.StartCluster(b, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.WaitForLeader(30 * time.Second)
	var ws []*writer
	for _, s := range c.Servers() {
		if !toLeader || s.NodeID() == leader.NodeID() {
			ws = append(ws, newWriter(s))
		}
	}
	// Warm every forwarding connection pool a little, out of the timer.
	for _, w := range ws {
		if err := w.put("warm"); err != nil {
			b.Fatal(err)
		}
	}
	before := logBatches(b, c)
	b.ResetTimer()
	cpu0 := cpuTime(b)
	elapsed, err := driveWriters(b.N, writers, func(g int) (func(string) error, func()) {
		w := ws[g%len(ws)]
		if netHTTP {
			return w.put, func() {}
		}
		lw := newLoadWriter(w.s.URL)
		return lw.put, lw.close
	})
	cpu := cpuTime(b) - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	after := logBatches(b, c)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
	// The CPU the whole process (three servers and the writers) spent per
	// write: the figure that holds on a machine shared with other work.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/write")
	// Writes per log write (one disk sync each) on the leader, what its
	// group commit gathered; writes per log entry (batch entries); and
	// entries per log write on the followers, what an AppendEntries held.
	var fb, fe float64
	for _, s := range c.Servers() {
		d := after[s.NodeID()].sub(before[s.NodeID()])
		if s.NodeID() == leader.NodeID() {
			b.ReportMetric(d.writes/max(d.batches, 1), "leader-writes/sync")
			b.ReportMetric(d.writes/max(d.entries, 1), "writes/entry")
			continue
		}
		fb, fe = fb+d.batches, fe+d.entries
	}
	b.ReportMetric(fe/max(fb, 1), "follower-entries/sync")
}

// driveWriters has writers goroutines share n window puts, writer g
// through the put that open(g) gives (and closes once it is done), and
// returns the time they took and the first writer error (a writer stops at
// its first).
func driveWriters(n, writers int, open func(g int) (put func(string) error, done func())) (time.Duration, error) {
	var next atomic.Int64
	// failed keeps the first writer's error (errors of several types).
	var failed atomic.Pointer[error]
	start := time.Now()
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			put, done := open(g)
			defer done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := put(fmt.Sprintf("t-%d", i%500)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		return elapsed, *err
	}
	return elapsed, nil
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type logCounts struct{ batches, entries, writes float64 }

func (l logCounts) sub(o logCounts) logCounts {
	return logCounts{l.batches - o.batches, l.entries - o.entries, l.writes - o.writes}
}

// logBatches reads each server's Raft log store counters and the writes it
// proposed, by node ID.
func logBatches(b *testing.B, c *nopstest.Cluster) map[string]logCounts {
	out := map[string]logCounts{}
	for _, s := range c.Servers() {
		var lc logCounts
		for name, v := range map[string]*float64{
			"nops_raft_log_store_batches_total": &lc.batches,
			"nops_raft_log_store_entries_total": &lc.entries,
			"nops_raft_proposed_writes_total":   &lc.writes,
		} {
			n, err := testutil.MetricValue(s.Metrics(), name)
			if err != nil {
				b.Fatalf("server %s: %v", s.NodeID(), err)
			}
			*v = n
		}
		if lc.batches == 0 {
			b.Fatalf("server %s reports no Raft log batches", s.NodeID())
		}
		out[s.NodeID()] = lc
	}
	return out
}

// BenchmarkWrite_ThroughputProcesses is BenchmarkWrite_Throughput against a
// cluster of three `nops serve` processes of the built binary, as an
// operator runs them: each server has its own scheduler, heap and
// collector (with the GC floor `nops serve` sets), where the in-process
// cluster shares one of each among the three. The 32 lean writers run in
// the test process, spread over the servers; the machine, its two cores
// and its disk are the same. The servers' Nomad address is closed (their
// reconcilers find no Nomad and wait), and the repository holds no job.
// cpu-us/write adds the three servers' CPU to the test process's; B/op and
// allocs/op are the test process's (the writers') alone.
func BenchmarkWrite_ThroughputProcesses(b *testing.B) {
	const writers = 32
	repo := testutil.NewGitRepo(b)
	repo.WriteFile("jobs/README", "no jobs")
	repo.Commit("empty")
	c := nopstest.StartProcessCluster(b, 3, testutil.ClosedAddress(b), repo.URL()+"#main:jobs", "-log-level", "info")
	c.WaitForCluster()
	var urls []string
	for i := range c.Len() {
		urls = append(urls, c.Server(i).URL)
	}
	for _, u := range urls {
		lw := newLoadWriter(u)
		if err := lw.put("warm"); err != nil {
			b.Fatal(err)
		}
		lw.close()
	}
	batches0 := processCounter(b, c.Server(c.Leader()).URL, "nops_raft_log_store_batches_total")
	writes0 := processCounter(b, c.Server(c.Leader()).URL, "nops_raft_proposed_writes_total")
	b.ResetTimer()
	cpu0 := cpuTime(b) + processCPU(b, c)
	elapsed, err := driveWriters(b.N, writers, func(g int) (func(string) error, func()) {
		lw := newLoadWriter(urls[g%len(urls)])
		return lw.put, lw.close
	})
	cpu := cpuTime(b) + processCPU(b, c) - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	leader := c.Server(c.Leader()).URL
	batches := processCounter(b, leader, "nops_raft_log_store_batches_total") - batches0
	writes := processCounter(b, leader, "nops_raft_proposed_writes_total") - writes0
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/write")
	b.ReportMetric(writes/max(batches, 1), "leader-writes/sync")
}

// processCPU returns the user and system CPU time the cluster's server
// processes have used, from /proc/<pid>/stat (in clock ticks of 10 ms).
func processCPU(b *testing.B, c *nopstest.ProcessCluster) time.Duration {
	var total time.Duration
	for i := range c.Len() {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Server(i).PID()))
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command name, which is in parentheses.
		rest := string(raw[strings.LastIndexByte(string(raw), ')')+2:])
		f := strings.Fields(rest)
		// utime and stime are fields 14 and 15 of the line, 12 and 13
		// after the name.
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				b.Fatalf("/proc stat of %s: %v", c.Server(i).Name, err)
			}
			total += time.Duration(n) * 10 * time.Millisecond
		}
	}
	return total
}

// processCounter reads one counter from a server's /metrics.
func processCounter(b *testing.B, url, name string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			return n
		}
	}
	b.Fatalf("no %s in the metrics of %s", name, url)
	return 0
}
