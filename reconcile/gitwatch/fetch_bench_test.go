package gitwatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/testutil"
)

// BenchmarkFetchOneChange10k: the fetch of a commit that changes one of
// 10,000 job files in one folder, into the clone of the last fetch, over
// smart HTTP from a packed repository: the git step of a commit's way to
// Nomad at scale. It reports the p50 of the whole fetch (what the watcher
// does for a webhook: the fetch and the read of the new head's files) and
// the git server's share of it (the requests' time as the server saw it)
// and the rest, the client's (go-git's fetch and the read of the files).
func BenchmarkFetchOneChange10k(b *testing.B) {
	n := testutil.BenchSize(10000, 200)
	repo := testutil.NewGitRepo(b)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("job-%05d", i)
		repo.WriteFile("jobs/"+id+".nomad.hcl", testutil.BatchJobHCL(id))
	}
	repo.Commit("jobs")
	repo.Pack()
	url := repo.ServeHTTP(b)
	w, err := New([]RepoConfig{{Name: "r", URL: url, Branch: "main", Path: "jobs"}}, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := w.FetchNow(ctx, "r"); err != nil {
		b.Fatal(err)
	}
	commits := testutil.BenchSize(30, 3)
	var whole, server, client []time.Duration
	b.ResetTimer()
	for range b.N {
		for i := 0; i < commits; i++ {
			b.StopTimer()
			repo.WriteFile(fmt.Sprintf("jobs/job-%05d.nomad.hcl", i), testutil.BatchJobHCL(fmt.Sprintf("job-%05d", i), testutil.WithMeta("rev", fmt.Sprint(i))))
			head := repo.Commit("change")
			served := repo.ServedTime()
			b.StartTimer()
			start := time.Now()
			if err := w.FetchNow(ctx, "r"); err != nil {
				b.Fatal(err)
			}
			whole = append(whole, time.Since(start))
			server = append(server, repo.ServedTime()-served)
			client = append(client, whole[len(whole)-1]-server[len(server)-1])
			if s := w.Snapshot("r"); s.Commit != head || len(s.Files) != n {
				b.Fatalf("snapshot of %s with %d files, want %s with %d", s.Commit, len(s.Files), head, n)
			}
		}
	}
	b.StopTimer()
	p50 := func(v []time.Duration) float64 { return float64(testutil.Median(v).Microseconds()) / 1000 }
	b.ReportMetric(p50(whole), "fetch-p50-ms")
	b.ReportMetric(p50(server), "git-server-p50-ms")
	b.ReportMetric(p50(client), "client-p50-ms")
}
