package failover_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

const (
	// namespace is the Nomad namespace of every job of these tests.
	namespace = "default"

	// deployTimeout bounds the wait for a deployment to reach a state,
	// failovers included.
	deployTimeout = 90 * time.Second

	// evalTriggerJobRegister is the TriggeredBy of the evaluation Nomad
	// creates for a job register.
	evalTriggerJobRegister = "job-register"
)

// fixture is what every failover test runs: a Nomad agent, a git
// repository of job files under jobs/, and a 3-server process cluster that
// watches it.
type fixture struct {
	nomad   *testutil.NomadAgent
	repo    *testutil.GitRepo
	cluster *nopstest.ProcessCluster
}

// newFixture commits files (paths under jobs/ to HCL) and starts Nomad and
// a 3-server cluster on them.
func newFixture(t testing.TB, files map[string]string, extraArgs ...string) *fixture {
	t.Helper()
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "jobs", files)
	cluster := nopstest.StartProcessCluster(t, 3, nomad.Addr, repo.URL()+"#main:jobs", extraArgs...)
	return &fixture{nomad: nomad, repo: repo, cluster: cluster}
}

// managedJob is a service job that Nops manages, with policy and more
// options.
func managedJob(id string, policy structs.Policy, opts ...testutil.JobOption) string {
	return testutil.ServiceJobHCL(id, append([]testutil.JobOption{testutil.WithManaged(string(policy))}, opts...)...)
}

// killLeader kills the leader with SIGKILL and waits for the survivors to
// agree on a new one. It returns the killed server and the new leader.
func (f *fixture) killLeader(t *testing.T, leader int) (killed, next int) {
	t.Helper()
	start := time.Now()
	f.cluster.Kill(leader)
	next = f.cluster.Leader()
	t.Logf("killed the leader %s (kill -9); %s leads after %s",
		f.cluster.Server(leader).Name, f.cluster.Server(next).Name, time.Since(start).Round(time.Millisecond))
	if next == leader {
		t.Fatalf("the killed server %s is still the leader", f.cluster.Server(leader).Name)
	}
	return leader, next
}

// restartAndRejoin starts the killed server again on its data directory and
// checks that it rejoins: three Raft peers on every server, every server
// sees the same leader. It returns the leader.
func (f *fixture) restartAndRejoin(t *testing.T, killed int) int {
	t.Helper()
	start := time.Now()
	f.cluster.Restart(killed)
	leader := f.cluster.WaitForCluster()
	t.Logf("%s restarted and rejoined in %s; %s leads",
		f.cluster.Server(killed).Name, time.Since(start).Round(time.Millisecond), f.cluster.Server(leader).Name)
	for i := range f.cluster.Len() {
		p := f.cluster.Server(i)
		peers, err := p.Peers()
		if err != nil {
			t.Fatal(err)
		}
		if len(peers) != 3 {
			t.Errorf("%s lists %d Raft peers (%v), want 3", p.Name, len(peers), peers)
		}
		self, err := p.Self()
		if err != nil {
			t.Fatal(err)
		}
		if want := f.cluster.Server(leader).RPCAddr; self.Leader != want {
			t.Errorf("%s sees leader %q, want %q", p.Name, self.Leader, want)
		}
	}
	return leader
}

// waitEverywhere waits until the deployment, read from the local state of
// every running server, satisfies ok.
func (f *fixture) waitEverywhere(t *testing.T, id string, ok func(*structs.Deployment) error) {
	t.Helper()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		for _, i := range f.cluster.Running() {
			p := f.cluster.Server(i)
			d, err := p.Deployment(id)
			if err != nil {
				return false, err
			}
			if err := ok(d); err != nil {
				return false, fmt.Errorf("%s: deployment %s: %w", p.Name, id, err)
			}
		}
		return true, nil
	})
}

// registersOf counts the registers of a job that Nomad saw: its job
// versions and its evaluations triggered by a register. A second register
// of the same spec would make no new version, but it would make a new
// evaluation.
func (f *fixture) registersOf(t *testing.T, jobID string) (versions, registerEvals int) {
	t.Helper()
	q := &nomadapi.QueryOptions{Namespace: namespace}
	list, _, _, err := f.nomad.Client.Jobs().Versions(jobID, false, q)
	if err != nil {
		t.Fatalf("versions of job %q: %v", jobID, err)
	}
	evals, _, err := f.nomad.Client.Jobs().Evaluations(jobID, q)
	if err != nil {
		t.Fatalf("evaluations of job %q: %v", jobID, err)
	}
	for _, e := range evals {
		if e.TriggeredBy == evalTriggerJobRegister {
			registerEvals++
		}
	}
	return len(list), registerEvals
}

// checkRegisteredOnce checks that Nomad saw exactly one register of the
// job, whose evaluation is the one the deployment recorded.
func (f *fixture) checkRegisteredOnce(t *testing.T, d *structs.Deployment) {
	t.Helper()
	versions, evals := f.registersOf(t, d.JobID)
	if versions != 1 || evals != 1 {
		t.Errorf("Nomad has %d versions and %d register evaluations of job %q, want 1 and 1", versions, evals, d.JobID)
	}
	if d.NomadEvalID != "" {
		eval, _, err := f.nomad.Client.Evaluations().Info(d.NomadEvalID, &nomadapi.QueryOptions{Namespace: namespace})
		if err != nil {
			t.Errorf("evaluation %s recorded by deployment %s: %v", d.NomadEvalID, d.ID, err)
		} else if eval.JobID != d.JobID || eval.TriggeredBy != evalTriggerJobRegister {
			t.Errorf("evaluation %s recorded by deployment %s is of job %q, triggered by %q", d.NomadEvalID, d.ID, eval.JobID, eval.TriggeredBy)
		}
	}
}

// nomadDeploymentsOf returns the Nomad deployments of a job.
func (f *fixture) nomadDeploymentsOf(t *testing.T, jobID string) []*nomadapi.Deployment {
	t.Helper()
	list, _, err := f.nomad.Client.Jobs().Deployments(jobID, true, &nomadapi.QueryOptions{Namespace: namespace})
	if err != nil {
		t.Fatalf("deployments of job %q: %v", jobID, err)
	}
	return list
}

// checkForwardOnly checks the events of a deployment on a server: each
// state change moves forward in the lifecycle, and no state is entered
// twice.
func checkForwardOnly(t *testing.T, p *nopstest.Process, id string) []*structs.Event {
	t.Helper()
	events, err := p.DeploymentEvents(id)
	if err != nil {
		t.Fatal(err)
	}
	entered := map[string]bool{}
	var path []string
	for _, e := range events {
		if e.To == "" || e.From == e.To {
			continue
		}
		from, to := structs.DeploymentState(e.From), structs.DeploymentState(e.To)
		path = append(path, e.To)
		if entered[e.To] {
			t.Errorf("%s: deployment %s entered %s twice (event %d: %s)", p.Name, id, e.To, e.Seq, e.Message)
		}
		entered[e.To] = true
		if e.From != "" && nopstest.StateRank(to) <= nopstest.StateRank(from) {
			t.Errorf("%s: deployment %s went backwards, %s -> %s (event %d)", p.Name, id, e.From, e.To, e.Seq)
		}
	}
	t.Logf("%s: deployment %s went through %v", p.Name, id, path)
	return events
}

// checkApproved checks that a deployment carries exactly one decision, an
// approval by actor with comment.
func checkApproved(d *structs.Deployment, actor, comment string) error {
	if len(d.Decisions) != 1 {
		return fmt.Errorf("%d decisions (%+v), want 1", len(d.Decisions), d.Decisions)
	}
	got := d.Decisions[0]
	if got.Kind != structs.DecisionApprove || got.Actor != actor || got.Comment != comment {
		return fmt.Errorf("decision %+v, want an approval by %q with comment %q", got, actor, comment)
	}
	return nil
}

// TestFailover_LeaderKilledDuringPreHook kills the leader while a
// deployment waits for its dispatched pre-hook run. The new leader waits
// for that same run instead of dispatching another, then registers the job
// once; the approval given through a follower survives.
func TestFailover_LeaderKilledDuringPreHook(t *testing.T) {
	f := newFixture(t, map[string]string{
		"jobs/backup.nomad.hcl": testutil.HookJobHCL("backup", testutil.WithRunFor(6*time.Second)),
		"jobs/billing.nomad.hcl": managedJob("billing", structs.PolicyApproval,
			testutil.WithMeta("nops_pre_hooks", "backup")),
	})
	c := f.cluster
	leader := c.Leader()

	d := c.Server(leader).WaitForDeployment(namespace, "billing", deployTimeout, nopstest.InState(structs.StatePendingApproval))
	follower := c.Followers()[0]
	const comment = "the backup runs first"
	var approved structs.Deployment
	c.Server(follower).Do(http.MethodPost, "/v1/deployment/"+d.ID+"/approve", map[string]string{"comment": comment}, &approved, http.StatusOK)
	if err := checkApproved(&approved, "tester", comment); err != nil {
		t.Fatalf("approve through follower %s answered: %v", c.Server(follower).Name, err)
	}

	// Wait for the run to be dispatched, and kill the leader while it runs.
	running := c.Server(leader).WaitForDeployment(namespace, "billing", deployTimeout, func(d *structs.Deployment) error {
		run, ok := d.HookRun(structs.PhasePre, 0)
		if d.State != structs.StatePreHook || !ok || run.DispatchedJobID == "" {
			return fmt.Errorf("no dispatched pre-hook run yet (hook runs %+v)", d.HookRuns)
		}
		return nil
	})
	before, _ := running.HookRun(structs.PhasePre, 0)
	revision := running.Hooks[0].RevisionJobID
	t.Logf("pre-hook run %s of %s dispatched (%s)", before.DispatchedJobID, revision, before.State)
	killed, next := f.killLeader(t, leader)

	done := c.Server(next).WaitForDeployment(namespace, "billing", deployTimeout, nopstest.InState(structs.StateCompleted))
	if done.ID != d.ID {
		t.Fatalf("deployment %s completed, want %s", done.ID, d.ID)
	}
	after, ok := done.HookRun(structs.PhasePre, 0)
	if !ok || len(done.HookRuns) != 1 {
		t.Fatalf("hook runs %+v, want one pre-hook run", done.HookRuns)
	}
	if after.State != structs.HookRunSucceeded || after.DispatchedJobID != before.DispatchedJobID || after.Token != before.Token {
		t.Errorf("pre-hook run after the failover %+v, want the run %s (token %s) succeeded", after, before.DispatchedJobID, before.Token)
	}
	if err := checkApproved(done, "tester", comment); err != nil {
		t.Errorf("after the failover: %v", err)
	}

	// Nomad ran the hook once and registered the job once.
	stubs, _, err := f.nomad.Client.Jobs().List(&nomadapi.QueryOptions{Namespace: namespace, Prefix: "backup-"})
	if err != nil {
		t.Fatal(err)
	}
	var children []string
	for _, s := range stubs {
		if s.ParentID == revision {
			children = append(children, s.ID)
		}
	}
	if len(children) != 1 || children[0] != before.DispatchedJobID {
		t.Errorf("Nomad has dispatched children %v of %s, want exactly [%s]", children, revision, before.DispatchedJobID)
	}
	f.checkRegisteredOnce(t, done)
	checkForwardOnly(t, c.Server(next), d.ID)

	f.restartAndRejoin(t, killed)
	f.waitEverywhere(t, d.ID, func(d *structs.Deployment) error {
		if err := nopstest.InState(structs.StateCompleted)(d); err != nil {
			return err
		}
		return checkApproved(d, "tester", comment)
	})
}

// TestFailover_LeaderKilledAfterRegister kills the leader just after the
// register of a job went through, while its allocation is still starting.
// The new leader carries on waiting for health and does not register again.
// The servers talk over mutual TLS (tls { rpc = true,
// verify_server_hostname = true }), as every process cluster does.
func TestFailover_LeaderKilledAfterRegister(t *testing.T) { testLeaderKilledAfterRegister(t) }

// TestFailover_LeaderKilledAfterRegisterInsecureRPC is
// TestFailover_LeaderKilledAfterRegister with a plain RPC port
// (insecure_rpc).
func TestFailover_LeaderKilledAfterRegisterInsecureRPC(t *testing.T) {
	testLeaderKilledAfterRegister(t, "-insecure-rpc")
}

func testLeaderKilledAfterRegister(t *testing.T, extraArgs ...string) {
	f := newFixture(t, map[string]string{
		"jobs/web.nomad.hcl": managedJob("web", structs.PolicyAuto,
			testutil.WithUpdate(5*time.Second, 30*time.Second, time.Minute)),
	}, extraArgs...)
	c := f.cluster
	leader := c.Leader()

	registered := c.Server(leader).WaitForDeployment(namespace, "web", deployTimeout, func(d *structs.Deployment) error {
		if d.State != structs.StateApplying || !d.Registered {
			return fmt.Errorf("not registered yet (register started %v)", d.RegisterStartedAt)
		}
		return nil
	})
	t.Logf("deployment %s registered job version %d (evaluation %s)", registered.ID, registered.JobVersion, registered.NomadEvalID)
	killed, next := f.killLeader(t, leader)

	done := c.Server(next).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StateCompleted))
	if done.ID != registered.ID {
		t.Fatalf("deployment %s completed, want %s", done.ID, registered.ID)
	}
	if done.NomadEvalID != registered.NomadEvalID || !done.RegisterStartedAt.Equal(registered.RegisterStartedAt) {
		t.Errorf("register after the failover: evaluation %s started %v, want evaluation %s started %v",
			done.NomadEvalID, done.RegisterStartedAt, registered.NomadEvalID, registered.RegisterStartedAt)
	}
	f.checkRegisteredOnce(t, done)
	if list := f.nomadDeploymentsOf(t, "web"); len(list) != 1 || list[0].Status != nomadapi.DeploymentStatusSuccessful {
		t.Errorf("Nomad deployments of web: %d, want 1 successful", len(list))
	}
	checkForwardOnly(t, c.Server(next), done.ID)

	f.restartAndRejoin(t, killed)
	f.waitEverywhere(t, done.ID, nopstest.InState(structs.StateCompleted))
}

// TestFailover_LeaderKilledWaitingForHealth kills the leader while the Nomad
// deployment of a registered job runs. The new leader follows the same
// Nomad deployment to its end, with the apply timeout counted from the
// register, not from the failover.
func TestFailover_LeaderKilledWaitingForHealth(t *testing.T) {
	f := newFixture(t, map[string]string{
		"jobs/api.nomad.hcl": managedJob("api", structs.PolicyAuto,
			testutil.WithUpdate(8*time.Second, 30*time.Second, time.Minute)),
	})
	c := f.cluster
	leader := c.Leader()

	waiting := c.Server(leader).WaitForDeployment(namespace, "api", deployTimeout, func(d *structs.Deployment) error {
		if d.State != structs.StateApplying || d.NomadDeploymentID == "" {
			return fmt.Errorf("not waiting on a Nomad deployment yet (registered %t)", d.Registered)
		}
		return nil
	})
	nd, _, err := f.nomad.Client.Deployments().Info(waiting.NomadDeploymentID, &nomadapi.QueryOptions{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	if nd.Status != nomadapi.DeploymentStatusRunning {
		t.Fatalf("Nomad deployment %s is %q before the kill, want running: the test kills too late", nd.ID, nd.Status)
	}
	t.Logf("deployment %s waits for Nomad deployment %s (health deadline %s)", waiting.ID, nd.ID, waiting.HealthDeadline.Format(time.RFC3339Nano))
	killed, next := f.killLeader(t, leader)

	done := c.Server(next).WaitForDeployment(namespace, "api", deployTimeout, nopstest.InState(structs.StateCompleted))
	if done.ID != waiting.ID {
		t.Fatalf("deployment %s completed, want %s", done.ID, waiting.ID)
	}
	if done.NomadDeploymentID != waiting.NomadDeploymentID || done.NomadEvalID != waiting.NomadEvalID {
		t.Errorf("after the failover: Nomad deployment %s evaluation %s, want %s and %s",
			done.NomadDeploymentID, done.NomadEvalID, waiting.NomadDeploymentID, waiting.NomadEvalID)
	}
	if !done.HealthDeadline.Equal(waiting.HealthDeadline) {
		t.Errorf("health deadline moved over the failover: %s, was %s", done.HealthDeadline, waiting.HealthDeadline)
	}
	f.checkRegisteredOnce(t, done)
	if list := f.nomadDeploymentsOf(t, "api"); len(list) != 1 || list[0].ID != nd.ID || list[0].Status != nomadapi.DeploymentStatusSuccessful {
		t.Errorf("Nomad deployments of api: %d, want only %s, successful", len(list), nd.ID)
	}
	checkForwardOnly(t, c.Server(next), done.ID)

	f.restartAndRejoin(t, killed)
	f.waitEverywhere(t, done.ID, nopstest.InState(structs.StateCompleted))
}

// TestFailover_AcknowledgedApprovalsSurvive approves several deployments
// through the servers in random order, kills the leader as soon as the last
// approval is acknowledged, and finds every approval on every server: the
// survivors, and the killed one once it restarts.
func TestFailover_AcknowledgedApprovalsSurvive(t *testing.T) {
	jobs := []string{"app-1", "app-2", "app-3", "app-4"}
	files := map[string]string{}
	for _, id := range jobs {
		files["jobs/"+id+".nomad.hcl"] = managedJob(id, structs.PolicyApproval)
	}
	f := newFixture(t, files)
	c := f.cluster
	leader := c.Leader()

	pending := map[string]*structs.Deployment{}
	for _, id := range jobs {
		pending[id] = c.Server(leader).WaitForDeployment(namespace, id, deployTimeout, nopstest.InState(structs.StatePendingApproval))
	}
	// Every server takes at least one approval, in a random order.
	order := rand.Perm(len(jobs))
	comments := map[string]string{}
	for k, id := range jobs {
		p := c.Server(order[k] % c.Len())
		comments[id] = fmt.Sprintf("%s approved through %s", id, p.Name)
		var out structs.Deployment
		p.Do(http.MethodPost, "/v1/deployment/"+pending[id].ID+"/approve", map[string]string{"comment": comments[id]}, &out, http.StatusOK)
		if err := checkApproved(&out, "tester", comments[id]); err != nil {
			t.Fatalf("approve of %s through %s answered: %v", id, p.Name, err)
		}
	}
	killed, next := f.killLeader(t, leader)

	approvedEverywhere := func() {
		t.Helper()
		for _, id := range jobs {
			f.waitEverywhere(t, pending[id].ID, func(d *structs.Deployment) error {
				if d.State == structs.StatePendingApproval {
					return fmt.Errorf("still pending approval")
				}
				return checkApproved(d, "tester", comments[id])
			})
		}
	}
	approvedEverywhere()

	for _, id := range jobs {
		done := c.Server(next).WaitForDeployment(namespace, id, deployTimeout, nopstest.InState(structs.StateCompleted))
		if done.ID != pending[id].ID {
			t.Errorf("job %s: deployment %s completed, want %s", id, done.ID, pending[id].ID)
		}
		f.checkRegisteredOnce(t, done)
		checkForwardOnly(t, c.Server(next), done.ID)
	}

	f.restartAndRejoin(t, killed)
	approvedEverywhere()
}

// TestFailover_NewLeaderSeesEveryJob kills the leader of a cluster whose one
// job is deployed and in sync, and watches the survivors closely until the
// new leader has run two detection cycles. Every cycle of the new leader
// sees the job in git, and the job is never listed as an orphan: a new
// leader must not take "no snapshot of the repository yet" for "the job was
// removed from git".
func TestFailover_NewLeaderSeesEveryJob(t *testing.T) {
	f := newFixture(t, map[string]string{
		"jobs/web.nomad.hcl": managedJob("web", structs.PolicyAuto),
	})
	c := f.cluster
	leader := c.Leader()
	c.Server(leader).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StateCompleted))
	self, err := c.Server(leader).Self()
	if err != nil {
		t.Fatal(err)
	}

	killed := leader
	start := time.Now()
	c.Kill(killed)
	// Poll fast: what is checked here may last only a few milliseconds.
	var cycles []structs.DetectionCycle
	var orphaned []string
	deadline := start.Add(nopstest.ProcessLeaderTimeout)
	for len(cycles) < 2 && time.Now().Before(deadline) {
		for _, i := range c.Running() {
			p := c.Server(i)
			if cycle, err := p.Cycle(); err == nil && cycle != nil && cycle.Leader != self.NodeID && cycle.FinishedAt.After(start) {
				if n := len(cycles); n == 0 || !cycles[n-1].FinishedAt.Equal(cycle.FinishedAt) {
					cycles = append(cycles, *cycle)
				}
			}
			var orphans []*structs.JobStatus
			if _, _, err := p.Call(http.MethodGet, "/v1/orphans", nil, &orphans); err == nil {
				for _, o := range orphans {
					orphaned = append(orphaned, fmt.Sprintf("%s lists %s as an orphan %s after the kill",
						p.Name, o.Key(), time.Since(start).Round(time.Millisecond)))
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(cycles) == 0 {
		t.Fatalf("no detection cycle of a new leader within %s of the kill", nopstest.ProcessLeaderTimeout)
	}
	for _, cycle := range cycles {
		t.Logf("cycle of %s finished %s after the kill: %d jobs, %d drifted",
			cycle.Leader, cycle.FinishedAt.Sub(start).Round(time.Millisecond), cycle.Jobs, cycle.Drifted)
		if cycle.Jobs != 1 {
			t.Errorf("the new leader %s completed a detection cycle over %d jobs, want 1", cycle.Leader, cycle.Jobs)
		}
	}
	if len(orphaned) > 0 {
		t.Errorf("a job declared in git showed as an orphan during the failover (%d times); first: %s", len(orphaned), orphaned[0])
	}
	f.restartAndRejoin(t, killed)
}
