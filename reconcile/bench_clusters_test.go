package reconcile_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkClusters4 measures one Nops leader that deploys to four Nomad
// clusters (SPEC section 16): four Nomad dev agents (clusters eu, us, ap
// and sa), each holding N managed jobs (parameterized batch jobs, policy
// auto, registered as git has them before Nops starts), one git
// repository with a folder per cluster mapped to it by four repository
// blocks, and one `nops serve` process of the built binary with the
// production settings (drift interval 1 min, engine interval 5 s, Nomad's
// event stream, a webhook, hour-long repository polls). Each cluster's
// Nomad sits behind a fault proxy (testutil.FaultProxy) that counts its
// requests and can make them slow. Once every job is in sync, every
// stream up and a settle window (30 s) over, it reports:
//
//   - <cluster>-nomad-req/idle-min: the requests the cluster's Nomad got
//     over an idle window (2 min; NOPS_BENCH_CLUSTERS_IDLE sets another),
//     a minute's worth; cpu-s/idle-min the leader's CPU time meanwhile;
//   - <cluster>-commit-to-register-p50-ms: from the push webhook of a
//     commit that changes one job in every cluster to that cluster's Nomad
//     holding the new version, median of 10 commits (each waits for the
//     deployments of the one before); commit-to-register-worst-p50-ms is
//     the highest of the four;
//   - idle-rss-mb: the leader's VmRSS at the end of the idle window, its
//     memory settled (idle-rss-anon-mb of it anonymous: the heap and the
//     runtime's; the rest the binary's file pages);
//   - rss-mb: the leader's VmRSS after those commits, peak-rss-mb its
//     VmHWM (its whole life, the first detection over every job included);
//   - <cluster>-commit-to-register-sa-slow-p50-ms for eu, us and ap: the
//     same latency while every request to sa's Nomad is answered 5 s late
//     (10 commits, each still changing a job in sa too), and
//     commit-to-register-sa-slow-worst-p50-ms the highest of the three;
//   - webhook-answer-p50-ms: the webhook's answer, which comes once the
//     four repository blocks are fetched, and git-server-p50-ms the test
//     git server's time answering those fetches (summed), over every
//     commit.
//
// The git server is `git http-backend` over the repository packed after
// the first commit of every job (testutil.GitRepo.Pack), as a git host
// holds a pushed repository.
//
// The goals (issue "many Nomad clusters"): a p50 of at most 1 s in every
// healthy cluster with one cluster slow, and an RSS of at most 400 MB at
// 2,500 jobs a cluster. NOPS_BENCH_CLUSTERS_JOBS sets N (2,500; 5 under
// NOPS_BENCH_SMOKE). Run it alone, with a long timeout:
//
//	go test -run '^$' -bench BenchmarkClusters4 -benchtime 1x -timeout 60m ./reconcile/
//
// NOPS_BENCH_CLUSTERS_CPUPROFILE=FILE writes the leader's CPU profile over
// the first 20 s of the healthy commits to FILE (the server runs with
// -enable-debug). NOPS_BENCH_CLUSTERS_LOG=FILE runs the server at log
// level debug and copies its log to FILE at the end.
func BenchmarkClusters4(b *testing.B) {
	p := clustersParams{
		jobs:    benchEnvInt("NOPS_BENCH_CLUSTERS_JOBS", testutil.BenchSize(2500, 5)),
		idle:    testutil.BenchSize(2*time.Minute, 3*time.Second),
		settle:  testutil.BenchSize(30*time.Second, time.Second),
		commits: testutil.BenchSize(10, 2),
		delay:   5 * time.Second,
	}
	if v := os.Getenv("NOPS_BENCH_CLUSTERS_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("NOPS_BENCH_CLUSTERS_IDLE=%q: not a positive duration", v)
		}
		p.idle = d
	}
	w := startClustersWorld(b, p)
	for b.Loop() {
		r := w.measure(b, p)
		for _, c := range w.names {
			b.ReportMetric(r.idlePerMin[c], c+"-nomad-req/idle-min")
		}
		b.ReportMetric(r.cpuPerMin, "cpu-s/idle-min")
		worst, worstSlow := 0.0, 0.0
		for _, c := range w.names {
			p50 := ms(testutil.Median(r.latency[c]))
			worst = max(worst, p50)
			b.ReportMetric(p50, c+"-commit-to-register-p50-ms")
		}
		b.ReportMetric(worst, "commit-to-register-worst-p50-ms")
		for _, c := range w.names[:len(w.names)-1] {
			p50 := ms(testutil.Median(r.slowLatency[c]))
			worstSlow = max(worstSlow, p50)
			b.ReportMetric(p50, c+"-commit-to-register-"+w.slow()+"-slow-p50-ms")
		}
		b.ReportMetric(worstSlow, "commit-to-register-"+w.slow()+"-slow-worst-p50-ms")
		b.ReportMetric(ms(testutil.Median(w.fetched)), "webhook-answer-p50-ms")
		b.ReportMetric(ms(testutil.Median(w.gitServer)), "git-server-p50-ms")
		b.ReportMetric(r.idleRSSMB, "idle-rss-mb")
		b.ReportMetric(r.idleAnonMB, "idle-rss-anon-mb")
		b.ReportMetric(r.rssMB, "rss-mb")
		b.ReportMetric(r.peakMB, "peak-rss-mb")
	}
	b.ReportMetric(float64(p.jobs), "jobs/cluster")
}

type clustersParams struct {
	jobs         int
	idle, settle time.Duration
	commits      int
	// delay is how late the slow cluster answers.
	delay time.Duration
}

// clustersWorld is four Nomad agents, each behind a fault proxy, one git
// repository served over HTTP, and one Nops server process.
type clustersWorld struct {
	// names are the clusters; the last is the one made slow.
	names   []string
	nomads  map[string]*testutil.NomadAgent
	proxies map[string]*testutil.FaultProxy
	repo    *testutil.GitRepo
	url     string
	secret  string
	server  *nopstest.Process
	jobs    int
	rev     map[string]int
	next    int
	// fetched is, for each commit, the time from the post of its webhook
	// to its answer (which comes once the matched repositories are
	// fetched); gitServer the test git server's time answering the
	// commit's fetches (every repository's, summed).
	fetched, gitServer []time.Duration
}

func (w *clustersWorld) slow() string { return w.names[len(w.names)-1] }

// clustersSecretEnv names the webhook secret's variable; the server
// process does not inherit NOPS_ variables.
const clustersSecretEnv = "BENCH_CLUSTERS_WEBHOOK_SECRET"

// clusterJobFile is the repository path of a job's file in a cluster's
// folder.
func clusterJobFile(cluster, id string) string { return cluster + "/" + id + ".nomad.hcl" }

// startClustersWorld starts four Nomad agents with p.jobs managed jobs
// each, registered as git has them, and a Nops server process that deploys
// to them, and waits until it sees every job in sync and every cluster's
// event stream up.
func startClustersWorld(tb testing.TB, p clustersParams) *clustersWorld {
	tb.Helper()
	w := &clustersWorld{names: []string{"eu", "us", "ap", "sa"}, nomads: map[string]*testutil.NomadAgent{},
		proxies: map[string]*testutil.FaultProxy{}, repo: testutil.NewGitRepo(tb), secret: "bench-secret", jobs: p.jobs, rev: map[string]int{}}
	for _, c := range w.names {
		w.nomads[c] = testutil.StartNomad(tb, testutil.WithNomadConfig(fmt.Sprintf("region = %q", c)))
		w.proxies[c] = testutil.StartFaultProxy(tb, w.nomads[c].Addr)
	}
	start := time.Now()
	for _, c := range w.names {
		hcl := make(map[string]string, p.jobs)
		for i := range p.jobs {
			id := scaleJobID(i)
			hcl[id] = benchJobHCL(id, structs.PolicyAuto, 0)
			w.repo.WriteFile(clusterJobFile(c, id), hcl[id])
		}
		registerInNomad(tb, w.nomads[c], hcl, 8)
	}
	w.repo.Commit("jobs")
	w.repo.Pack()
	progress(tb, "registered %d jobs in each of %d Nomad agents in %s", p.jobs, len(w.names), time.Since(start).Round(time.Millisecond))

	tb.Setenv(clustersSecretEnv, w.secret)
	w.url = w.repo.ServeHTTP(tb)
	var cfg strings.Builder
	for _, c := range w.names {
		fmt.Fprintf(&cfg, "nomad %q {\n  address = %q\n  region  = %q\n}\n", c, w.proxies[c].URL, c)
		fmt.Fprintf(&cfg, "repository \"%s-jobs\" {\n  url = %q\n  branch = \"main\"\n  path = %q\n  cluster = %q\n  poll_interval = \"1h\"\n}\n",
			c, w.url, c, c)
	}
	fmt.Fprintf(&cfg, "webhook {\n  secret_env = %q\n}\n", clustersSecretEnv)
	cfgFile := filepath.Join(tb.TempDir(), "clusters.hcl")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	// The config file's nomad blocks and repositories replace the
	// cluster's -nomad-addr and -repo.
	setup := func(_ *nopstest.Process, args []string) ([]string, error) {
		out := make([]string, 0, len(args))
		for i := 0; i < len(args); i++ {
			if args[i] == "-nomad-addr" || args[i] == "-repo" {
				i++
				continue
			}
			out = append(out, args[i])
		}
		return append(out, "-config", cfgFile), nil
	}
	logLevel := "info"
	if file := os.Getenv("NOPS_BENCH_CLUSTERS_LOG"); file != "" {
		logLevel = "debug"
		tb.Cleanup(func() {
			raw, err := os.ReadFile(w.server.LogPath)
			if err == nil {
				err = os.WriteFile(file, raw, 0o600)
			}
			if err != nil {
				tb.Errorf("copy the server's log to %s: %v", file, err)
			}
		})
	}
	start = time.Now()
	pc := nopstest.StartProcessClusterWith(tb, 1, w.proxies[w.names[0]].URL, w.url, setup, "-insecure-rpc", "-enable-debug",
		"-drift-interval", "1m", "-engine-interval", config.DefaultEngineInterval.String(), "-log-level", logLevel)
	w.server = pc.Server(pc.Leader())
	shown := time.Now()
	testutil.WaitForResult(tb, 60*time.Minute, func() (bool, error) {
		in, err := w.inSync()
		if err != nil {
			return false, err
		}
		total := 0
		for _, c := range w.names {
			total += in[c]
		}
		if total != p.jobs*len(w.names) {
			if time.Since(shown) > 30*time.Second {
				shown = time.Now()
				progress(tb, "jobs in sync after %s: %v of %d each", time.Since(start).Round(time.Second), in, p.jobs)
			}
			return false, fmt.Errorf("jobs in sync %v, want %d in each cluster", in, p.jobs)
		}
		for _, c := range w.clusters(tb) {
			if !c.EventStream || !c.Reachable {
				return false, fmt.Errorf("cluster %s: event stream up %t, reachable %t (%s)", c.Name, c.EventStream, c.Reachable, c.Error)
			}
		}
		return true, nil
	})
	progress(tb, "first detection over %d jobs in %d clusters done in %s, leader RSS %.1f MiB", p.jobs, len(w.names),
		time.Since(start).Round(time.Millisecond), procStatusMiB(tb, w.server.PID(), "VmRSS"))
	// Let the work the first cycles started (the streams' replay of the
	// registrations) run out.
	time.Sleep(p.settle)
	return w
}

// inSync counts the jobs in sync of each cluster the server lists.
func (w *clustersWorld) inSync() (map[string]int, error) {
	var list []*structs.JobSummary
	if code, body, err := w.server.Call(http.MethodGet, "/v1/jobs", nil, &list); err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("list jobs: %d %s %v", code, body, err)
	}
	in := map[string]int{}
	for _, j := range list {
		if j.JobStatus != nil && j.Sync == structs.SyncInSync {
			in[j.Cluster]++
		}
	}
	return in, nil
}

// clusters reads GET /v1/clusters.
func (w *clustersWorld) clusters(tb testing.TB) []*structs.ClusterStatus {
	tb.Helper()
	var list []*structs.ClusterStatus
	if code, body, err := w.server.Call(http.MethodGet, "/v1/clusters", nil, &list); err != nil || code != http.StatusOK {
		tb.Fatalf("GET /v1/clusters: %d %s %v", code, body, err)
	}
	return list
}

type clustersResult struct {
	idlePerMin    map[string]float64
	cpuPerMin     float64
	latency       map[string][]time.Duration
	slowLatency   map[string][]time.Duration
	rssMB, peakMB float64
	// idleRSSMB and idleAnonMB: VmRSS and RssAnon at the end of the idle
	// window.
	idleRSSMB, idleAnonMB float64
	idleByCluster         map[string]uint64
}

func (w *clustersWorld) measure(tb testing.TB, p clustersParams) clustersResult {
	r := clustersResult{idlePerMin: map[string]float64{}, latency: map[string][]time.Duration{},
		slowLatency: map[string][]time.Duration{}, idleByCluster: map[string]uint64{}}
	pid := w.server.PID()
	before := map[string]uint64{}
	for _, c := range w.names {
		before[c] = w.proxies[c].Requests()
	}
	cpu := procCPU(tb, pid)
	time.Sleep(p.idle)
	r.cpuPerMin = (procCPU(tb, pid) - cpu).Seconds() / p.idle.Minutes()
	for _, c := range w.names {
		r.idleByCluster[c] = w.proxies[c].Requests() - before[c]
		r.idlePerMin[c] = float64(r.idleByCluster[c]) / p.idle.Minutes()
	}
	r.idleRSSMB, r.idleAnonMB = procStatusMiB(tb, pid, "VmRSS"), procStatusMiB(tb, pid, "RssAnon")
	progress(tb, "idle %s: Nomad requests by cluster %v, leader CPU %.2f s/min, RSS %.1f MiB (%.1f anonymous)", p.idle, r.idleByCluster,
		r.cpuPerMin, r.idleRSSMB, r.idleAnonMB)

	profiled := w.cpuProfile(tb, os.Getenv("NOPS_BENCH_CLUSTERS_CPUPROFILE"))
	for range p.commits {
		for c, d := range w.commitEach(tb, w.names, w.names) {
			r.latency[c] = append(r.latency[c], d)
		}
	}
	profiled()
	progress(tb, "commit to register, every cluster healthy: %v", r.latency)
	r.rssMB = procStatusMiB(tb, pid, "VmRSS")
	r.peakMB = max(procStatusMiB(tb, pid, "VmHWM"), r.rssMB)

	// One cluster slow: each commit still changes a job there too.
	slow := w.slow()
	w.proxies[slow].SetDelay(p.delay)
	healthy := w.names[:len(w.names)-1]
	for range p.commits {
		for c, d := range w.commitEach(tb, w.names, healthy) {
			r.slowLatency[c] = append(r.slowLatency[c], d)
		}
	}
	w.proxies[slow].SetDelay(0)
	progress(tb, "commit to register with %s answering %s late: %v", slow, p.delay, r.slowLatency)
	return r
}

// cpuProfile starts a 20-second CPU profile of the leader into file, when
// file is set, and returns the function that waits for it.
func (w *clustersWorld) cpuProfile(tb testing.TB, file string) func() {
	tb.Helper()
	if file == "" {
		return func() {}
	}
	done := make(chan error, 1)
	go func() { done <- saveProfile(w.server.URL+"/debug/pprof/profile?seconds=20", file) }()
	return func() {
		if err := <-done; err != nil {
			tb.Errorf("CPU profile: %v", err)
		}
	}
}

// commitEach commits a change of one job in each cluster of change, posts
// a signed push, and returns the time from the post to the new version in
// the Nomad of each cluster of watch; it then waits until the deployments
// of the commit in watch are completed, so that the next commit starts
// clean.
func (w *clustersWorld) commitEach(tb testing.TB, change, watch []string) map[string]time.Duration {
	tb.Helper()
	// Jobs spread over the key order, since a cycle walks it.
	id := scaleJobID(w.next * 997 % w.jobs)
	w.next++
	live := map[string]*nomadapi.Job{}
	for _, c := range watch {
		j, _, err := w.nomads[c].Client.Jobs().Info(id, nil)
		if err != nil {
			tb.Fatalf("read %s from the Nomad of %s: %v", id, c, err)
		}
		live[c] = j
	}
	w.rev[id]++
	for _, c := range change {
		w.repo.WriteFile(clusterJobFile(c, id), benchJobHCL(id, structs.PolicyAuto, w.rev[id]))
	}
	commit := w.repo.Commit(fmt.Sprintf("change %s in %s", id, strings.Join(change, ", ")))
	body := githubPush(w.url, "main", commit)

	type seen struct {
		cluster string
		d       time.Duration
		err     error
	}
	results := make(chan seen, len(watch))
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range watch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := waitNewVersion(w.nomads[c], id, live[c], start, 2*time.Minute)
			results <- seen{c, d, err}
		}()
	}
	served := w.repo.ServedTime()
	if code, raw := postWebhook(tb, w.server.URL, body, map[string]string{"X-Hub-Signature-256": githubSignature(w.secret, body)}); code != http.StatusOK {
		tb.Fatalf("webhook: %d %s", code, raw)
	}
	w.fetched = append(w.fetched, time.Since(start))
	wg.Wait()
	w.gitServer = append(w.gitServer, w.repo.ServedTime()-served)
	close(results)
	out := map[string]time.Duration{}
	for s := range results {
		if s.err != nil {
			tb.Fatalf("commit %s in cluster %s: %v", commit[:8], s.cluster, s.err)
		}
		out[s.cluster] = s.d
	}
	for _, c := range watch {
		testutil.WaitForResult(tb, 2*time.Minute, func() (bool, error) {
			var list []*structs.Deployment
			path := fmt.Sprintf("/v1/deployments?cluster=%s&namespace=default&job=%s", c, id)
			if code, raw, err := w.server.Call(http.MethodGet, path, nil, &list); err != nil || code != http.StatusOK {
				return false, fmt.Errorf("GET %s: %d %s %v", path, code, raw, err)
			}
			if len(list) == 0 || list[0].Commit != commit || list[0].State != structs.StateCompleted {
				return false, fmt.Errorf("the deployment of %s in %s from commit %s is not completed", id, c, commit[:8])
			}
			return true, nil
		})
	}
	return out
}

// waitNewVersion waits, with Nomad's blocking queries, until Nomad holds a
// version of job id newer than live, and returns the time from start.
func waitNewVersion(nomad *testutil.NomadAgent, id string, live *nomadapi.Job, start time.Time, timeout time.Duration) (time.Duration, error) {
	index := *live.ModifyIndex
	var last error
	for time.Since(start) < timeout {
		wait := min(10*time.Second, timeout-time.Since(start))
		j, meta, err := nomad.Client.Jobs().Info(id, &nomadapi.QueryOptions{WaitIndex: index, WaitTime: wait})
		switch {
		case err != nil:
			last = err
			// An error answers at once: try again a little later.
			time.Sleep(50 * time.Millisecond)
		case *j.Version > *live.Version:
			return time.Since(start), nil
		default:
			index = meta.LastIndex
		}
	}
	return 0, fmt.Errorf("Nomad holds no version of %s newer than %d after %s (last error: %v)", id, *live.Version, timeout, last)
}
