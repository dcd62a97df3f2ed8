package reconcile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkPreview1k measures a preview (SPEC section 19) of a branch that
// changes 10 of 1,000 managed jobs, all in sync in Nomad, against a real
// Nomad agent and git repository: preview-p50-ms and preview-max-ms over
// the runs (one preview a run), each from the request to the answer on
// the leader (git fetch of the ref, parse of the changed files, a plan of
// every managed job). Jobs are registered in Nomad as git has them before
// Nops starts, as BenchmarkScale10k does. Run it alone:
//
//	go test -run '^$' -bench BenchmarkPreview1k -benchtime 3x -timeout 30m ./reconcile/
//
// NOPS_BENCH_SCALE_JOBS changes the number of jobs.
func BenchmarkPreview1k(b *testing.B) {
	nopstest.AgentGC(b)
	jobs := benchEnvInt("NOPS_BENCH_SCALE_JOBS", testutil.BenchSize(1000, 40))
	const changed = 10
	nomad, repo := testutil.StartNomad(b), testutil.NewGitRepo(b)
	hcl := make(map[string]string, jobs)
	for i := range jobs {
		id := scaleJobID(i)
		hcl[id] = benchJobHCL(id, structs.PolicyAuto, 0)
		repo.WriteFile(jobFile(id), hcl[id])
	}
	repo.Commit("jobs")
	repo.Pack()
	registerInNomad(b, nomad, hcl, 8)
	s := nopstest.Start(b, "", nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("main", repo.URL(), "main", lcRepoPath))
	testutil.WaitForResult(b, 20*time.Minute, func() (bool, error) {
		in, err := jobsInSync(s)
		if err != nil || in != jobs {
			return false, fmt.Errorf("%d of %d jobs in sync (%v)", in, jobs, err)
		}
		return true, nil
	})
	repo.Git("checkout", "-b", "preview")
	for i := range changed {
		id := scaleJobID(i * (jobs / changed))
		repo.WriteFile(jobFile(id), benchJobHCL(id, structs.PolicyAuto, 1))
	}
	repo.Commit("change 10 jobs")
	repo.Git("checkout", "main")
	m := s.Manager()
	index := s.State().LatestIndex()

	var took []time.Duration
	for b.Loop() {
		start := time.Now()
		p, err := m.Preview(context.Background(), &structs.PreviewRequest{Repository: "main", Ref: "preview"})
		took = append(took, time.Since(start))
		if err != nil {
			b.Fatalf("preview: %v", err)
		}
		if len(p.Jobs) != changed || len(p.Removed) != 0 {
			b.Fatalf("preview shows %d jobs and %d removed, want %d and 0", len(p.Jobs), len(p.Removed), changed)
		}
	}
	if got := s.State().LatestIndex(); got != index {
		b.Fatalf("the previews moved the Raft index from %d to %d", index, got)
	}
	b.ReportMetric(float64(testutil.Percentile(took, 0.5).Milliseconds()), "preview-p50-ms")
	b.ReportMetric(float64(testutil.Percentile(took, 1).Milliseconds()), "preview-max-ms")
	b.ReportMetric(float64(jobs), "jobs")
}
