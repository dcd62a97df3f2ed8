package reconcile_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

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

// deploymentOf waits for the deployment of commit for job id to reach
// state, and returns it.
func (w *floorWorld) deploymentOf(t *testing.T, id, commit string, state structs.DeploymentState) *structs.Deployment {
	t.Helper()
	var d *structs.Deployment
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		for _, dep := range w.s.Deployments("default", id) {
			if dep.Commit == commit {
				d = dep
				return dep.State == state, fmt.Errorf("deployment %s of commit %s is %s, want %s: %s",
					dep.ID, commit[:8], dep.State, state, dep.Error)
			}
		}
		return false, fmt.Errorf("no deployment of commit %s", commit[:8])
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
// several managed jobs (policy auto, no hooks) reaches Nomad at the floor:
// from the push to the register's answer, one parse, one plan and the
// register; after it, until the deployment completed and the server is
// quiet again, no more than two requests (the health of the registered
// version). Every request Nops sends to Nomad is recorded by a proxy in
// front of a real Nomad agent.
func TestFloor_CommitToRegisterRequests(t *testing.T) {
	w := startFloorWorld(t, 5)
	for round := range 2 {
		from := w.proxy.mark()
		commit := w.push(t, "job-2")
		w.deploymentOf(t, "job-2", commit, structs.StateCompleted)
		w.proxy.waitQuiet(t, 2*time.Second, lcWait)
		upTo, after := splitAtRegister(w.proxy.since(from))
		t.Logf("round %d: commit to register answered, %d requests:\n%safter the register until quiet, %d requests:\n%s",
			round, len(upTo), callList(upTo), len(after), callList(after))
	}
}
