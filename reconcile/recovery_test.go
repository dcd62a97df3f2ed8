package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// Recovery after a crash (SPEC section 7): the server restarts on the same
// data dir, in-process or as the built binary killed with SIGKILL, and the
// new leader resumes every unfinished deployment from the replicated state
// without a second register or a second dispatch.

// catch polls a job's newest deployment until ok, and returns it.
func catch(t *testing.T, what string, list func() []*structs.Deployment, ok func(*structs.Deployment) bool) *structs.Deployment {
	t.Helper()
	var found *structs.Deployment
	testutil.WaitForResult(t, hkWait, func() (bool, error) {
		l := list()
		if len(l) == 0 {
			return false, fmt.Errorf("%s: no deployment yet", what)
		}
		found = l[0]
		if found.State.Terminal() {
			t.Fatalf("%s: the deployment ended %s (%s) before it could be caught", what, found.State, found.Error)
		}
		return ok(found), fmt.Errorf("%s: deployment is %s with runs %+v", what, found.State, found.HookRuns)
	})
	return found
}

func preHookRunning(d *structs.Deployment) bool {
	r, ok := d.HookRun(structs.PhasePre, 0)
	return d.State == structs.StatePreHook && ok && r.State == structs.HookRunRunning
}

func appliedNotHealthy(d *structs.Deployment) bool {
	return d.State == structs.StateApplying && d.Registered
}

// slowHookFiles is a job with one pre-hook that runs for 5s.
func slowHookFiles() map[string]string {
	return map[string]string{
		"web.nomad.hcl":    testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"))...),
		"backup.nomad.hcl": testutil.HookJobHCL("backup", testutil.WithRunFor(5*time.Second)),
	}
}

// slowApplyFiles is a job whose Nomad deployment takes 5s to be healthy.
func slowApplyFiles() map[string]string {
	return map[string]string{
		"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto,
			testutil.WithUpdate(5*time.Second, 30*time.Second, time.Minute))...),
	}
}

// TestRecovery_RestartDuringPreHook: a restart while a dispatched pre-hook
// runs waits for that run; Nomad holds exactly one run of the hook.
func TestRecovery_RestartDuringPreHook(t *testing.T) {
	t.Parallel()
	e := hkStart(t, slowHookFiles())
	d := catch(t, "pre-hook running", func() []*structs.Deployment { return e.s.Deployments("default", "web") }, preHookRunning)
	run := hookRun(t, d, structs.PhasePre, 0)
	e.restart()
	d = e.waitDeployment(d.ID, structs.StateCompleted)
	rev := frozen(t, d, structs.PhasePre, 0).RevisionJobID
	if kids := e.children(rev); len(kids) != 1 || kids[0].ID != run.DispatchedJobID {
		t.Fatalf("children of %s: %+v, want only %s", rev, kids, run.DispatchedJobID)
	}
	if r := hookRun(t, d, structs.PhasePre, 0); r.State != structs.HookRunSucceeded || r.DispatchedJobID != run.DispatchedJobID ||
		!r.StartedAt.Equal(run.StartedAt) {
		t.Fatalf("run after the restart: %+v, before: %+v", r, run)
	}
	if v := e.registrations("web"); len(v) != 1 {
		t.Fatalf("web registered %d times", len(v))
	}
}

// TestRecovery_RestartWhileApplying: a restart after the register, while
// Nomad's deployment waits for health, carries on waiting: no second
// register.
func TestRecovery_RestartWhileApplying(t *testing.T) {
	t.Parallel()
	e := hkStart(t, slowApplyFiles())
	d := catch(t, "registered", func() []*structs.Deployment { return e.s.Deployments("default", "web") }, appliedNotHealthy)
	e.restart()
	d = e.waitDeployment(d.ID, structs.StateCompleted)
	if v := e.nomadVersions("web"); len(v) != 1 || *v[0].Version != 0 {
		t.Fatalf("web has %d versions in Nomad, want only version 0", len(v))
	}
	if d.JobVersion != 0 || d.NomadDeploymentID == "" {
		t.Fatalf("deployment: version %d, Nomad deployment %q", d.JobVersion, d.NomadDeploymentID)
	}
}

// TestRecovery_HookTimeoutCountsFromTheRecordedStart: the hook timeout
// counts from the dispatch recorded in the state, not from the restart. The
// clock is the test's: it stands still while the server is up, so only the
// recorded start can make the timeout fire after the restart.
func TestRecovery_HookTimeoutCountsFromTheRecordedStart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, time.March, 4, 10, 0, 0, 0, time.UTC)
	clock := nopstest.NewClock(t0)
	e := hkStart(t, map[string]string{
		"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "slow"))...),
		"slow.nomad.hcl": testutil.HookJobHCL("slow", testutil.WithMeta("nops_hook_timeout", "1m"),
			testutil.WithRunFor(10*time.Minute)),
	}, nopstest.WithClock(clock))
	d := catch(t, "pre-hook running", func() []*structs.Deployment { return e.s.Deployments("default", "web") }, preHookRunning)
	if r := hookRun(t, d, structs.PhasePre, 0); !r.StartedAt.Equal(t0) {
		t.Fatalf("run started at %s, want the clock's %s", r.StartedAt, t0)
	}
	// One second before the deadline: still running.
	e.at(clock, t0.Add(59*time.Second))
	e.cycles(2)
	if got := e.deployment(d.ID); got.State != structs.StatePreHook {
		t.Fatalf("deployment %s before its hook deadline (%s)", got.State, got.Error)
	}
	e.s.Shutdown()
	clock.Set(t0.Add(61 * time.Second))
	e.s = nopstest.Start(t, e.dir, e.opts...)
	d = e.waitDeployment(d.ID, structs.StateFailed)
	r := hookRun(t, d, structs.PhasePre, 0)
	if !strings.Contains(d.Error, "pre hook slow timed out after 1m0s") || !r.FinishedAt.Equal(t0.Add(61*time.Second)) {
		t.Fatalf("error %q, run %+v", d.Error, r)
	}
	e.waitNomad("the timed-out run is stopped", func() bool { return stopped(e.nomadJob(r.DispatchedJobID)) })
}

// seeded is a deployment written straight into the replicated state by a
// server that runs no loops, left where a crash would have left it.
type seeded struct {
	e    *hkEnv
	s    *nopstest.Server
	d    *structs.Deployment
	job  *nomadapi.Job
	hook *nomadapi.Job
}

func (sd *seeded) apply(t structs.MessageType, req any) {
	sd.e.t.Helper()
	if _, err := sd.s.Apply(t, req); err != nil {
		sd.e.t.Fatalf("apply %s: %v", t, err)
	}
}

func seedMeta() structs.WriteMeta { return structs.WriteMeta{Time: time.Now().UTC(), Actor: "nops"} }

// seed starts Nomad and a server without loops on the data dir, and
// creates a deployment of job web (with a pre-hook backup when withHook)
// that has moved to state.
func seed(t *testing.T, state structs.DeploymentState, withHook bool) *seeded {
	t.Helper()
	e := &hkEnv{world: world{t: t, nomad: testutil.StartNomad(t)}, dir: t.TempDir()}
	e.opts = []nopstest.Option{nopstest.WithNomad(e.nomad.Addr)}
	sd := &seeded{e: e, s: nopstest.Start(t, e.dir, nopstest.WithoutReconcilers())}
	sd.job = e.nomad.ParseJob(t, testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto)...))
	spec, err := json.Marshal(sd.job)
	if err != nil {
		t.Fatal(err)
	}
	// The diff seen at detection, which the register checks again.
	client, err := nomadx.New(nomadx.Config{Address: e.nomad.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := client.Plan(context.Background(), sd.job)
	if err != nil {
		t.Fatal(err)
	}
	d := &structs.Deployment{ID: uuid.NewString(), Namespace: "default", JobID: "web", Repository: "main", Commit: "c0ffee",
		File: "jobs/web.nomad.hcl", Policy: structs.PolicyAuto, State: structs.StateDetected, SpecHash: "seeded", Spec: spec,
		Diff: plan.Text, DiffHash: nomadx.DiffHash(plan.Diff), ApplyTimeout: 2 * time.Minute}
	if withHook {
		hash := "0123abcd" + strings.Repeat("0", 56)
		rev := "backup-" + hash[:8]
		sd.hook = e.nomad.ParseJob(t, testutil.HookJobHCL("backup", testutil.WithRunFor(500*time.Millisecond)))
		sd.hook.ID, sd.hook.Name = &rev, &rev
		hookSpec, err := json.Marshal(sd.hook)
		if err != nil {
			t.Fatal(err)
		}
		d.Hooks = []structs.FrozenHook{{Name: "backup", Phase: structs.PhasePre, Position: 0, RevisionJobID: rev, Hash: hash,
			Spec: hookSpec, Timeout: time.Minute, MetaKeys: []string{"nops_deployment", "nops_job", "nops_commit", "nops_phase"}}}
	}
	sd.apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: seedMeta(), Deployment: d})
	sd.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: seedMeta(), ID: d.ID,
		From: structs.StateDetected, To: state, Message: "seeded"})
	sd.d = d
	return sd
}

// recordDispatch records the intent to dispatch the pre-hook, as the leader
// does just before it calls Nomad, and returns the run's token.
func (sd *seeded) recordDispatch() string {
	token := structs.HookRunToken(sd.d.ID, structs.PhasePre, 0)
	sd.apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: seedMeta(), ID: sd.d.ID,
		State: structs.StatePreHook, Update: &structs.DeploymentPatch{HookRun: &structs.HookRun{Hook: "backup",
			Phase: structs.PhasePre, Position: 0, Token: token, State: structs.HookRunDispatching, StartedAt: time.Now().UTC()},
			Message: "pre hook backup: dispatching"}})
	return token
}

// registerRevision registers the hook revision job in Nomad, as the leader
// does before it records a dispatch.
func (sd *seeded) registerRevision() {
	if _, _, err := sd.e.nomad.Client.Jobs().Register(sd.hook, nil); err != nil {
		sd.e.t.Fatalf("register revision: %v", err)
	}
}

// crash stops the server without loops and starts one with them on the
// same data dir.
func (sd *seeded) crash() {
	sd.s.Shutdown()
	sd.e.s = nopstest.Start(sd.e.t, sd.e.dir, sd.e.opts...)
}

// TestRecovery_DispatchRecordedButNeverSent: the leader recorded the intent
// to dispatch a hook and crashed; Nomad has no run with the token. The new
// leader cannot tell whether the dispatch reached Nomad, so it fails the
// hook rather than run it twice.
func TestRecovery_DispatchRecordedButNeverSent(t *testing.T) {
	t.Parallel()
	sd := seed(t, structs.StatePreHook, true)
	sd.registerRevision()
	sd.recordDispatch()
	sd.crash()
	e := sd.e
	d := e.waitDeployment(sd.d.ID, structs.StateFailed)
	if !strings.Contains(d.Error, "Nomad has no run for it") || d.Registered {
		t.Fatalf("deployment: registered %v, error %q", d.Registered, d.Error)
	}
	if r := hookRun(t, d, structs.PhasePre, 0); r.State != structs.HookRunFailed || r.DispatchedJobID != "" {
		t.Fatalf("run: %+v", r)
	}
	if kids := e.children(*sd.hook.ID); len(kids) != 0 {
		t.Fatalf("the hook ran: %+v", kids)
	}
	if j := e.nomadJob("web"); j != nil {
		t.Fatal("web was registered")
	}
}

// TestRecovery_DispatchSentButNotRecorded: the dispatch reached Nomad but
// the leader crashed before it recorded the run; the new leader finds the
// run by its token, waits for it and goes on: one run in Nomad.
func TestRecovery_DispatchSentButNotRecorded(t *testing.T) {
	t.Parallel()
	sd := seed(t, structs.StatePreHook, true)
	sd.registerRevision()
	token := sd.recordDispatch()
	resp, _, err := sd.e.nomad.Client.Jobs().Dispatch(*sd.hook.ID, map[string]string{"nops_deployment": sd.d.ID}, nil, "",
		&nomadapi.WriteOptions{IdempotencyToken: token})
	if err != nil {
		t.Fatal(err)
	}
	sd.crash()
	e := sd.e
	d := e.waitDeployment(sd.d.ID, structs.StateCompleted)
	if r := hookRun(t, d, structs.PhasePre, 0); r.State != structs.HookRunSucceeded || r.DispatchedJobID != resp.DispatchedJobID {
		t.Fatalf("run: %+v, want the run %s", r, resp.DispatchedJobID)
	}
	e.wantEvents(d.ID, "found run "+resp.DispatchedJobID+" after a restart", "pre hook backup succeeded", "registered job version 0")
	if kids := e.children(*sd.hook.ID); len(kids) != 1 {
		t.Fatalf("children: %+v", kids)
	}
}

// TestRecovery_RegisterIntentRecorded: the leader recorded its register
// intent and crashed. If the register never reached Nomad (the job's modify
// index is still the one read at detection) the new leader registers; if it
// went through, it carries on waiting for health. Either way Nomad holds one
// version.
func TestRecovery_RegisterIntentRecorded(t *testing.T) {
	t.Parallel()
	for _, reached := range []bool{false, true} {
		t.Run("reached Nomad "+strconv.FormatBool(reached), func(t *testing.T) {
			sd := seed(t, structs.StateApplying, false)
			now := time.Now().UTC()
			deadline := now.Add(2 * time.Minute)
			sd.apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: seedMeta(), ID: sd.d.ID,
				State: structs.StateApplying, Update: &structs.DeploymentPatch{RegisterStartedAt: &now, HealthDeadline: &deadline,
					Message: "registering with check-and-set on modify index 0"}})
			if reached {
				if _, _, err := sd.e.nomad.Client.Jobs().EnforceRegister(sd.job, 0, nil); err != nil {
					t.Fatal(err)
				}
			}
			sd.crash()
			e := sd.e
			d := e.waitDeployment(sd.d.ID, structs.StateCompleted)
			if v := e.nomadVersions("web"); len(v) != 1 || *v[0].Version != 0 || !d.Registered {
				t.Fatalf("web has %d versions in Nomad; registered %v", len(v), d.Registered)
			}
			if reached {
				e.wantEvents(d.ID, "the register went through before the restart", "healthy")
			} else {
				e.wantEvents(d.ID, "registered job version 0", "healthy")
			}
		})
	}
}

// nopsProc is the built nops binary serving on fixed ports, so that it can
// be killed and started again at the same address.
type nopsProc struct {
	t    *testing.T
	bin  string
	args []string
	url  string
	log  string
	cmd  *exec.Cmd
}

func startNopsProc(t *testing.T, e *hkEnv) *nopsProc {
	t.Helper()
	bin := testutil.NopsBinary(t)
	ports := testutil.FreePorts(t, 3)
	p := &nopsProc{t: t, bin: bin, url: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), log: e.dir + ".log"}
	p.args = []string{"serve", "-data-dir", e.dir, "-node", "kill9", "-bootstrap-expect", "1",
		"-bind", "127.0.0.1", "-advertise", "127.0.0.1",
		"-http-port", strconv.Itoa(ports[0]), "-rpc-port", strconv.Itoa(ports[1]), "-serf-port", strconv.Itoa(ports[2]),
		"-nomad-addr", e.nomad.Addr, "-repo", e.repo.URL() + "#main:" + hkDir,
		"-engine-interval", "200ms", "-drift-interval", "2s", "-log-level", "debug",
		"-encrypt", nopstest.GossipKey, "-config", nopstest.NewTLS(t, "").RPCConfigFile(t)}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			raw, _ := os.ReadFile(p.log)
			lines := strings.Split(string(raw), "\n")
			if len(lines) > 80 {
				lines = lines[len(lines)-80:]
			}
			t.Logf("nops log (tail):\n%s", strings.Join(lines, "\n"))
		}
	})
	p.start()
	return p
}

func (p *nopsProc) start() {
	p.t.Helper()
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer out.Close()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.bin, err)
	}
	testutil.WaitForResult(p.t, 30*time.Second, func() (bool, error) {
		var self struct {
			IsLeader bool `json:"is_leader"`
			LoopsOn  bool `json:"leader_loops_running"`
		}
		if code, err := p.get("/v1/agent/self", &self); err != nil || code != 200 {
			return false, fmt.Errorf("agent self: %d %v", code, err)
		}
		return self.IsLeader && self.LoopsOn, fmt.Errorf("not leading yet: %+v", self)
	})
}

// kill sends SIGKILL and reaps the process.
func (p *nopsProc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

func (p *nopsProc) get(path string, out any) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.url+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode == 200 && out != nil {
		return resp.StatusCode, json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

func (p *nopsProc) deployments() []*structs.Deployment {
	var out []*structs.Deployment
	if code, err := p.get("/v1/deployments?namespace=default&job=web", &out); err != nil || code != 200 {
		p.t.Fatalf("list deployments: %d %v", code, err)
	}
	return out
}

func (p *nopsProc) waitDeployment(id string, state structs.DeploymentState) *structs.Deployment {
	p.t.Helper()
	var d structs.Deployment
	testutil.WaitForResult(p.t, hkWait, func() (bool, error) {
		if code, err := p.get("/v1/deployment/"+id, &d); err != nil || code != 200 {
			return false, fmt.Errorf("get deployment: %d %v", code, err)
		}
		if d.State.Terminal() && d.State != state {
			p.t.Fatalf("deployment ended %s (%s), want %s", d.State, d.Error, state)
		}
		return d.State == state, fmt.Errorf("deployment is %s, want %s", d.State, state)
	})
	return &d
}

// TestRecovery_Kill9 kills the built binary with SIGKILL while a pre-hook
// runs, and while Nomad's deployment waits for health, and starts it again
// on the same data dir: the deployment completes with one run of the hook
// and one register.
func TestRecovery_Kill9(t *testing.T) {
	t.Parallel()
	t.Run("in pre_hook after the dispatch", func(t *testing.T) {
		e := hkWorld(t, slowHookFiles())
		p := startNopsProc(t, e)
		d := catch(t, "pre-hook running", p.deployments, preHookRunning)
		run := hookRun(t, d, structs.PhasePre, 0)
		p.kill()
		p.start()
		d = p.waitDeployment(d.ID, structs.StateCompleted)
		rev := frozen(t, d, structs.PhasePre, 0).RevisionJobID
		if kids := e.children(rev); len(kids) != 1 || kids[0].ID != run.DispatchedJobID {
			t.Fatalf("children of %s: %+v, want only %s", rev, kids, run.DispatchedJobID)
		}
		if v := e.registrations("web"); len(v) != 1 {
			t.Fatalf("web registered %d times", len(v))
		}
	})
	t.Run("in applying after the register", func(t *testing.T) {
		e := hkWorld(t, slowApplyFiles())
		p := startNopsProc(t, e)
		d := catch(t, "registered", p.deployments, appliedNotHealthy)
		p.kill()
		p.start()
		d = p.waitDeployment(d.ID, structs.StateCompleted)
		if v := e.nomadVersions("web"); len(v) != 1 || *v[0].Version != 0 || d.JobVersion != 0 {
			t.Fatalf("web has %d versions in Nomad, want only version 0", len(v))
		}
	})
}
