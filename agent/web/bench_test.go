package web_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// The size of the benchmark's state: 1,000 jobs and 10,000 deployments, or
// a smoke size under NOPS_BENCH_SMOKE=1.
func benchSizes() (jobs, deployments, pending int) {
	return testutil.BenchSize(1000, 50), testutil.BenchSize(10000, 500), testutil.BenchSize(20, 5)
}

// benchServer starts one server with ACLs on and the reconcilers' routes
// but not their loops (no Nomad, no git: nothing changes the state the
// benchmark writes), and fills its state through Raft: 1,000 job statuses
// (every other one drifting, with the diff of its drift, each with its
// health) and 10,000 deployments (nine failed ones per job, then a
// completed one, or, for 20 jobs, one waiting for approval), each with its
// plan diff as text and as a tree, with their events.
func benchServer(b *testing.B) (*agent.Server, string, string) {
	b.Helper()
	benchJobs, benchDeployments, benchPending := benchSizes()
	s, base := routesServer(b, true, "http://127.0.0.1:4646")

	meta := func() structs.WriteMeta { return structs.WriteMeta{Time: time.Now().UTC(), Actor: "bench"} }
	var statuses []*structs.JobStatus
	// Every deployment carries its commit context: a file diff of some
	// forty lines, as a one-line image bump shows with its context.
	var fd strings.Builder
	fd.WriteString("--- a/jobs/job.nomad.hcl\n+++ b/jobs/job.nomad.hcl\n@@ -1,40 +1,40 @@\n")
	for l := range 40 {
		switch l {
		case 20:
			fd.WriteString("-      image = \"web:1\"\n+      image = \"web:2\"\n")
		default:
			fmt.Fprintf(&fd, "   line %d of the job\n", l)
		}
	}
	fileDiff := fd.String()
	for j := range benchJobs {
		st := &structs.JobStatus{Namespace: "default", JobID: fmt.Sprintf("job-%04d", j), Repository: "infra",
			File: fmt.Sprintf("jobs/job-%04d.nomad.hcl", j), Commit: "0123456789abcdef0123456789abcdef01234567",
			Policy: structs.PolicyApproval, Sync: structs.SyncInSync, ObservedAt: time.Now().UTC(),
			Health: &structs.JobHealth{Running: 3, Healthy: 3 - j%2, Pending: j % 2}}
		if j%2 == 1 {
			st.Sync, st.DriftSummary, st.Drift = structs.SyncDrift, "edited: +/- Job: \""+st.JobID+"\"", testTree(st.JobID)
		}
		statuses = append(statuses, st)
	}
	if _, err := s.Apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: meta(), Statuses: statuses}); err != nil {
		b.Fatal(err)
	}
	perJob := benchDeployments / benchJobs
	diff := strings.Repeat("+/- Task: \"app\"\n  +/- Env[LEVEL]: \"info\" => \"debug\"\n", 10)
	var wg sync.WaitGroup
	errs := make(chan error, benchJobs)
	sem := make(chan struct{}, 32)
	for j := range benchJobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for k := range perJob {
				d := &structs.Deployment{ID: fmt.Sprintf("%08d-0000-4000-8000-%012d", j, k), Namespace: "default",
					JobID: fmt.Sprintf("job-%04d", j), Repository: "infra", Commit: "0123456789abcdef0123456789abcdef01234567",
					File: fmt.Sprintf("jobs/job-%04d.nomad.hcl", j), Policy: structs.PolicyApproval, State: structs.StateDetected,
					SpecHash: "5d41402abc4b2a76b9719d911017c592", Diff: diff, ApplyTimeout: 15 * time.Minute,
					PlanDiff: testTree(fmt.Sprintf("job-%04d", j)), ApprovalsRequired: 2,
					CommitMessage: "Bump the image\n\nThe new version fixes the health check.", CommitAuthor: "Ops <ops@example.com>",
					CommitTime: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC), FileDiff: fileDiff,
					CommitURL: "https://git.example.com/infra/jobs/commit/0123456789abcdef0123456789abcdef01234567"}
				req := &structs.DeploymentCreateRequest{WriteMeta: meta(), Deployment: d}
				if k < perJob-1 {
					req.FailWith = "health: deployment failed"
				}
				if _, err := s.Apply(structs.DeploymentCreateRequestType, req); err != nil {
					errs <- err
					return
				}
				if k == perJob-1 {
					to := structs.StateCompleted
					if j < benchPending {
						to = structs.StatePendingApproval
					}
					if _, err := s.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
						WriteMeta: meta(), ID: d.ID, To: to, Message: "bench"}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	// A token that reads everything, not a management token: the lists
	// go through the ACL filter.
	var boot, reader apiToken
	mustDoURL(b, base, "", "POST", "/v1/acl/bootstrap", nil, &boot)
	mustDoURL(b, base, boot.SecretID, "PUT", "/v1/acl/policy/reader", map[string]string{"rules": `
namespace "*" { capabilities = ["read", "approve"] }
cluster { capabilities = ["read"] }`}, nil)
	mustDoURL(b, base, boot.SecretID, "POST", "/v1/acl/token", map[string]any{"name": "reader", "policies": []string{"reader"}}, &reader)
	return s, base, reader.SecretID
}

// BenchmarkDashboard_Pages measures the server-side time of rendering the
// dashboard's pages over a state of 1,000 jobs and 10,000 deployments,
// from the request to the last byte of the answer on loopback, and reports
// the median (p50) and p90 of each page. The target is under 50 ms. The
// job page is that of a drifting job (its drift's diff tree), and the
// deployment page shows a diff tree too.
//
//	go test ./agent/web/ -run '^$' -bench Dashboard -benchtime 50x
func BenchmarkDashboard_Pages(b *testing.B) {
	_, base, token := benchServer(b)
	jobs, deployments, _ := benchSizes()
	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"jobs", "/ui/jobs"},
		{"job", "/ui/job/default/job-0007"},
		{"deployment", fmt.Sprintf("/ui/deployment/%08d-0000-4000-8000-%012d", 3, deployments/jobs-1)},
		{"approvals", "/ui/approvals"},
		{"events", "/ui/events"},
	}
	client := &http.Client{Timeout: time.Minute}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var times []time.Duration
			var size int
			get := func() time.Duration {
				req, _ := http.NewRequest("GET", base+p.path, nil)
				req.Header.Set("X-Nops-Token", token)
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				took := time.Since(start)
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d %.300s", p.path, resp.StatusCode, body)
				}
				size = len(body)
				return took
			}
			get() // warm up
			b.ResetTimer()
			for b.Loop() {
				times = append(times, get())
			}
			b.StopTimer()
			b.ReportMetric(float64(testutil.Percentile(times, 0.5).Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(testutil.Percentile(times, 0.9).Microseconds())/1000, "ms-p90")
			b.ReportMetric(float64(size)/1024, "KiB")
		})
	}
}
