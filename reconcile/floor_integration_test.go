package reconcile_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
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

// floorCall is one request Nops sent to Nomad through a floorProxy.
type floorCall struct {
	Method, Path string
	At           time.Time
	// Status is Nomad's answer (0 while it has not answered).
	Status int
}

func (c floorCall) String() string { return c.Method + " " + c.Path }

// floorProxy is a reverse proxy in front of a real Nomad agent that records
// every request Nops sends (method and path), in the order they arrive, so
// that a test can say exactly which requests one piece of work cost.
// The event stream passes through too (it is recorded once, when opened).
type floorProxy struct {
	URL string

	mu    sync.Mutex
	calls []floorCall
	// intercept, when set, is called before a request goes to Nomad;
	// it may act on Nomad itself.
	intercept func(r *http.Request)
}

func newFloorProxy(t testing.TB, nomadAddr string) *floorProxy {
	t.Helper()
	target, err := url.Parse(nomadAddr)
	if err != nil {
		t.Fatalf("Nomad address %q: %v", nomadAddr, err)
	}
	p := &floorProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // the event stream passes at once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		i := len(p.calls)
		p.calls = append(p.calls, floorCall{Method: r.Method, Path: r.URL.Path, At: time.Now()})
		hook := p.intercept
		p.mu.Unlock()
		if hook != nil {
			hook(r)
		}
		sw := &floorStatus{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(sw, r)
		p.mu.Lock()
		p.calls[i].Status = sw.status
		p.mu.Unlock()
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	p.URL = srv.URL
	return p
}

// mark returns the position of the next request.
func (p *floorProxy) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// since returns the requests from position from on.
func (p *floorProxy) since(from int) []floorCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]floorCall(nil), p.calls[from:]...)
}

// setIntercept sets (or, with nil, clears) the interceptor.
func (p *floorProxy) setIntercept(f func(r *http.Request)) {
	p.mu.Lock()
	p.intercept = f
	p.mu.Unlock()
}

// waitQuiet waits until no request has arrived for quiet, and at most
// limit.
func (p *floorProxy) waitQuiet(t testing.TB, quiet, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		var last time.Time
		if n := len(p.calls); n > 0 {
			last = p.calls[n-1].At
		}
		p.mu.Unlock()
		if time.Since(last) >= quiet {
			return
		}
		time.Sleep(quiet / 4)
	}
	t.Fatalf("Nops still sends requests to Nomad after %s: %v", limit, p.since(max(0, p.mark()-10)))
}

type floorStatus struct {
	http.ResponseWriter
	status int
}

func (w *floorStatus) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *floorStatus) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// isRegister reports whether a call is a job register.
func (c floorCall) isRegister() bool {
	return (c.Method == http.MethodPut || c.Method == http.MethodPost) && c.Path == "/v1/jobs"
}

// floorWorld is a Nomad agent behind a floorProxy, a repository of n
// managed parameterized jobs (policy auto, no hooks), and a Nops server
// with the production drift and engine intervals, Nomad's event stream
// and a webhook, every job deployed and the server quiet.
type floorWorld struct {
	*lcEnv
	proxy  *floorProxy
	url    string
	secret string
	rev    map[string]int
}

func startFloorWorld(t *testing.T, n int) *floorWorld {
	t.Helper()
	const secret = "floor-secret"
	t.Setenv(webhookSecretEnv, secret)
	files := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		files[jobFile(id)] = benchJobHCL(id, structs.PolicyAuto, 0)
	}
	w := &floorWorld{lcEnv: lcWorld(t, files), secret: secret, rev: map[string]int{}}
	w.proxy = newFloorProxy(t, w.nomad.Addr)
	w.url = w.repo.ServeHTTP(t)
	w.serve(w.url, nopstest.WithNomad(w.proxy.URL), webhookOnly(), nopstest.WithConfig(func(c *config.Config) {
		c.DriftInterval, c.EngineInterval = config.DefaultDriftInterval, config.DefaultEngineInterval
		c.NomadEventStream = true
	}))
	for i := range n {
		w.s.WaitForDeployment("default", fmt.Sprintf("job-%d", i), structs.StateCompleted, lcWait)
	}
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		in, err := jobsInSync(w.s)
		if err != nil {
			return false, err
		}
		if in != n {
			return false, fmt.Errorf("%d of %d jobs in sync", in, n)
		}
		return w.s.Manager().WatchingEvents(), fmt.Errorf("the event stream is not up")
	})
	w.proxy.waitQuiet(t, 2*time.Second, lcWait)
	return w
}

// push commits a change of job id and posts a signed push of it.
func (w *floorWorld) push(t *testing.T, id string) string {
	t.Helper()
	w.rev[id]++
	commit := w.commit("change "+id, map[string]string{jobFile(id): benchJobHCL(id, structs.PolicyAuto, w.rev[id])})
	body := githubPush(w.url, "main", commit)
	if code, raw := postWebhook(t, w.s.URL, body, map[string]string{"X-Hub-Signature-256": githubSignature(w.secret, body)}); code != 200 {
		t.Fatalf("webhook: %d %s", code, raw)
	}
	return commit
}

// deploymentOf waits for a deployment of commit for job id to reach state,
// and returns the oldest that did. A commit can have several (one failed,
// then a new one), and a later one can be created, and even finish, between
// two looks: every deployment of the commit is looked at, not only the
// newest.
func (w *floorWorld) deploymentOf(t *testing.T, id, commit string, state structs.DeploymentState) *structs.Deployment {
	t.Helper()
	var d *structs.Deployment
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		var seen []string
		d = nil
		for _, dep := range w.s.Deployments("default", id) { // newest first
			if dep.Commit != commit {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s is %s (%s)", dep.ID, dep.State, dep.Error))
			if dep.State == state {
				d = dep
			}
		}
		if d != nil {
			return true, nil
		}
		if len(seen) == 0 {
			return false, fmt.Errorf("no deployment of commit %s", commit[:8])
		}
		return false, fmt.Errorf("no deployment of commit %s is %s: %s", commit[:8], state, strings.Join(seen, "; "))
	})
	return d
}

// callList renders calls one a line.
func callList(calls []floorCall) string {
	var b strings.Builder
	for i, c := range calls {
		fmt.Fprintf(&b, "  %2d %s (%d)\n", i+1, c, c.Status)
	}
	return b.String()
}

// splitAtRegister returns the calls up to and including the first
// register, and those after it.
func splitAtRegister(calls []floorCall) (upTo, after []floorCall) {
	for i, c := range calls {
		if c.isRegister() {
			return calls[:i+1], calls[i+1:]
		}
	}
	return calls, nil
}

// TestFloor_CommitToRegisterRequests: a commit that changes one job of
// several managed jobs (policy auto, no hooks) reaches Nomad at the floor.
// A proxy in front of a real Nomad agent records every request Nops sends.
// Two windows are counted from the push's webhook: up to the register's
// answer, and on until the deployment completed and Nops sent nothing for
// two seconds (the count of 10, before, spanned the second: three
// plans, two lists, two job reads, a parse, the register and a deployment
// read). Up to the register: the parse of the changed file, its plan (the
// detection's, which the register reuses) and the register, a
// check-and-set on the index the plan saw. After it: the read of the
// registered job (its version, and its health: a parameterized job is
// healthy once registered). The list of live jobs that Nomad's event of
// the register makes stale is made again once, by the cycle the completed
// deployment wakes, or by the next commit's cycle when the event comes
// after that one; so each register costs one list, either just after the
// read or just before the next round's parse. A round can then hold two
// (the last round's, whose event came late, and its own), and the rounds
// hold no more lists than registers, and no more than five requests a
// register in all (the world's own registers may owe one list more).
func TestFloor_CommitToRegisterRequests(t *testing.T) {
	w := startFloorWorld(t, 5)
	const job = "job-2"
	wantUpTo := []string{"PUT /v1/jobs/parse", "PUT /v1/job/" + job + "/plan", "PUT /v1/jobs"}
	wantAfter := []string{"GET /v1/job/" + job}
	const list = "GET /v1/jobs"
	const rounds = 3
	totalLists, totalCalls := 0, 0
	for round := range rounds {
		from := w.proxy.mark()
		commit := w.push(t, job)
		d := w.deploymentOf(t, job, commit, structs.StateCompleted)
		w.proxy.waitQuiet(t, 2*time.Second, lcWait)
		calls := w.proxy.since(from)
		upTo, after := splitAtRegister(calls)
		t.Logf("round %d: commit to register answered, %d requests:\n%safter the register until quiet, %d requests:\n%s",
			round, len(upTo), callList(upTo), len(after), callList(after))
		if !d.Registered || d.Error != "" {
			t.Fatalf("round %d: deployment %+v", round, d)
		}
		got := func(calls []floorCall) []string {
			var out []string
			for _, c := range calls {
				out = append(out, c.String())
			}
			return out
		}
		up, af := got(upTo), got(after)
		lists := 0
		if len(up) > 0 && up[0] == list {
			up, lists = up[1:], lists+1
		}
		if len(af) > 0 && af[len(af)-1] == list {
			af, lists = af[:len(af)-1], lists+1
		}
		if !slices.Equal(up, wantUpTo) || !slices.Equal(af, wantAfter) {
			t.Fatalf("round %d: requests from the push to the register's answer:\n%sand after it:\n%swant %v, then %v, and lists of live jobs only before the parse or at the end",
				round, callList(upTo), callList(after), wantUpTo, wantAfter)
		}
		totalLists += lists
		totalCalls += len(calls)
		for _, c := range calls {
			if c.Status != http.StatusOK {
				t.Fatalf("round %d: %s answered %d", round, c, c.Status)
			}
		}
	}
	// One list more at most: the one the world's own registers owe, when
	// their last event came after its last cycle.
	if totalLists > rounds+1 || totalCalls > 5*rounds+1 {
		t.Fatalf("%d rounds made %d lists of live jobs (one a register at most) and %d requests (five a register at most)", rounds, totalLists, totalCalls)
	}
}

// TestFloor_CheckAndSetRefusal: the register is a check-and-set on the
// modify index the detection plan saw, made without planning again. A
// change of the job in Nomad between the plan and the register (made here
// by the proxy, on the real Nomad agent, just before it passes Nops's
// register on) makes Nomad refuse the register: the deployment fails with
// nothing registered, the change stays, and detection plans the job again
// against what Nomad now holds and deploys the commit anew.
func TestFloor_CheckAndSetRefusal(t *testing.T) {
	w := startFloorWorld(t, 2)
	const job = "job-1"
	hand := testutil.BatchJobHCL(job, managed(structs.PolicyAuto, testutil.WithHookMeta(nil, nil), testutil.WithMeta("rev", "by-hand"))...)
	var handIndex atomic.Uint64
	handErr := make(chan error, 1)
	var armed atomic.Bool
	armed.Store(true)
	w.proxy.setIntercept(func(r *http.Request) {
		if !(floorCall{Method: r.Method, Path: r.URL.Path}).isRegister() || !armed.CompareAndSwap(true, false) {
			return
		}
		parsed, err := w.nomad.Client.Jobs().ParseHCL(hand, true)
		if err == nil {
			var resp *nomadapi.JobRegisterResponse
			if resp, _, err = w.nomad.Client.Jobs().Register(parsed, nil); err == nil {
				handIndex.Store(resp.JobModifyIndex)
			}
		}
		handErr <- err
	})
	before := lookupNomadJob(t, w.nomad, job)
	commit := w.push(t, job)
	select {
	case err := <-handErr:
		if err != nil {
			t.Fatalf("change of the job in Nomad: %v", err)
		}
	case <-time.After(lcWait):
		t.Fatal("Nops sent no register")
	}
	failed := w.deploymentOf(t, job, commit, structs.StateFailed)
	if failed.Registered || failed.JobModifyIndex != *before.JobModifyIndex ||
		!strings.Contains(failed.Error, "the job changed since detection") || !strings.Contains(failed.Error, "nothing registered") {
		t.Fatalf("deployment: registered %v, check-and-set index %d (live job at %d before), error %q",
			failed.Registered, failed.JobModifyIndex, *before.JobModifyIndex, failed.Error)
	}
	// Failed before its register, the deployment blocks nothing: the
	// live change wakes detection, which plans against the new live job.
	var next *structs.Deployment
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		for _, d := range w.s.Deployments("default", job) {
			if d.Commit == commit && d.ID != failed.ID && d.State == structs.StateCompleted {
				next = d
				return true, nil
			}
		}
		return false, fmt.Errorf("no second deployment of commit %s completed", commit[:8])
	})
	if next.JobModifyIndex != handIndex.Load() || !next.Registered {
		t.Fatalf("second deployment: check-and-set index %d, want the change by hand's %d; registered %v", next.JobModifyIndex, handIndex.Load(), next.Registered)
	}
	// Nomad's history: the change by hand is the version after the one
	// before the push, the refused register made none, and the second
	// deployment's register made the next (the second deployment can
	// finish before the first's failure is seen, so the history, not the
	// live job, shows that the change stayed).
	versions := w.nomadVersions(job) // newest first
	byVersion := map[uint64]*nomadapi.Job{}
	for _, v := range versions {
		byVersion[*v.Version] = v
	}
	hand1, git2 := byVersion[*before.Version+1], byVersion[*before.Version+2]
	if hand1 == nil || *hand1.JobModifyIndex != handIndex.Load() || hand1.Meta["rev"] != "by-hand" {
		t.Fatalf("Nomad's version %d after the refused register: %+v, want the change by hand at modify index %d", *before.Version+1, hand1, handIndex.Load())
	}
	if git2 == nil || git2.Meta["rev"] != "1" || *versions[0].Version != *before.Version+2 {
		t.Fatalf("Nomad's newest version is %d (rev %q), want %d of git's rev 1, made by the second deployment",
			*versions[0].Version, versions[0].Meta["rev"], *before.Version+2)
	}
}
