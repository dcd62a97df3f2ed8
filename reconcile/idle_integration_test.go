package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// An idle Nops costs Nomad nothing: these scenarios put a counting proxy
// between a Nops server and a real Nomad dev agent, with every managed job
// in sync, and count Nomad's requests by path.

// proxied is one request the proxy passed on.
type proxied struct {
	method, path string
	at           time.Time
}

// nomadProxy is a counting reverse proxy in front of a Nomad agent. It can
// cut the event streams it carries and refuse new ones (a Nomad restart or
// a network cut, as the stream's client sees it), and rewrite the servers'
// version in /v1/agent/members.
type nomadProxy struct {
	URL    string
	target *url.URL
	proxy  *httputil.ReverseProxy

	mu      sync.Mutex
	reqs    []proxied
	streams map[int]context.CancelFunc
	next    int

	refuseStreams atomic.Bool
	// build, when set, replaces the build tag of every server in
	// /v1/agent/members answers.
	build atomic.Pointer[string]
}

func newNomadProxy(t testing.TB, nomadAddr string) *nomadProxy {
	t.Helper()
	target, err := url.Parse(nomadAddr)
	if err != nil {
		t.Fatal(err)
	}
	p := &nomadProxy{target: target, proxy: httputil.NewSingleHostReverseProxy(target), streams: map[int]context.CancelFunc{}}
	// The event stream is a long answer: pass each line on at once.
	p.proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	t.Cleanup(p.cutStreams)
	p.URL = srv.URL
	return p
}

func (p *nomadProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.reqs = append(p.reqs, proxied{method: r.Method, path: r.URL.Path, at: time.Now()})
	p.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/event/stream":
		if p.refuseStreams.Load() {
			http.Error(w, "Nomad is restarting", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		p.mu.Lock()
		id := p.next
		p.next++
		p.streams[id] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.streams, id)
			p.mu.Unlock()
			cancel()
		}()
		p.proxy.ServeHTTP(w, r.WithContext(ctx))
	case r.URL.Path == "/v1/agent/members" && p.build.Load() != nil:
		p.rewriteMembers(w, r, *p.build.Load())
	default:
		p.proxy.ServeHTTP(w, r)
	}
}

// rewriteMembers answers /v1/agent/members with Nomad's answer, every
// server's build tag replaced.
func (p *nomadProxy) rewriteMembers(w http.ResponseWriter, r *http.Request, build string) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target.String()+r.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	// Let the transport ask for gzip and undo it.
	req.Header.Del("Accept-Encoding")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	var out nomadapi.ServerMembers
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		http.Error(w, "unexpected answer from Nomad", http.StatusBadGateway)
		return
	}
	for _, m := range out.Members {
		m.Tags["build"] = build
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out)
}

// cutStreams ends every event stream under way.
func (p *nomadProxy) cutStreams() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.streams {
		cancel()
	}
}

// mark returns the number of requests so far, for since.
func (p *nomadProxy) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// since returns the requests after mark.
func (p *nomadProxy) since(mark int) []proxied {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxied(nil), p.reqs[mark:]...)
}

var planPath = regexp.MustCompile(`^/v1/job/([^/]+)/plan$`)

// plansByJob counts the plan requests of reqs by job ID.
func plansByJob(reqs []proxied) map[string]int {
	out := map[string]int{}
	for _, r := range reqs {
		if m := planPath.FindStringSubmatch(r.path); m != nil {
			out[m[1]]++
		}
	}
	return out
}

// byPath counts reqs by method and path, plans folded into one row.
func byPath(reqs []proxied) map[string]int {
	out := map[string]int{}
	for _, r := range reqs {
		path := r.path
		if planPath.MatchString(path) {
			path = "/v1/job/*/plan"
		}
		out[r.method+" "+path]++
	}
	return out
}

func describe(counts map[string]int) string {
	var rows []string
	for k, n := range counts {
		rows = append(rows, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(rows)
	return strings.Join(rows, ", ")
}

// quietFor waits until the proxy saw no request for d but the version
// check and the paths of polls, so that the work a setup step started has
// run out.
func (p *nomadProxy) quietFor(t testing.TB, d time.Duration, polls ...string) {
	t.Helper()
	testutil.WaitForResult(t, 2*time.Minute, func() (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i := len(p.reqs) - 1; i >= 0 && time.Since(p.reqs[i].at) < d; i-- {
			if path := p.reqs[i].path; path != "/v1/agent/members" && !slices.Contains(polls, path) {
				return false, fmt.Errorf("%s %s %s ago", p.reqs[i].method, p.reqs[i].path, time.Since(p.reqs[i].at).Round(time.Millisecond))
			}
		}
		return true, nil
	})
}

// idleEnv is a Nomad agent with n managed jobs registered as git has them
// (parameterized batch jobs, policy auto), and a Nops server that talks to
// it through a counting proxy and has seen every job in sync.
type idleEnv struct {
	t     *testing.T
	nomad *testutil.NomadAgent
	proxy *nomadProxy
	s     *nopstest.Server
	n     int
}

func idleJobID(i int) string { return fmt.Sprintf("idle-%02d", i) }

func startIdle(t *testing.T, n int, drift time.Duration, stream bool, tune func(*config.Config)) *idleEnv {
	t.Helper()
	e := &idleEnv{t: t, nomad: testutil.StartNomad(t), n: n}
	repo := testutil.NewGitRepo(t)
	hcl := map[string]string{}
	for i := range n {
		hcl[idleJobID(i)] = benchJobHCL(idleJobID(i), structs.PolicyAuto, 0)
		repo.WriteFile(jobFile(idleJobID(i)), hcl[idleJobID(i)])
	}
	repo.Commit("jobs")
	registerInNomad(t, e.nomad, hcl, 4)
	e.proxy = newNomadProxy(t, e.nomad.Addr)
	e.s = nopstest.Start(t, "", nopstest.WithNomad(e.proxy.URL), nopstest.WithRepo("main", repo.URL(), "main", jobsDir),
		nopstest.WithConfig(func(c *config.Config) {
			c.DriftInterval, c.NomadEventStream = drift, stream
			c.FullReplanInterval = time.Hour
			for i := range c.Repositories {
				c.Repositories[i].PollInterval = time.Hour
			}
			if tune != nil {
				tune(c)
			}
		}))
	testutil.WaitForResult(t, 2*time.Minute, func() (bool, error) {
		in, err := jobsInSync(e.s)
		if err != nil || in != n {
			return false, fmt.Errorf("%d of %d jobs in sync (%v)", in, n, err)
		}
		if stream && !e.s.Manager().WatchingEvents() {
			return false, fmt.Errorf("the event stream is not up")
		}
		return true, nil
	})
	if stream {
		e.proxy.quietFor(t, time.Second)
	} else {
		e.proxy.quietFor(t, time.Second, "/v1/jobs", "/v1/allocations")
	}
	return e
}

// changeInNomad registers a changed spec of job id in Nomad directly, as
// someone running `nomad job run` would.
func (e *idleEnv) changeInNomad(id string, rev int) {
	e.t.Helper()
	job, err := e.nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{
		JobHCL: benchJobHCL(id, structs.PolicyAuto, rev), Canonicalize: true})
	if err == nil {
		_, _, err = e.nomad.Client.Jobs().Register(job, nil)
	}
	if err != nil {
		e.t.Fatalf("change %s in Nomad: %v", id, err)
	}
}

// window counts the requests of an idle window of d.
func (e *idleEnv) window(d time.Duration) []proxied {
	mark := e.proxy.mark()
	time.Sleep(d)
	return e.proxy.since(mark)
}

// TestIdle_StreamUpPlansNothing: with every job in sync and the event
// stream up, 60 drift intervals cost Nomad no plan and at most one request
// a drift interval, the check of the servers' version.
func TestIdle_StreamUpPlansNothing(t *testing.T) {
	t.Parallel()
	const drift = 200 * time.Millisecond
	e := startIdle(t, 12, drift, true, nil)
	const intervals = 60
	reqs := e.window(intervals * drift)
	counts := byPath(reqs)
	t.Logf("%d drift intervals idle: %s", intervals, describe(counts))
	if plans := plansByJob(reqs); len(plans) != 0 {
		t.Errorf("an idle window planned jobs: %v", plans)
	}
	if len(reqs) > intervals+1 {
		t.Errorf("%d Nomad requests in %d drift intervals, want at most one a drift interval: %s", len(reqs), intervals, describe(counts))
	}
	if n := counts["GET /v1/agent/members"]; n != len(reqs) || n < intervals/2 {
		t.Errorf("the idle window's requests are not the version check of every drift interval: %s", describe(counts))
	}
}

// TestIdle_VersionChangeReplansEveryJobOnce: a Nomad restart on another
// version makes the leader re-plan every managed job exactly once, paced
// by nomad_replan_rate. Two Nomad versions cannot run here cheaply: the
// proxy stands in for the upgrade, cutting the event stream (the restart)
// and answering /v1/agent/members with another build (the new version).
func TestIdle_VersionChangeReplansEveryJobOnce(t *testing.T) {
	t.Parallel()
	const drift, rate, n = 200 * time.Millisecond, 4, 10
	e := startIdle(t, n, drift, true, func(c *config.Config) { c.NomadReplanRate = rate })
	if v := e.s.Manager().NomadVersion(); v == "" {
		t.Fatal("the leader has not read Nomad's version")
	}
	mark := e.proxy.mark()
	upgraded := "1.6.99"
	e.proxy.build.Store(&upgraded)
	e.proxy.cutStreams()
	testutil.WaitForResult(t, time.Minute, func() (bool, error) {
		plans := plansByJob(e.proxy.since(mark))
		return len(plans) == n, fmt.Errorf("%d of %d jobs re-planned: %v", len(plans), n, plans)
	})
	// Long enough for a second re-plan, had there been one.
	time.Sleep(15 * drift)
	reqs := e.proxy.since(mark)
	var times []time.Time
	for id, k := range plansByJob(reqs) {
		if k != 1 {
			t.Errorf("job %s planned %d times after the version change, want once", id, k)
		}
	}
	for _, r := range reqs {
		if planPath.MatchString(r.path) {
			times = append(times, r.at)
		}
	}
	// Paced: no window of one second holds more than rate plans (a hair
	// of slack for the proxy's clock).
	for i := range times {
		in := 0
		for _, at := range times[i:] {
			if at.Sub(times[i]) < time.Second-20*time.Millisecond {
				in++
			}
		}
		if in > rate {
			t.Errorf("%d plans within one second of %s, budget %d a second", in, times[i].Format("15:04:05.000"), rate)
		}
	}
	if got := e.s.Manager().NomadVersion(); got != upgraded {
		t.Errorf("version seen %q, want %q", got, upgraded)
	}
	if v, err := testutil.MetricValue(e.s.Metrics(), "nops_nomad_version_changes_total"); err != nil || v != 1 {
		t.Errorf("nops_nomad_version_changes_total %v, %v; want 1", v, err)
	}
	t.Logf("after the version change: %s", describe(byPath(reqs)))
}

// TestIdle_StreamGapReplansOnlyChangedJobs: the stream is cut, two jobs are
// changed in Nomad directly, and Nomad's event buffer moves past those
// changes before the stream comes back; the resumed stream has no event of
// them, and the leader re-plans those two jobs, and no other, from one list
// of the live jobs. The drift interval is long, so that no poll finds them.
func TestIdle_StreamGapReplansOnlyChangedJobs(t *testing.T) {
	t.Parallel()
	const n = 8
	e := startIdle(t, n, time.Hour, true, nil)
	_, meta, err := e.nomad.Client.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	before := meta.LastIndex
	e.proxy.refuseStreams.Store(true)
	e.proxy.cutStreams()
	testutil.WaitForResult(t, time.Minute, func() (bool, error) {
		return !e.s.Manager().WatchingEvents(), fmt.Errorf("the leader still watches the stream")
	})
	// The cycle the break runs at once.
	e.proxy.quietFor(t, time.Second)
	mark := e.proxy.mark()
	changed := []string{idleJobID(1), idleJobID(5)}
	for _, id := range changed {
		e.changeInNomad(id, 1)
	}
	e.flushEventBuffer()
	e.wantNoEventsSince(before, changed)

	e.proxy.refuseStreams.Store(false)
	testutil.WaitForResult(t, time.Minute, func() (bool, error) {
		return e.s.Manager().WatchingEvents(), fmt.Errorf("the stream is not back")
	})
	// Policy auto: git's spec goes back to Nomad.
	for _, id := range changed {
		e.s.WaitForDeployment("default", id, structs.StateCompleted, scenarioWait)
	}
	e.proxy.quietFor(t, time.Second)
	reqs := e.proxy.since(mark)
	plans := plansByJob(reqs)
	t.Logf("from the gap on: %s; plans %v", describe(byPath(reqs)), plans)
	for id := range plans {
		if id != changed[0] && id != changed[1] {
			t.Errorf("job %s, unchanged, was planned after the gap", id)
		}
	}
	for _, id := range changed {
		if plans[id] == 0 {
			t.Errorf("job %s, changed in the gap, was not planned", id)
		}
	}
}

// flushEventBuffer makes more writes than Nomad's event buffer holds (100
// by default): registers of a job no repository has.
func (e *idleEnv) flushEventBuffer() {
	e.t.Helper()
	job, err := e.nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{
		JobHCL: testutil.BatchJobHCL("scratch", testutil.WithHookMeta(nil, nil)), Canonicalize: true})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range 130 {
		job.Meta = map[string]string{"i": fmt.Sprint(i)}
		if _, _, err := e.nomad.Client.Jobs().Register(job, nil); err != nil {
			e.t.Fatalf("register scratch job: %v", err)
		}
	}
}

// wantNoEventsSince checks that a stream resumed from index (as the
// leader's is) gets no event of jobs: Nomad no longer holds them.
func (e *idleEnv) wantNoEventsSince(index uint64, jobs []string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ch, err := e.nomad.Client.EventStream().Stream(ctx, map[nomadapi.Topic][]string{nomadapi.TopicJob: jobs}, index, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case evs, ok := <-ch:
			if !ok {
				return
			}
			if evs.Err != nil {
				if ctx.Err() != nil || evs.Err == io.EOF {
					return
				}
				e.t.Fatalf("event stream: %v", evs.Err)
			}
			for _, ev := range evs.Events {
				e.t.Fatalf("Nomad still holds event %s of %s at %d: no gap was made", ev.Type, ev.Key, ev.Index)
			}
		}
	}
}

// TestIdle_StreamDownListsOnceADriftInterval: without the event stream,
// detection lists the live jobs once a drift interval and plans only the
// job whose modify index changed.
func TestIdle_StreamDownListsOnceADriftInterval(t *testing.T) {
	t.Parallel()
	const drift = 200 * time.Millisecond
	e := startIdle(t, 10, drift, false, nil)
	const intervals = 60
	reqs := e.window(intervals * drift)
	counts := byPath(reqs)
	t.Logf("%d drift intervals without the stream: %s", intervals, describe(counts))
	if plans := plansByJob(reqs); len(plans) != 0 {
		t.Errorf("an idle window planned jobs: %v", plans)
	}
	if lists := counts["GET /v1/jobs"]; lists > intervals+1 || lists < intervals/3 {
		t.Errorf("%d lists of the live jobs in %d drift intervals, want about one each", lists, intervals)
	}
	for k := range counts {
		switch k {
		case "GET /v1/jobs", "GET /v1/agent/members", "GET /v1/allocations":
		default:
			t.Errorf("unexpected request in the idle window: %s (%d)", k, counts[k])
		}
	}

	mark := e.proxy.mark()
	changed := idleJobID(3)
	e.changeInNomad(changed, 1)
	e.s.WaitForDeployment("default", changed, structs.StateCompleted, scenarioWait)
	time.Sleep(10 * drift)
	plans := plansByJob(e.proxy.since(mark))
	if plans[changed] == 0 || len(plans) != 1 {
		t.Errorf("plans after a change of %s in Nomad: %v, want that job's only", changed, plans)
	}
}
