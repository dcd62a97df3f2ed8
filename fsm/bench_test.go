package fsm

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// Sizes of a realistic deployment: a job spec of a few KB, a redacted diff,
// two hooks with their specs.
const (
	benchSpecBytes     = 4 << 10
	benchDiffBytes     = 1 << 10
	benchHookSpecBytes = 1 << 10
)

// padded returns a JSON-looking document of about n bytes.
func padded(head string, n int) []byte {
	var b strings.Builder
	b.WriteString(head)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `,"Field%d":"value of field %d in the task group config"`, i, i)
	}
	return []byte(b.String())
}

// benchID returns a random-looking, reproducible UUID, as deployment and
// Nomad IDs are: index keys spread over the whole tree.
func benchID(i int) string {
	a, b := splitmix(uint64(i)), splitmix(uint64(i)+1<<40)
	return fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", a>>32, a>>16&0xffff, a&0xfff, b>>52, b&0xffffffffffff)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// benchBody holds the bulky parts that every benchmark deployment carries.
type benchBody struct {
	spec, hookSpec []byte
	diff           string
}

func newBenchBody() *benchBody {
	return &benchBody{
		spec:     padded(`{"ID":"web","Type":"service","TaskGroups":[]`, benchSpecBytes),
		hookSpec: padded(`{"ID":"backup","Type":"batch","ParameterizedJob":{}`, benchHookSpecBytes),
		diff:     string(padded(`+/- Job: "web"`, benchDiffBytes)),
	}
}

// deployment returns deployment i in state detected, with one pre- and one
// post-hook.
func (bb *benchBody) deployment(i int) *structs.Deployment {
	job := fmt.Sprintf("job-%d", i)
	d := &structs.Deployment{
		ID: benchID(i), Cluster: structs.DefaultCluster, Namespace: "default", JobID: job, Repository: "infra",
		Commit: "0123456789abcdef0123456789abcdef01234567", File: "jobs/" + job + ".nomad.hcl",
		Policy: structs.PolicyApproval, State: structs.StateDetected,
		SpecHash: "5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592",
		Spec:     bb.spec, Diff: bb.diff, DiffHash: "7d793037a0760186574b0282f2f435e77d793037a0760186574b0282f2f435e7",
		JobModifyIndex: uint64(1000 + i), ApplyTimeout: 15 * time.Minute,
	}
	for _, p := range []structs.HookPhase{structs.PhasePre, structs.PhasePost} {
		d.Hooks = append(d.Hooks, structs.FrozenHook{
			Name: string(p) + "-backup", Phase: p, RevisionJobID: string(p) + "-backup-0badc0de",
			Hash: "0badc0de0badc0de0badc0de0badc0de", Spec: bb.hookSpec, Timeout: 10 * time.Minute,
			MetaKeys: []string{"nops_deployment", "nops_job", "nops_commit"},
		})
	}
	return d
}

// entry encodes one log entry.
func entry(b *testing.B, index uint64, t structs.MessageType, req any) *raft.Log {
	data, err := structs.Encode(t, req)
	if err != nil {
		b.Fatal(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

// benchLog builds log entries in batches with the timer stopped, and
// applies them with the timer running.
type benchLog struct {
	b     *testing.B
	fsm   *FSM
	index uint64
	now   time.Time
	batch []*raft.Log
	// cpu is the CPU time spent with the timer running.
	cpu, cpuStart time.Duration
}

func newBenchLog(b *testing.B) *benchLog {
	f, err := New(hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	return &benchLog{b: b, fsm: f, now: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)}
}

func (l *benchLog) add(t structs.MessageType, req any) {
	l.index++
	l.batch = append(l.batch, entry(l.b, l.index, t, req))
}

func (l *benchLog) meta(actor string) structs.WriteMeta {
	l.now = l.now.Add(time.Millisecond)
	return structs.WriteMeta{Time: l.now, Actor: actor}
}

// applyUntimed applies the batch with the timer stopped.
func (l *benchLog) applyUntimed() {
	for _, e := range l.batch {
		if resp := l.fsm.Apply(e); resp != nil {
			l.b.Fatalf("apply %d: %v", e.Index, resp)
		}
	}
	l.batch = l.batch[:0]
}

// run applies up to n entries of the batch with the timer running and
// returns how many it applied.
func (l *benchLog) run(n int) int { return l.runIn(n, 0) }

// runIn applies up to n entries of the batch with the timer running and
// returns how many it applied: one Apply each when size is 0, else in
// ApplyBatch calls of size entries, as Raft hands committed entries to a
// BatchingFSM.
func (l *benchLog) runIn(n, size int) int {
	n = min(n, len(l.batch))
	l.start()
	if size == 0 {
		for _, e := range l.batch[:n] {
			if resp := l.fsm.Apply(e); resp != nil {
				l.b.Fatalf("apply %d: %v", e.Index, resp)
			}
		}
	}
	for start := 0; size > 0 && start < n; start += size {
		for i, resp := range l.fsm.ApplyBatch(l.batch[start:min(start+size, n)]) {
			if resp != nil {
				l.b.Fatalf("apply %d: %v", l.batch[start+i].Index, resp)
			}
		}
	}
	l.stop()
	l.batch = l.batch[:0]
	return n
}

// start and stop run the benchmark timer and count the process's CPU time
// in between, so that the figure holds on a machine busy with other work.
func (l *benchLog) start() {
	l.cpuStart = cpuTime()
	l.b.StartTimer()
}

func (l *benchLog) stop() {
	l.b.StopTimer()
	l.cpu += cpuTime() - l.cpuStart
}

// report prints applies per wall second and per CPU second (the process's
// user and system time, garbage collection included).
func (l *benchLog) report() {
	l.b.ReportMetric(float64(l.b.N)/l.b.Elapsed().Seconds(), "applies/s")
	if l.cpu > 0 {
		l.b.ReportMetric(float64(l.b.N)/l.cpu.Seconds(), "applies/cpu-s")
	}
}

func cpuTime() time.Duration {
	cpu, _ := rusage()
	return cpu
}

// rusage returns the CPU time the process has used so far, as cpuTime
// does, and the system part of it (page faults, syscalls).
func rusage() (cpu, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkApplyDeploymentCreate measures the create of realistic
// deployments, each for its own job, into a growing state.
func BenchmarkApplyDeploymentCreate(b *testing.B) {
	bb := newBenchBody()
	l := newBenchLog(b)
	b.StopTimer()
	b.ResetTimer()
	for done := 0; done < b.N; {
		for i := done; i < min(done+1000, b.N); i++ {
			l.add(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: l.meta("detector"), Deployment: bb.deployment(i)})
		}
		done += l.run(b.N - done)
	}
	l.report()
}

// BenchmarkApplyTransition measures state changes: each deployment goes
// detected, pre_hook, applying, post_hook, completed; the creates are not
// timed.
func BenchmarkApplyTransition(b *testing.B) {
	bb := newBenchBody()
	l := newBenchLog(b)
	b.StopTimer()
	b.ResetTimer()
	path := []structs.DeploymentState{structs.StatePreHook, structs.StateApplying, structs.StatePostHook, structs.StateCompleted}
	for done, next := 0, 0; done < b.N; {
		first := next
		for ; next < first+250; next++ {
			l.add(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: l.meta("detector"), Deployment: bb.deployment(next)})
		}
		l.applyUntimed()
		for _, to := range path {
			for i := first; i < next; i++ {
				l.add(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: l.meta("engine"), ID: benchID(i), To: to})
			}
		}
		done += l.run(b.N - done)
	}
	l.report()
}

// lifecycle appends the entries of one realistic deployment: detection
// with observed status, approval, a pre-hook run, the register and its
// bookkeeping, a post-hook run, completion.
func (l *benchLog) lifecycle(bb *benchBody, i int) {
	d := bb.deployment(i)
	id := d.ID
	l.add(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: l.meta("detector"), Statuses: []*structs.JobStatus{{
		Namespace: d.Namespace, JobID: d.JobID, Repository: "infra", File: d.File, Commit: d.Commit,
		Policy: d.Policy, Sync: structs.SyncDrift, DriftSummary: "1 group changed", SpecHash: d.SpecHash, ObservedAt: l.now,
	}}})
	l.add(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: l.meta("detector"), Deployment: d, ConsumeLift: true})
	l.add(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: l.meta("detector"), ID: id, To: structs.StatePendingApproval})
	l.add(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{WriteMeta: l.meta("alice"), ID: id, Decision: structs.DecisionApprove, Comment: "ship it"})
	hook := func(phase structs.HookPhase) {
		run := structs.HookRun{Hook: string(phase) + "-backup", Phase: phase, Token: structs.HookRunToken(id, phase, 0), StartedAt: l.now}
		for _, s := range []structs.HookRunState{structs.HookRunDispatching, structs.HookRunRunning, structs.HookRunSucceeded} {
			r := run
			r.State = s
			if s != structs.HookRunDispatching {
				r.DispatchedJobID = run.Hook + "-0badc0de/dispatch-1740787200-" + id[:8]
			}
			l.add(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: l.meta("engine"), ID: id, Update: &structs.DeploymentPatch{HookRun: &r, Message: "hook " + string(s)}})
		}
	}
	hook(structs.PhasePre)
	at, deadline := l.now, l.now.Add(15*time.Minute)
	l.add(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: l.meta("engine"), ID: id, To: structs.StateApplying, Update: &structs.DeploymentPatch{RegisterStartedAt: &at}})
	l.add(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: l.meta("engine"), ID: id, Update: &structs.DeploymentPatch{
		Registered: ptr(true), JobVersion: ptr(uint64(3)), NomadEvalID: ptr(benchID(i + 1)), NomadDeploymentID: ptr(benchID(i + 2)), HealthDeadline: &deadline,
		Message: "registered job version 3",
	}})
	l.add(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: l.meta("engine"), ID: id, To: structs.StatePostHook})
	hook(structs.PhasePost)
	l.add(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: l.meta("engine"), ID: id, To: structs.StateCompleted})
	if i%10 == 0 {
		l.add(structs.EventAppendRequestType, &structs.EventAppendRequest{WriteMeta: l.meta("engine"), Events: []*structs.Event{{Kind: structs.EventKindDeployment, Object: id, Message: "canaries promoted"}}})
		l.add(structs.RepoStatusUpsertRequestType, &structs.RepoStatusUpsertRequest{WriteMeta: l.meta("gitwatch"), Repos: []*structs.RepoStatus{{Name: "infra", URL: "https://git.example.com/infra.git", Branch: "main", Path: "jobs", Head: d.Commit, LastFetch: l.now, Files: 40}}})
		l.add(structs.DetectionCycleRequestType, &structs.DetectionCycleRequest{WriteMeta: l.meta("detector"), Cycle: &structs.DetectionCycle{Leader: "nops-1", StartedAt: l.now, FinishedAt: l.now, Jobs: 40, Drifted: 1, Created: 1}})
	}
}

// BenchmarkApplyMixed measures a realistic mix of entries: whole
// deployment lifecycles with hooks and approvals, observed statuses and
// detection cycles, one entry per transaction.
func BenchmarkApplyMixed(b *testing.B) { benchMixed(b, 0) }

// BenchmarkApplyMixedBatched is BenchmarkApplyMixed applied as Raft does
// under load: the entries committed together (up to MaxAppendEntries, 64)
// go to ApplyBatch in one write transaction.
func BenchmarkApplyMixedBatched(b *testing.B) { benchMixed(b, 64) }

func benchMixed(b *testing.B, batch int) {
	bb := newBenchBody()
	l := newBenchLog(b)
	b.StopTimer()
	b.ResetTimer()
	for done, next := 0, 0; done < b.N; {
		for end := next + 100; next < end; next++ {
			l.lifecycle(bb, next)
		}
		done += l.runIn(b.N-done, batch)
	}
	l.report()
}

// buildLargeState writes, directly into the store, deployments that went
// the whole way (two hooks, two hook runs, one decision) and eventsPer
// events for each. As in a real log, the events of a hundred deployments
// at a time interleave.
func buildLargeState(b *testing.B, deployments, eventsPer int) *FSM {
	f, err := New(hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	bb := newBenchBody()
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	txn := f.State().db.Txn(true)
	ds := make([]*structs.Deployment, deployments)
	for i := range ds {
		at := start.Add(time.Duration(i) * time.Minute)
		d := bb.deployment(i)
		d.State = structs.StateCompleted
		d.CreateIndex, d.ModifyIndex = uint64(i+1)*uint64(eventsPer), uint64(i+2)*uint64(eventsPer)-1
		d.CreatedAt, d.UpdatedAt, d.StateEnteredAt, d.RegisterStartedAt, d.HealthDeadline = at, at.Add(5*time.Minute), at.Add(5*time.Minute), at.Add(time.Minute), at.Add(16*time.Minute)
		d.Registered, d.JobVersion, d.NomadEvalID, d.NomadDeploymentID = true, 3, benchID(i+1), benchID(i+2)
		d.Decisions = []structs.Decision{{Kind: structs.DecisionApprove, Actor: "alice@example.com", Comment: "ship it", Time: at}}
		for _, h := range d.Hooks {
			d.HookRuns = append(d.HookRuns, structs.HookRun{
				Hook: h.Name, Phase: h.Phase, Token: structs.HookRunToken(d.ID, h.Phase, 0),
				DispatchedJobID: h.RevisionJobID + "/dispatch-1740787200-" + d.ID[:8], State: structs.HookRunSucceeded,
				StartedAt: at, FinishedAt: at.Add(time.Minute),
			})
		}
		if err := txn.Insert(TableDeployments, d); err != nil {
			b.Fatal(err)
		}
		ds[i] = d
	}
	states := []structs.DeploymentState{"", structs.StateDetected, structs.StatePendingApproval, structs.StatePreHook, structs.StateApplying, structs.StatePostHook, structs.StateCompleted}
	var seq uint64
	var last time.Time
	const together = 100
	for first := 0; first < deployments; first += together {
		for j := 0; j < eventsPer; j++ {
			for _, d := range ds[first:min(first+together, deployments)] {
				seq++
				from, to := states[j%len(states)], states[(j+1)%len(states)]
				last = start.Add(time.Duration(first)*time.Minute + time.Duration(seq%uint64(together*eventsPer))*time.Second)
				if err := txn.Insert(TableEvents, &structs.Event{
					Seq: seq, Time: last, Kind: structs.EventKindDeployment, Object: d.ID,
					Namespace: d.Namespace, JobID: d.JobID, From: string(from), To: string(to), Actor: "engine",
					Message: "drift detected at commit 01234567", Index: seq,
				}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if err := txn.Insert(TableMeta, &metaRow{Key: metaKey, LatestIndex: seq, EventSeq: seq, EventMaxTime: timeKey(last)}); err != nil {
		b.Fatal(err)
	}
	txn.Commit()
	return f
}

// BenchmarkSnapshotRestore100kDeployments1MEvents persists a state of
// 100,000 realistic deployments and 1,000,000 events, and restores it
// into a new FSM; it reports each separately, in wall and CPU seconds (the
// process's, garbage collection included: the figure that holds on a busy
// machine), and what the restore allocates.
//
// The figures are those of the first round, as a server's restore at its
// start: it runs once the memory freed so far has gone back to the
// system, so its restore is the first to touch about a GB of fresh
// memory, and restore-sys-s is the system time those page faults take.
// On a virtual machine whose host has taken back the guest's idle memory,
// they cost several seconds more (measured: 8.2 to 9.3 s after a minute
// idle, against 3.3 to 4.2 s, the difference all in system time). The
// timed rounds after it (restore-warm-s) reuse memory the process has
// touched, as a running server's later restores do.
func BenchmarkSnapshotRestore100kDeployments1MEvents(b *testing.B) {
	deployments, eventsPer := testutil.BenchSize(100_000, 2_000), 10
	f := buildLargeState(b, deployments, eventsPer)
	b.StopTimer()
	// What building the state freed goes back to the system, so that the
	// first round faults its memory in whatever ran before it.
	debug.FreeOSMemory()
	first := persistRestore(b, f, deployments, deployments*eventsPer, false)
	b.ResetTimer()
	var warm time.Duration
	for i := 0; i < b.N; i++ {
		warm += persistRestore(b, f, deployments, deployments*eventsPer, true).restore
	}
	b.ReportMetric(first.persist.Seconds(), "persist-s")
	b.ReportMetric(first.restore.Seconds(), "restore-s")
	b.ReportMetric(first.persistCPU.Seconds(), "persist-cpu-s")
	b.ReportMetric(first.restoreCPU.Seconds(), "restore-cpu-s")
	b.ReportMetric(first.restoreSys.Seconds(), "restore-sys-s")
	b.ReportMetric(float64(first.restoreAlloc)/(1<<20), "restore-alloc-MB")
	b.ReportMetric(float64(first.size)/(1<<20), "snapshot-MB")
	b.ReportMetric(warm.Seconds()/float64(b.N), "restore-warm-s")
}

// roundTimes is what one snapshot round (persist, then restore into a new
// FSM) took.
type roundTimes struct {
	persist, restore, persistCPU, restoreCPU, restoreSys time.Duration
	restoreAlloc                                         uint64
	size                                                 int
}

// persistRestore persists f's state into memory and restores it into a
// new FSM, checks that the new FSM holds as many deployments and events,
// and collects what it leaves behind before it returns. When timed, the
// benchmark's timer runs over the persist and the restore only.
func persistRestore(b *testing.B, f *FSM, deployments, events int, timed bool) roundTimes {
	b.Helper()
	var r roundTimes
	var ms runtime.MemStats
	sink := &chunkSink{}
	if timed {
		b.StartTimer()
	}
	c0, _ := rusage()
	t0 := time.Now()
	snap, err := f.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		b.Fatal(err)
	}
	snap.Release()
	t1 := time.Now()
	c1, s1 := rusage()
	if timed {
		b.StopTimer()
	}
	runtime.ReadMemStats(&ms)
	if timed {
		b.StartTimer()
	}
	alloc0 := ms.TotalAlloc
	g, err := New(hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Restore(io.NopCloser(sink.reader())); err != nil {
		b.Fatal(err)
	}
	t2 := time.Now()
	c2, s2 := rusage()
	if timed {
		b.StopTimer()
	}
	runtime.ReadMemStats(&ms)
	r.restoreAlloc = ms.TotalAlloc - alloc0
	r.persist, r.restore = t1.Sub(t0), t2.Sub(t1)
	r.persistCPU, r.restoreCPU, r.restoreSys = c1-c0, c2-c1, s2-s1
	r.size = sink.size
	counts, err := g.State().Counts()
	if err != nil || counts[TableDeployments] != deployments || counts[TableEvents] != events {
		b.Fatalf("restored counts %v, %v", counts, err)
	}
	g, sink = nil, nil
	runtime.GC()
	return r
}

// chunkSink is a snapshot sink over memory that, like a file, never copies
// what it already holds as it grows.
type chunkSink struct {
	chunks [][]byte
	size   int
}

var _ raft.SnapshotSink = (*chunkSink)(nil)

func (s *chunkSink) Write(p []byte) (int, error) {
	const chunk = 4 << 20
	for rest := p; len(rest) > 0; {
		if len(s.chunks) == 0 || len(s.chunks[len(s.chunks)-1]) == chunk {
			s.chunks = append(s.chunks, make([]byte, 0, chunk))
		}
		last := &s.chunks[len(s.chunks)-1]
		n := min(len(rest), chunk-len(*last))
		*last = append(*last, rest[:n]...)
		rest = rest[n:]
	}
	s.size += len(p)
	return len(p), nil
}

func (s *chunkSink) reader() io.Reader {
	rs := make([]io.Reader, len(s.chunks))
	for i, c := range s.chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}

func (s *chunkSink) ID() string    { return "bench" }
func (s *chunkSink) Close() error  { return nil }
func (s *chunkSink) Cancel() error { return nil }

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
