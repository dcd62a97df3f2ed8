package reconcile_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// BenchmarkLiveDrift measures how the leader sees changes made in Nomad,
// over many managed jobs (NOPS_BENCH_JOBS, default 1000) with a one-hour
// drift interval, so that only Nomad's event stream can make it quick:
//
//   - hand_register_to_drift: from a register of a hand-edited managed job
//     (the API call `nomad job run` makes) to the job's replicated status
//     showing drift at the new modify index (p50, and the max);
//   - idle_requests: Nomad requests the leader makes while nothing changes,
//     counted over idleWindow and scaled to a minute. The periodic full
//     plan of every job (-drift-interval x 10 while the stream is up) is
//     outside the window.
func BenchmarkLiveDrift(b *testing.B) {
	nopstest.AgentGC(b)
	w := startBenchWorld(b, benchJobs())
	testutil.WaitForResult(b, time.Minute, func() (bool, error) {
		return w.m.WatchingEvents(), fmt.Errorf("the event stream is not up")
	})

	const job = "job-0001"
	b.Run("hand_register_to_drift", func(b *testing.B) {
		changes := testutil.BenchSize(10, 2)
		var lat []time.Duration
		rev := 0
		for b.Loop() {
			for range changes {
				rev++
				lat = append(lat, w.handChange(b, job, rev))
			}
		}
		b.ReportMetric(ms(testutil.Median(lat)), "p50-ms")
		b.ReportMetric(ms(slices.Max(lat)), "max-ms")
		b.ReportMetric(float64(w.n+1), "jobs")
	})

	b.Run("idle_requests", func(b *testing.B) {
		idleWindow := testutil.BenchSize(20*time.Second, 2*time.Second)
		var perMin []float64
		for b.Loop() {
			before := w.m.Nomad().Stats()
			time.Sleep(idleWindow)
			d := w.m.Nomad().Stats().Sub(before)
			perMin = append(perMin, float64(d.Requests)*float64(time.Minute)/float64(idleWindow))
			if !w.m.WatchingEvents() {
				b.Fatal("the event stream went down during the idle window")
			}
		}
		slices.Sort(perMin)
		b.ReportMetric(perMin[len(perMin)/2], "nomad-req/idle-min")
		b.ReportMetric(idleWindow.Seconds(), "window-s")
	})
}

// handChange registers job with a meta change git does not have, returns the
// time until its status shows the drift, then puts git's spec back by hand
// and waits until the job is in sync again (which completes the deployment
// the drift made).
func (w *benchWorld) handChange(b *testing.B, job string, rev int) time.Duration {
	edited, err := w.nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{
		JobHCL: testutil.BatchJobHCL(job, managed(structs.PolicyApproval, testutil.WithHookMeta(nil, nil),
			testutil.WithMeta("rev", "0"), testutil.WithMeta("hand", strconv.Itoa(rev)))...), Canonicalize: true})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	resp, _, err := w.nomad.Client.Jobs().Register(edited, nil)
	if err != nil {
		b.Fatal(err)
	}
	var took time.Duration
	testutil.WaitForResult(b, time.Minute, func() (bool, error) {
		st := w.s.JobStatus("default", job)
		if st == nil || st.Sync != structs.SyncDrift || st.LiveModifyIndex != resp.JobModifyIndex {
			return false, fmt.Errorf("status of %s: %+v, want drift at %d", job, st, resp.JobModifyIndex)
		}
		took = time.Since(start)
		return true, nil
	})

	back, err := w.nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: benchJobHCL(job, structs.PolicyApproval, 0), Canonicalize: true})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := w.nomad.Client.Jobs().Register(back, nil); err != nil {
		b.Fatal(err)
	}
	testutil.WaitForResult(b, time.Minute, func() (bool, error) {
		st := w.s.JobStatus("default", job)
		if st == nil || st.Sync != structs.SyncInSync {
			return false, fmt.Errorf("status of %s: %+v, want in sync", job, st)
		}
		if a, err := w.s.State().ActiveDeployment("", "default", job); err != nil || a != nil {
			return false, fmt.Errorf("active deployment of %s: %+v %v", job, a, err)
		}
		return true, nil
	})
	return took
}
