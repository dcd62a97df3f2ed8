package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// wrapSrv is a reconcile.Server over a real test server, with a hook on Apply.
type wrapSrv struct {
	s       *nopstest.Server
	onApply func(t structs.MessageType, req any) error
}

func (w *wrapSrv) State() *fsm.StateStore { return w.s.State() }
func (w *wrapSrv) IsLeader() bool         { return w.s.IsLeader() }
func (w *wrapSrv) NodeID() string         { return w.s.NodeID() }
func (w *wrapSrv) Apply(t structs.MessageType, req any) (uint64, error) {
	if w.onApply != nil {
		if err := w.onApply(t, req); err != nil {
			return 0, err
		}
	}
	return w.s.Apply(t, req)
}

func reviewManager(t *testing.T, srv reconcile.Server, nomadAddr, repoURL string) *reconcile.Manager {
	nc, err := nomadx.New(nomadx.Config{Address: nomadAddr}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gitwatch.New([]gitwatch.RepoConfig{{Name: "main", URL: repoURL, Branch: "main", Path: "jobs",
		PollInterval: 200 * time.Millisecond}}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return reconcile.New(reconcile.Config{DriftInterval: 2 * time.Second, EngineInterval: 200 * time.Millisecond,
		Defaults: meta.Defaults{Policy: structs.PolicyAuto, ApplyTimeout: 2 * time.Minute, HookTimeout: time.Minute}},
		srv, nc, gw, nopstest.Logger("review"))
}

// serveLocal serves h on a loopback port until the test ends and returns
// its URL.
func serveLocal(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

// hookRan waits for a test hook's result: it fails the test on the hook's
// error, or with missing when the hook has not run within timeout.
func hookRan(t *testing.T, ran <-chan error, timeout time.Duration, missing string) {
	t.Helper()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(timeout):
		t.Fatal(missing)
	}
}

// runManager runs m until the test ends.
func runManager(t *testing.T, m *reconcile.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestReview_SecondTermDetectsFromAFreshFetch: a server that led, lost the
// leadership while another deployed a newer commit, and leads again must
// not deploy the snapshot it kept from its first term (that would roll the
// job back); it detects from a fetch made in the new term.
func TestReview_SecondTermDetectsFromAFreshFetch(t *testing.T) {
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("v", "1"))...))
	c1 := repo.Commit("v1")
	backend, _ := url.Parse(repo.ServeHTTP(t))
	var slow atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: backend.Scheme, Host: backend.Host})
	front := serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			// A remote that answers slowly, so the new term's fetch ends
			// well after its first detection could have run.
			time.Sleep(1500 * time.Millisecond)
		}
		proxy.ServeHTTP(w, r)
	}))
	repoURL := front + backend.Path

	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithNomad(nomad.Addr))
	m := reviewManager(t, &wrapSrv{s: s}, nomad.Addr, repoURL)

	ctx1, cancel1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { m.Run(ctx1, nil); close(done1) }()
	s.WaitForDeployment("default", "web", structs.StateCompleted, 90*time.Second)
	cancel1()
	<-done1

	// Another leader deploys v2 while this server follows.
	v2 := testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("v", "2"))...)
	repo.WriteFile("jobs/web.nomad.hcl", v2)
	repo.Commit("v2")
	nomad.RegisterJobHCL(t, v2)
	slow.Store(true)

	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { m.Run(ctx2, nil); close(done2) }()
	defer func() { cancel2(); <-done2 }()
	// The second term's view of git must reach v2, in sync with Nomad.
	s.WaitForJobStatus("default", "web", 60*time.Second, func(st *structs.JobStatus) bool {
		return st.Commit != c1 && st.Sync == structs.SyncInSync
	})
	for _, d := range s.Deployments("default", "web") {
		if d.Commit == c1 && d.CreatedAt.After(time.Now().Add(-30*time.Second)) && len(s.Deployments("default", "web")) > 1 {
			t.Fatalf("the second term created deployment %s of the old commit %s", d.ID, c1[:8])
		}
	}
	vs, _, _, err := nomad.Client.Jobs().Versions("web", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if *v.Version > 1 {
			t.Fatalf("Nomad has job version %d (meta v=%q): the second term registered again", *v.Version, v.Meta["v"])
		}
	}
}

// TestReview_RemovedJobSupersedesItsPendingDeployment: a job removed from
// git takes its waiting deployment with it; approving it is refused and
// nothing is registered.
func TestReview_RemovedJobSupersedesItsPendingDeployment(t *testing.T) {
	e := lcStart(t, managedWeb(structs.PolicyApproval))
	d := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	e.commit("drop web", nil, jobFile("web"))
	e.waitHead(e.repo.Head())
	got := e.s.WaitForDeployment("default", "web", structs.StateSuperseded, lcWait)
	if got.ID != d.ID {
		t.Fatalf("superseded %s, want %s", got.ID, d.ID)
	}
	events := e.s.Events(d.ID)
	if last := events[len(events)-1]; !strings.Contains(last.Message, "no longer declared") {
		t.Fatalf("supersede event: %+v", last)
	}
	if code, body := e.s.Do("POST", "/v1/deployment/"+d.ID+"/approve", map[string]string{"comment": "ok"}, nil); code != http.StatusConflict {
		t.Fatalf("approve of a superseded deployment: %d %s", code, body)
	}
	if _, _, err := e.nomad.Client.Jobs().Info("web", nil); err == nil {
		t.Fatal("Nomad has job web, which git no longer declares and nobody approved")
	}
}

// TestReview_ResumedRegisterKeepsTheAutoscalersCount: a register resumed
// after its intent was recorded (a crash before Nomad answered) keeps the
// count of a group left to the autoscaler.
func TestReview_ResumedRegisterKeepsTheAutoscalersCount(t *testing.T) {
	nomad := testutil.StartNomad(t)
	reg := nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithScaling(1, 5))...))
	nomad.WaitForDeployment(t, reg, "successful")
	count := 3
	if _, _, err := nomad.Client.Jobs().Scale("web", "app", &count, "load", false, nil, nil); err != nil {
		t.Fatal(err)
	}
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithScaling(1, 5), testutil.WithMeta("v", "2"))...))
	repo.Commit("v2")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithNomad(nomad.Addr))
	var once sync.Once
	w := &wrapSrv{s: s}
	w.onApply = func(mt structs.MessageType, req any) error {
		var crash error
		if r, ok := req.(*structs.DeploymentUpdateRequest); ok && r.Update != nil && r.Update.RegisterStartedAt != nil {
			once.Do(func() {
				if _, err := s.Apply(mt, req); err != nil {
					t.Errorf("intent: %v", err)
				}
				crash = errors.New("simulated crash after the register intent was committed")
			})
		}
		return crash
	}
	m := reviewManager(t, w, nomad.Addr, repo.URL())
	runManager(t, m)
	s.WaitForDeployment("default", "web", structs.StateCompleted, 90*time.Second)
	j, _, err := nomad.Client.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := *j.TaskGroups[0].Count; got != 3 {
		t.Fatalf("count after the resumed register: %d, want the autoscaler's 3", got)
	}
	if j.Meta["v"] != "2" {
		t.Fatalf("the resumed register did not register v2: meta %v", j.Meta)
	}
}

// TestReview_RefusedRegisterFailsNothingRegistered: a register Nomad
// refuses fails the deployment at once with nothing registered, instead of
// retrying past the apply timeout.
func TestReview_RefusedRegisterFailsNothingRegistered(t *testing.T) {
	nomad := testutil.StartNomad(t)
	target, _ := url.Parse(nomad.Addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var refusedN atomic.Int64
	front := serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == "PUT" || r.Method == "POST") && r.URL.Path == "/v1/jobs" {
			refusedN.Add(1)
			http.Error(w, "simulated: register refused", http.StatusBadRequest)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("nops_apply_timeout", "3s"))...))
	repo.Commit("v1")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithNomad(nomad.Addr))
	m := reviewManager(t, &wrapSrv{s: s}, front, repo.URL())
	runManager(t, m)
	d := s.WaitForDeployment("default", "web", structs.StateFailed, 30*time.Second)
	if !strings.Contains(d.Error, "refused the register") || !strings.Contains(d.Error, "nothing registered") || d.Registered {
		t.Fatalf("deployment: error %q registered %v", d.Error, d.Registered)
	}
	if n := refusedN.Load(); n != 1 {
		t.Fatalf("register attempted %d times, want 1", n)
	}
	b, _ := s.State().Block("", "default", "web")
	if b == nil || b.AfterRegister {
		t.Fatalf("block: %+v, want one from before the register", b)
	}
}

// TestReview_PauseDuringPlanHoldsDeployNow: a job held by a closed window
// is paused and then given a deploy now while a detection cycle, which
// read the pauses before, plans it. The deploy now lifts the window, never
// the pause: the cycle creates nothing, and the deploy now stays stored
// for the deployment after the resume.
func TestReview_PauseDuringPlanHoldsDeployNow(t *testing.T) {
	nomad := testutil.StartNomad(t)
	target, _ := url.Parse(nomad.Addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var armed atomic.Bool
	var apiURL string
	fired := make(chan error, 1)
	post := func(path, body string) error {
		req, err := http.NewRequest("POST", apiURL+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Nops-Actor", "tester")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: %d", path, resp.StatusCode)
		}
		return nil
	}
	front := serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/job/web/plan") && armed.CompareAndSwap(true, false) {
			// The cycle has read the pauses; both writes are acknowledged
			// before its plan of web answers.
			err := post("/v1/job/default/web/pause", `{"reason":"incident"}`)
			if err == nil {
				err = post("/v1/job/default/web/deploy-now", `{}`)
			}
			fired <- err
		}
		proxy.ServeHTTP(w, r)
	}))

	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("v", "1"))...))
	repo.Commit("v1")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithNomad(nomad.Addr))
	apiURL = s.URL
	m := reviewManager(t, &wrapSrv{s: s}, front, repo.URL())
	runManager(t, m)
	s.WaitForDeployment("default", "web", structs.StateCompleted, 90*time.Second)

	// A window closed at every hour of the day holds v2.
	if code, body := s.Do("PUT", "/v1/window/freeze", map[string]string{"kind": "deny", "schedule": "0 * * * *", "duration": "1h"}, nil); code != http.StatusOK {
		t.Fatalf("put window: %d %s", code, body)
	}
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("v", "2"))...))
	repo.Commit("v2")
	s.WaitForJobStatus("default", "web", 30*time.Second, func(st *structs.JobStatus) bool {
		return st.Sync == structs.SyncDrift && strings.Contains(st.Hold, "deny window freeze")
	})

	// A new commit starts a cycle that plans web at once; the writes land
	// during that plan.
	armed.Store(true)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("v", "3"))...))
	repo.Commit("v3")
	hookRan(t, fired, 30*time.Second, "no plan of web after the commit")
	// The status shows the pause once a cycle decided with it: the cycle
	// that planned web during the writes has acted by then.
	s.WaitForJobStatus("default", "web", 30*time.Second, func(st *structs.JobStatus) bool {
		return strings.Contains(st.Hold, "paused by tester: incident")
	})
	if got := s.Deployments("default", "web"); len(got) != 1 {
		t.Fatalf("web has %d deployments after a pause and a deploy now during its plan, want 1 (v1): the deploy now lifted the pause", len(got))
	}
	if lift, err := s.State().Lift("", "default", "web"); err != nil || lift == nil || lift.Actor != "tester" {
		t.Fatalf("the deploy now is not kept for the next deployment: %+v %v", lift, err)
	}
}

// TestReview_PauseDuringSettleHoldsCreate: a pause committed after
// detection read a job's holds, while it supersedes the job's waiting
// deployment for a new commit, holds the deployment that would replace it:
// detection reads the holds again before it creates.
func TestReview_PauseDuringSettleHoldsCreate(t *testing.T) {
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithMeta("v", "1"))...))
	repo.Commit("v1")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithNomad(nomad.Addr))
	var armed atomic.Bool
	paused := make(chan error, 1)
	srv := &wrapSrv{s: s, onApply: func(typ structs.MessageType, req any) error {
		if tr, ok := req.(*structs.DeploymentTransitionRequest); ok && typ == structs.DeploymentTransitionRequestType &&
			tr.To == structs.StateSuperseded && armed.CompareAndSwap(true, false) {
			_, err := s.Apply(structs.PauseRequestType, &structs.PauseRequest{
				WriteMeta: structs.WriteMeta{Time: time.Now().UTC(), Actor: "tester"},
				Namespace: "default", JobID: "web", Reason: "incident"})
			paused <- err
		}
		return nil
	}}
	m := reviewManager(t, srv, nomad.Addr, repo.URL())
	runManager(t, m)
	first := s.WaitForDeployment("default", "web", structs.StatePendingApproval, 90*time.Second)

	armed.Store(true)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithMeta("v", "2"))...))
	repo.Commit("v2")
	hookRan(t, paused, 60*time.Second, "the waiting deployment was not superseded for the new commit")
	s.WaitForDeployment("default", "web", structs.StateSuperseded, 30*time.Second)
	s.WaitForJobStatus("default", "web", 30*time.Second, func(st *structs.JobStatus) bool {
		return strings.Contains(st.Hold, "paused by tester: incident")
	})
	if got := s.Deployments("default", "web"); len(got) != 1 || got[0].ID != first.ID {
		t.Fatalf("web has %d deployments after a pause during the supersede, want only the superseded %s", len(got), first.ID)
	}
}
