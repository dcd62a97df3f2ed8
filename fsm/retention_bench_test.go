package fsm

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// buildYear writes, directly into the store, the history of a shop of jobs
// jobs: deployments deployments spread evenly over span, round-robin over
// the jobs, each finished five minutes after it started and holding its
// spec, with eventsPer events each at its time.
func buildYear(b *testing.B, jobs, deployments, eventsPer int, start time.Time, span time.Duration) *FSM {
	f, err := New(hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	bb := newBenchBody()
	txn := f.State().db.Txn(true)
	step := span / time.Duration(deployments)
	var seq uint64
	for i := 0; i < deployments; i++ {
		at := start.Add(time.Duration(i) * step)
		d := bb.deployment(i)
		d.JobID = fmt.Sprintf("job-%d", i%jobs)
		d.State = structs.StateCompleted
		d.CreateIndex, d.ModifyIndex = uint64(i+1), uint64(i+1)
		d.CreatedAt, d.UpdatedAt, d.StateEnteredAt = at, at.Add(5*time.Minute), at.Add(5*time.Minute)
		d.Decisions = []structs.Decision{{Kind: structs.DecisionApprove, Actor: "alice@example.com", Comment: "ship it", Time: at}}
		if err := txn.Insert(TableDeployments, d); err != nil {
			b.Fatal(err)
		}
		row := &eventObjects{Object: d.ID}
		for j := 0; j < eventsPer; j++ {
			seq++
			if err := txn.Insert(TableEvents, &structs.Event{
				Seq: seq, Time: at.Add(time.Duration(j) * time.Second), Kind: structs.EventKindDeployment, Object: d.ID,
				Namespace: d.Namespace, JobID: d.JobID, From: "applying", To: "post_hook", Actor: "engine",
				Message: "drift detected at commit 01234567", Index: seq,
			}); err != nil {
				b.Fatal(err)
			}
			row.Seqs = append(row.Seqs, seq)
		}
		if err := txn.Insert(tableEventObjects, row); err != nil {
			b.Fatal(err)
		}
	}
	last := start.Add(span)
	if err := txn.Insert(TableMeta, &metaRow{Key: metaKey, LatestIndex: uint64(deployments), EventSeq: seq, EventMaxTime: timeKey(last)}); err != nil {
		b.Fatal(err)
	}
	txn.Commit()
	return f
}

// runGC applies retention entries, with the server's defaults and bounds,
// until one says there is nothing more; it returns the total and the
// longest entry.
func runGC(b *testing.B, f *FSM, index *uint64, now time.Time) (structs.GCResult, time.Duration) {
	var total structs.GCResult
	var longest time.Duration
	for {
		from := total.NextJob
		*index++
		l := entry(b, *index, structs.GCRequestType, &structs.GCRequest{
			WriteMeta: structs.WriteMeta{Time: now, Actor: "nops"}, SpecBefore: now.Add(-gcBenchSpecAfter),
			DeploymentsBefore: now.Add(-gcBenchDeploymentAge), KeepPerJob: gcBenchPerJob, EventsBefore: now.Add(-gcBenchEventAge),
			FromJob: from, MaxDeployments: gcBenchMaxDeployments, MaxScan: gcBenchMaxScan, MaxEvents: gcBenchMaxEvents,
		})
		t0 := time.Now()
		resp := f.ApplyBatch([]*raft.Log{l})[0]
		longest = max(longest, time.Since(t0))
		res, ok := resp.(*structs.GCResult)
		if !ok {
			b.Fatalf("gc answered %v", resp)
		}
		total = total.Add(*res)
		if !res.More {
			return total, longest
		}
	}
}

// The default retention (agent/config/retention.go) and the bounds of one
// entry the leader uses (agent/gc.go).
const (
	gcBenchSpecAfter      = time.Hour
	gcBenchPerJob         = 10
	gcBenchDeploymentAge  = 90 * 24 * time.Hour
	gcBenchEventAge       = 365 * 24 * time.Hour
	gcBenchMaxDeployments = 500
	gcBenchMaxScan        = 5_000
	gcBenchMaxEvents      = 5_000
)

func heapMB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// BenchmarkRetentionYear1000Jobs measures retention on 400 days of a
// 1,000-job shop that deploys each job once a week (about 57,000
// deployments, 6 events each): the heap before and after the first pass
// with the default retention (what a leader holds in steady state), what
// it removed, the longest entry of that pass (how long it holds the log),
// and the cost of a pass that finds nothing, which the leader runs every
// interval. The benchmark deployments share one spec and one diff, so the
// heap before the pass is lower than a real state's.
func BenchmarkRetentionYear1000Jobs(b *testing.B) {
	jobs, perJob, eventsPer := testutil.BenchSize(1000, 50), 52, 6
	span := 400 * 24 * time.Hour
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start.Add(span)
	var before, after, idle float64
	var kept map[string]int
	var longest time.Duration
	var removed structs.GCResult
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		f := buildYear(b, jobs, jobs*perJob*400/365, eventsPer, start, span)
		before = heapMB()
		index := uint64(jobs * perJob * 2)
		b.StartTimer()
		removed, longest = runGC(b, f, &index, now)
		b.StopTimer()
		after = heapMB()
		counts, err := f.State().Counts()
		if err != nil {
			b.Fatal(err)
		}
		kept = counts
		t0 := time.Now()
		if res, _ := runGC(b, f, &index, now); res.DeploymentsDeleted+res.SpecsDropped+res.EventsDeleted != 0 {
			b.Fatalf("second pass removed %+v", res)
		}
		idle = time.Since(t0).Seconds()
		f = nil
		runtime.GC()
	}
	b.ReportMetric(before, "heap-before-MB")
	b.ReportMetric(after, "heap-after-MB")
	b.ReportMetric(float64(removed.SpecsDropped), "specs-dropped")
	b.ReportMetric(float64(removed.DeploymentsDeleted), "deployments-deleted")
	b.ReportMetric(float64(removed.EventsDeleted), "events-deleted")
	b.ReportMetric(float64(kept[TableDeployments]), "deployments-kept")
	b.ReportMetric(float64(kept[TableEvents]), "events-kept")
	b.ReportMetric(longest.Seconds()*1000, "longest-entry-ms")
	b.ReportMetric(idle*1000, "idle-pass-ms")
}
