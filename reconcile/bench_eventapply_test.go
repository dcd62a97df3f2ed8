package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"slices"
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

// BenchmarkEventApply measures how fast deployments move on Nomad's events
// with the production engine and drift intervals (5 s, 1 min): a push to
// the register when pushes come faster than a deployment used to end, a
// Nomad deployment's success to Nops's completion, a hook run's end to the
// next step, and the Nomad requests of many deployments waiting for
// health. A push is timed from the post of its webhook (the commit is made
// before); fetched-p50-ms (the webhook's answer, which comes once the
// commit is fetched), created-p50-ms (the deployment created) and
// register-p50-ms (its register intent recorded) say where the time goes;
// git-server-p50-ms is the test git server's own time answering the fetch
// (git http-backend, a process a request, and the git processes it
// starts), and without-git-server-p50-ms the push's time without it.
//
// NOPS_BENCH_WAITING sets the number of waiting deployments (default 100).
func BenchmarkEventApply(b *testing.B) {
	nopstest.AgentGC(b)
	w := startEventWorld(b)
	rev := 0

	for _, gap := range []time.Duration{1500 * time.Millisecond, 6 * time.Second} {
		b.Run(fmt.Sprintf("push_to_register_%s_apart", gap), func(b *testing.B) {
			pushes := testutil.BenchSize(10, 2)
			var lat, fetched, created, register, gitServer, own []time.Duration
			for b.Loop() {
				for range pushes {
					start := time.Now()
					st := w.pushNoWait(b, &rev)
					lat, fetched = append(lat, st.registered), append(fetched, st.fetched)
					created, register = append(created, st.created), append(register, st.register)
					gitServer, own = append(gitServer, st.gitServer), append(own, st.registered-st.gitServer)
					time.Sleep(time.Until(start.Add(gap)))
				}
			}
			b.ReportMetric(ms(testutil.Median(lat)), "p50-ms")
			b.ReportMetric(ms(slices.Max(lat)), "max-ms")
			b.ReportMetric(ms(testutil.Median(fetched)), "fetched-p50-ms")
			b.ReportMetric(ms(testutil.Median(created)), "created-p50-ms")
			b.ReportMetric(ms(testutil.Median(register)), "register-p50-ms")
			b.ReportMetric(ms(testutil.Median(gitServer)), "git-server-p50-ms")
			b.ReportMetric(ms(testutil.Median(own)), "without-git-server-p50-ms")
		})
	}

	b.Run("service_deploys", func(b *testing.B) {
		deploys := testutil.BenchSize(10, 2)
		var toCompleted, hookToNext []time.Duration
		for b.Loop() {
			for range deploys {
				c, h := w.deployService(b, &rev)
				toCompleted, hookToNext = append(toCompleted, c), append(hookToNext, h)
			}
		}
		b.ReportMetric(ms(testutil.Median(toCompleted)), "successful-to-completed-p50-ms")
		b.ReportMetric(ms(slices.Max(toCompleted)), "successful-to-completed-max-ms")
		b.ReportMetric(ms(testutil.Median(hookToNext)), "hook-done-to-next-step-p50-ms")
		b.ReportMetric(ms(slices.Max(hookToNext)), "hook-done-to-next-step-max-ms")
	})

	b.Run("waiting_deployments_requests", func(b *testing.B) {
		n := benchEnvInt("NOPS_BENCH_WAITING", testutil.BenchSize(100, 5))
		w.startWaiting(b, n)
		for b.Loop() {
			before := w.m.Nomad().Stats()
			window := testutil.BenchSize(time.Minute, 5*time.Second)
			time.Sleep(window)
			d := w.m.Nomad().Stats().Sub(before)
			active, err := w.s.State().ActiveDeployments()
			if err != nil {
				b.Fatal(err)
			}
			if len(active) < n {
				b.Fatalf("%d deployments active at the end of the window, want %d", len(active), n)
			}
			b.ReportMetric(float64(d.Requests)/window.Minutes(), "nomad-req/min")
			b.Logf("requests in %s with %d deployments waiting: %s", window, n, d)

			// For comparison, what polling would cost: one pass over
			// every active deployment (what the engine interval runs
			// while the stream is down), at the default 5 s.
			before = w.m.Nomad().Stats()
			if _, err := w.m.Applier().ApplyOnce(context.Background()); err != nil {
				b.Fatal(err)
			}
			pass := w.m.Nomad().Stats().Sub(before)
			b.ReportMetric(float64(pass.Requests)*time.Minute.Seconds()/config.DefaultEngineInterval.Seconds(), "polling-req/min")
		}
		b.ReportMetric(float64(n), "waiting")
	})
}

// benchRepoURL is where a benchmark's `nops serve` process fetches repo
// from: the repository served over git's smart HTTP protocol, as a
// production server fetches its repositories (over HTTPS or SSH). With
// NOPS_BENCH_GIT=file it is the repository's file:// URL, with which go-git
// runs git's own server side (reading the repository's references and
// packs from disk) inside the Nops process at every poll.
func benchRepoURL(tb testing.TB, repo *testutil.GitRepo) string {
	tb.Helper()
	switch v := os.Getenv("NOPS_BENCH_GIT"); v {
	case "", "http":
		return repo.ServeHTTP(tb)
	case "file":
		return repo.URL()
	default:
		tb.Fatalf("NOPS_BENCH_GIT=%q: want http or file", v)
		return ""
	}
}

func benchEnvInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(os.Getenv(name)), &n); err == nil && n > 0 {
		return n
	}
	return def
}

// startEventWorld starts Nomad, a repository with job "pushed"
// (parameterized, healthy once registered) and job "svc" (a mock_driver
// service with a pre-hook), and a Nops server with the production engine
// and drift intervals, a webhook and an hour-long repository poll.
func startEventWorld(b *testing.B) *benchWorld {
	b.Helper()
	w := &benchWorld{nomad: testutil.StartNomad(b), repo: testutil.NewGitRepo(b), n: 2, secret: "bench-secret"}
	w.repo.WriteFile(jobFile("pushed"), benchJobHCL("pushed", structs.PolicyAuto, 0))
	w.repo.WriteFile(jobFile("svc"), svcHCL(0))
	w.repo.WriteFile(jobFile("prep"), testutil.HookJobHCL("prep", testutil.WithRunFor(200*time.Millisecond)))
	w.repo.Commit("jobs")
	w.repo.Pack()
	b.Setenv(benchSecretEnv, w.secret)
	w.url = w.repo.ServeHTTP(b)
	w.s = nopstest.Start(b, "", nopstest.WithNomad(w.nomad.Addr), nopstest.WithRepo("main", w.url, "main", lcRepoPath),
		nopstest.WithConfig(func(c *config.Config) {
			c.DriftInterval, c.EngineInterval = config.DefaultDriftInterval, config.DefaultEngineInterval
			c.NomadEventStream = true
			c.Webhook.SecretEnv = benchSecretEnv
			for i := range c.Repositories {
				c.Repositories[i].PollInterval = time.Hour
			}
		}))
	w.m = w.s.Manager()
	w.s.WaitForDeployment("default", "svc", structs.StateCompleted, 2*time.Minute)
	w.s.WaitForDeployment("default", "pushed", structs.StateCompleted, 2*time.Minute)
	testutil.WaitForResult(b, time.Minute, func() (bool, error) {
		return w.m.WatchingEvents(), fmt.Errorf("the event stream is not up")
	})
	return w
}

func svcHCL(rev int) string {
	return testutil.ServiceJobHCL("svc", managed(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "prep"),
		testutil.WithMeta("rev", fmt.Sprint(rev)), testutil.WithUpdate(200*time.Millisecond, 30*time.Second, time.Minute))...)
}

// push commits a change of job id and posts a signed push.
func (w *benchWorld) push(b *testing.B, file, content string) string {
	commit := w.commitFile(file, content)
	w.postPush(b, commit)
	return commit
}

// commitFile commits content to file and returns the commit.
func (w *benchWorld) commitFile(file, content string) string {
	w.repo.WriteFile(file, content)
	return w.repo.Commit("push")
}

// postPush posts a signed push of commit to the webhook.
func (w *benchWorld) postPush(b *testing.B, commit string) {
	body := githubPush(w.url, "main", commit)
	if code, raw := postWebhook(b, w.s.URL, body, map[string]string{"X-Hub-Signature-256": githubSignature(w.secret, body)}); code != 200 {
		b.Fatalf("webhook: %d %s", code, raw)
	}
}

// pushSteps is where the time of one push went, from the post of its
// webhook: the webhook answered (the commit fetched), the deployment
// created, its register intent recorded, and Nomad's new job version seen.
// gitServer is the time the test's git server (git http-backend, a CGI
// process a request, and the git processes it starts) took to answer the
// fetch: part of fetched, and not Nops's.
type pushSteps struct {
	fetched, created, register, registered time.Duration
	gitServer                              time.Duration
}

// pushNoWait commits a change of job "pushed", then posts its push and
// returns the times of its steps from the post, without waiting for the
// deployment to end.
func (w *benchWorld) pushNoWait(b *testing.B, rev *int) pushSteps {
	*rev++
	live, _, err := w.nomad.Client.Jobs().Info("pushed", nil)
	if err != nil {
		b.Fatal(err)
	}
	commit := w.commitFile(jobFile("pushed"), benchJobHCL("pushed", structs.PolicyAuto, *rev))
	served, start := w.repo.ServedTime(), time.Now()
	w.postPush(b, commit)
	st := pushSteps{fetched: time.Since(start), gitServer: w.repo.ServedTime() - served}
	index := *live.ModifyIndex
	for time.Since(start) < time.Minute {
		j, meta, err := w.nomad.Client.Jobs().Info("pushed", &nomadapi.QueryOptions{WaitIndex: index, WaitTime: 30 * time.Second})
		if err == nil && *j.Version > *live.Version {
			st.registered = time.Since(start)
			for _, d := range w.s.Deployments("default", "pushed") {
				if d.Commit == commit {
					st.created, st.register = d.CreatedAt.Sub(start), d.RegisterStartedAt.Sub(start)
				}
			}
			return st
		}
		if err == nil {
			index = meta.LastIndex
		}
	}
	b.Fatalf("Nomad never saw the push of commit %s", commit[:8])
	return st
}

// deployService pushes a change of "svc" and waits for its deployment to
// complete. It returns the time from Nomad's deployment turning successful
// (when the benchmark's own subscription to Nomad's events delivers it) to
// Nops's completion, and from the pre-hook run's allocation completing
// (its ModifyTime) to the register's start.
func (w *benchWorld) deployService(b *testing.B, rev *int) (time.Duration, time.Duration) {
	*rev++
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := w.nomad.Client.EventStream().Stream(ctx, map[nomadapi.Topic][]string{nomadapi.TopicDeployment: {"*"}}, 0, nil)
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	successAt := map[string]time.Time{}
	go func() {
		for evs := range events {
			at := time.Now()
			for _, ev := range evs.Events {
				dep, _ := ev.Payload["Deployment"].(map[string]any)
				if dep == nil || dep["JobID"] != "svc" || dep["Status"] != nomadapi.DeploymentStatusSuccessful {
					continue
				}
				id, _ := dep["ID"].(string)
				mu.Lock()
				if _, ok := successAt[id]; !ok {
					successAt[id] = at
				}
				mu.Unlock()
			}
		}
	}()
	commit := w.push(b, jobFile("svc"), svcHCL(*rev))
	var d *structs.Deployment
	testutil.WaitForResult(b, 2*time.Minute, func() (bool, error) {
		l := w.s.Deployments("default", "svc")
		if len(l) == 0 || l[0].Commit != commit || l[0].State != structs.StateCompleted {
			return false, fmt.Errorf("deployment of commit %s not completed", commit[:8])
		}
		d = l[0]
		return true, nil
	})
	var success time.Time
	testutil.WaitForResult(b, 10*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		var ok bool
		success, ok = successAt[d.NomadDeploymentID]
		return ok, fmt.Errorf("no event of Nomad deployment %s turning successful", d.NomadDeploymentID)
	})
	toCompleted := d.UpdatedAt.Sub(success)

	var run *structs.HookRun
	for i := range d.HookRuns {
		if d.HookRuns[i].Phase == structs.PhasePre {
			run = &d.HookRuns[i]
		}
	}
	if run == nil {
		b.Fatalf("deployment %s has no pre-hook run", d.ID)
	}
	allocs, _, err := w.nomad.Client.Jobs().Allocations(run.DispatchedJobID, true, nil)
	if err != nil || len(allocs) != 1 || allocs[0].ClientStatus != nomadapi.AllocClientStatusComplete {
		b.Fatalf("allocations of hook run %s: %+v %v", run.DispatchedJobID, allocs, err)
	}
	hookToNext := d.RegisterStartedAt.Sub(time.Unix(0, allocs[0].ModifyTime))
	return toCompleted, hookToNext
}

// startWaiting commits n managed service jobs that Nomad cannot place (a
// constraint no node meets), so that their deployments are registered and
// wait for health, and waits until all are.
func (w *benchWorld) startWaiting(b *testing.B, n int) {
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("wait-%03d", i)
		hcl := testutil.ServiceJobHCL(id, managed(structs.PolicyAuto,
			testutil.WithUpdate(10*time.Minute, 20*time.Minute, 30*time.Minute))...)
		hcl = strings.Replace(hcl, `group "app" {`,
			"group \"app\" {\n    constraint {\n      attribute = \"${attr.kernel.name}\"\n      value = \"nops-nowhere\"\n    }", 1)
		w.repo.WriteFile(jobFile(id), hcl)
	}
	commit := w.repo.Commit("waiting jobs")
	w.repo.Pack()
	if code, body := w.s.Do("POST", "/v1/repo/main/refresh", nil, nil); code != 200 {
		b.Fatalf("refresh: %d %s", code, body)
	}
	testutil.WaitForResult(b, 5*time.Minute, func() (bool, error) {
		active, err := w.s.State().ActiveDeployments()
		if err != nil {
			return false, err
		}
		reg := 0
		for _, d := range active {
			if d.Commit == commit && d.State == structs.StateApplying && d.Registered {
				reg++
			}
		}
		return reg == n, fmt.Errorf("%d of %d deployments registered and waiting", reg, n)
	})
	// Let the first health checks and Nomad's evaluations settle.
	time.Sleep(10 * time.Second)
}
