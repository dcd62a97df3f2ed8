package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// The benchmarks run a Nops server against a real Nomad dev agent that holds
// many managed jobs, all in sync with git. The jobs are parameterized batch
// jobs: Nomad plans and diffs them like any job, but they place no
// allocation, so a thousand of them keep the dev agent light.
//
// NOPS_BENCH_JOBS sets the number of jobs (default 1000).

const benchSecretEnv = "NOPS_BENCH_WEBHOOK_SECRET"

// benchJobHCL is one benchmark job: managed, with policy approval so that a
// change makes a deployment that waits (no Nomad call from the apply loop),
// and rev in its meta.
func benchJobHCL(id string, policy structs.Policy, rev int) string {
	return testutil.BatchJobHCL(id, managed(policy, testutil.WithHookMeta(nil, nil),
		testutil.WithMeta("rev", strconv.Itoa(rev)))...)
}

func benchJobs() int {
	if v := os.Getenv("NOPS_BENCH_JOBS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return testutil.BenchSize(1000, 50)
}

// benchWorld is a Nomad agent with n managed jobs registered as git has
// them, plus job "pushed" (policy auto), and a Nops server that has
// finished its first cycle over them. Detection runs only when asked: the
// drift interval and the repository poll are an hour; a refresh or a
// webhook fetches.
type benchWorld struct {
	nomad  *testutil.NomadAgent
	repo   *testutil.GitRepo
	url    string
	s      *nopstest.Server
	m      *reconcile.Manager
	n      int
	secret string
}

func startBenchWorld(b *testing.B, n int) *benchWorld {
	b.Helper()
	w := &benchWorld{nomad: testutil.StartNomad(b), repo: testutil.NewGitRepo(b), n: n, secret: "bench-secret"}
	hcl := map[string]string{"pushed": benchJobHCL("pushed", structs.PolicyAuto, 0)}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("job-%04d", i)
		hcl[id] = benchJobHCL(id, structs.PolicyApproval, 0)
	}
	for id, c := range hcl {
		w.repo.WriteFile(jobFile(id), c)
	}
	w.repo.Commit("jobs")
	w.repo.Pack()

	// Register every job in Nomad as git has it, four at a time.
	start := time.Now()
	registerInNomad(b, w.nomad, hcl, 4)
	b.Logf("registered %d jobs in Nomad in %s", len(hcl), time.Since(start).Round(time.Millisecond))

	b.Setenv(benchSecretEnv, w.secret)
	w.url = w.repo.ServeHTTP(b)
	start = time.Now()
	w.s = nopstest.Start(b, "", nopstest.WithNomad(w.nomad.Addr), nopstest.WithRepo("main", w.url, "main", lcRepoPath),
		nopstest.WithConfig(func(c *config.Config) {
			c.DriftInterval = time.Hour
			c.Webhook.SecretEnv = benchSecretEnv
			for i := range c.Repositories {
				c.Repositories[i].PollInterval = time.Hour
			}
		}))
	w.m = w.s.Manager()
	testutil.WaitForResult(b, 10*time.Minute, func() (bool, error) {
		in, err := jobsInSync(w.s)
		if err != nil {
			return false, err
		}
		if in != len(hcl) {
			return false, fmt.Errorf("%d of %d jobs in sync", in, len(hcl))
		}
		return true, nil
	})
	b.Logf("first detection over %d jobs done in %s", len(hcl), time.Since(start).Round(time.Millisecond))
	return w
}

// jobsInSync counts the jobs whose observed status is in sync.
func jobsInSync(s *nopstest.Server) (int, error) {
	list, err := s.State().JobStatuses()
	if err != nil {
		return 0, err
	}
	in := 0
	for _, st := range list {
		if st.Sync == structs.SyncInSync {
			in++
		}
	}
	return in, nil
}

// cycleAfter waits until a detection cycle that started after t has been
// recorded, and returns it.
func (w *benchWorld) cycleAfter(b *testing.B, t time.Time) *structs.DetectionCycle {
	var c *structs.DetectionCycle
	testutil.WaitForResult(b, 5*time.Minute, func() (bool, error) {
		var err error
		c, err = w.s.State().DetectionCycle()
		if err != nil {
			return false, err
		}
		if c == nil || !c.StartedAt.After(t) {
			return false, fmt.Errorf("no detection cycle since %s", t)
		}
		return true, nil
	})
	return c
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkDetection measures detection over many managed jobs in sync: a
// quiet cycle (nothing changed), a cycle after a commit that changes one
// job, and the latency from a git push webhook to the register in Nomad.
func BenchmarkDetection(b *testing.B) {
	nopstest.AgentGC(b)
	w := startBenchWorld(b, benchJobs())
	ctx := context.Background()

	b.Run("quiet_cycle", func(b *testing.B) {
		var durs []time.Duration
		var reqs []uint64
		for b.Loop() {
			before := w.m.Nomad().Stats()
			start := time.Now()
			res, err := w.m.Detector().DetectOnce(ctx)
			durs = append(durs, time.Since(start))
			if err != nil || res == nil {
				b.Fatalf("detection: %v", err)
			}
			d := w.m.Nomad().Stats().Sub(before)
			reqs = append(reqs, d.Requests)
			if d.Requests > 2 {
				b.Fatalf("a quiet cycle over %d jobs made %d Nomad requests: %s", w.n, d.Requests, d)
			}
		}
		b.ReportMetric(ms(testutil.Median(durs)), "cycle-ms")
		b.ReportMetric(float64(testutil.Median(reqs)), "nomad-req/cycle")
		b.ReportMetric(float64(w.n+1), "jobs")
	})

	rev := 0
	b.Run("one_job_changed", func(b *testing.B) {
		var durs []time.Duration
		var reqs []uint64
		for b.Loop() {
			rev++
			w.repo.WriteFile(jobFile("job-0000"), benchJobHCL("job-0000", structs.PolicyApproval, rev))
			commit := w.repo.Commit(fmt.Sprintf("rev %d", rev))
			before := w.m.Nomad().Stats()
			asked := time.Now().UTC()
			if code, body := w.s.Do("POST", "/v1/repo/main/refresh", nil, nil); code != 200 {
				b.Fatalf("refresh: %d %s", code, body)
			}
			c := w.cycleAfter(b, asked)
			if c.Created != 1 {
				b.Fatalf("the cycle after commit %s created %d deployments, want 1: %+v", commit[:8], c.Created, c)
			}
			durs = append(durs, c.FinishedAt.Sub(c.StartedAt))
			d := w.m.Nomad().Stats().Sub(before)
			reqs = append(reqs, d.Requests)
			if d.Requests > 6 {
				b.Fatalf("a cycle with one changed job made %d Nomad requests: %s", d.Requests, d)
			}
		}
		b.ReportMetric(ms(testutil.Median(durs)), "cycle-ms")
		b.ReportMetric(float64(testutil.Median(reqs)), "nomad-req/cycle")
	})

	b.Run("webhook_push_to_register", func(b *testing.B) {
		pushes := testutil.BenchSize(10, 2)
		var lat []time.Duration
		for b.Loop() {
			for range pushes {
				lat = append(lat, w.pushOnce(b, &rev))
			}
		}
		b.ReportMetric(ms(testutil.Median(lat)), "push-to-register-ms")
		b.ReportMetric(ms(slices.Max(lat)), "max-ms")
	})
}

// pushOnce commits a change to job "pushed", posts a signed GitHub push and
// returns the time from the post to Nomad's new job version. It then waits
// for the deployment to complete, so that the next push starts clean.
func (w *benchWorld) pushOnce(b *testing.B, rev *int) time.Duration {
	*rev++
	w.repo.WriteFile(jobFile("pushed"), benchJobHCL("pushed", structs.PolicyAuto, *rev))
	commit := w.repo.Commit(fmt.Sprintf("push %d", *rev))
	live, _, err := w.nomad.Client.Jobs().Info("pushed", nil)
	if err != nil {
		b.Fatal(err)
	}
	body := githubPush(w.url, "main", commit)
	start := time.Now()
	done := make(chan time.Duration, 1)
	go func() {
		// A blocking query returns as soon as the job changes.
		index := *live.ModifyIndex
		for {
			j, meta, err := w.nomad.Client.Jobs().Info("pushed", &nomadapi.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second})
			if err == nil && *j.Version > *live.Version {
				done <- time.Since(start)
				return
			}
			if err == nil {
				index = meta.LastIndex
			}
			if time.Since(start) > time.Minute {
				done <- -1
				return
			}
		}
	}()
	if code, raw := postWebhook(b, w.s.URL, body, map[string]string{"X-Hub-Signature-256": githubSignature(w.secret, body)}); code != 200 {
		b.Fatalf("webhook: %d %s", code, raw)
	}
	d := <-done
	if d < 0 {
		b.Fatalf("Nomad never saw the push of commit %s", commit[:8])
	}
	testutil.WaitForResult(b, time.Minute, func() (bool, error) {
		l := w.s.Deployments("default", "pushed")
		if len(l) == 0 || l[0].Commit != commit || l[0].State != structs.StateCompleted {
			return false, fmt.Errorf("deployment of commit %s not completed", commit[:8])
		}
		return true, nil
	})
	return d
}

// registerInNomad parses and registers each job of hcl (by job ID) in the
// Nomad agent, with workers requests at a time, as a shop that adopts Nops
// already runs its jobs; the first failure fails tb.
func registerInNomad(tb testing.TB, nomad *testutil.NomadAgent, hcl map[string]string, workers int) {
	tb.Helper()
	ids := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				job, err := nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: hcl[id], Canonicalize: true})
				if err == nil {
					_, _, err = nomad.Client.Jobs().Register(job, nil)
				}
				if err != nil {
					err = fmt.Errorf("register %s: %w", id, err)
					failed.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	for id := range hcl {
		ids <- id
	}
	close(ids)
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatal(*err)
	}
}
