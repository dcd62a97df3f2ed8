package reconcile_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// The scenarios of hooks, holds and recovery run against a real Nomad dev
// agent, a real git repository and a real Nops server (in-process, or the
// built binary for the kill -9 ones). Each starts its own Nomad agent; run
// them with -parallel 2 on a small machine.

const (
	// hkWait bounds a wait for a deployment state, a job status or Nomad.
	hkWait = 90 * time.Second
	// hkDir is the folder of the watched repository that holds job files.
	hkDir = "jobs"
)

// revisionRE is the form of a hook revision job ID.
var revisionRE = regexp.MustCompile(`^[a-z0-9-]+-[0-9a-f]{8}$`)

// hkEnv is the world of one scenario: a Nomad agent, a git repository and a
// Nops server on a data dir that outlives the server, so that a scenario can
// restart it.
type hkEnv struct {
	t     *testing.T
	nomad *testutil.NomadAgent
	repo  *testutil.GitRepo
	dir   string
	opts  []nopstest.Option
	s     *nopstest.Server
}

// hkWorld starts Nomad and commits files (name in the jobs folder →
// content), but starts no Nops server.
func hkWorld(t *testing.T, files map[string]string) *hkEnv {
	t.Helper()
	e := &hkEnv{t: t, nomad: testutil.StartNomad(t), repo: testutil.NewGitRepo(t), dir: t.TempDir()}
	for name, content := range files {
		e.repo.WriteFile(hkDir+"/"+name, content)
	}
	e.repo.Commit("initial jobs")
	return e
}

// hkStart starts Nomad, commits files and starts a Nops server watching the
// repository, with opts.
func hkStart(t *testing.T, files map[string]string, opts ...nopstest.Option) *hkEnv {
	t.Helper()
	e := hkWorld(t, files)
	e.opts = append([]nopstest.Option{nopstest.WithNomad(e.nomad.Addr), nopstest.WithRepo("main", e.repo.URL(), "main", hkDir)}, opts...)
	e.s = nopstest.Start(t, e.dir, e.opts...)
	return e
}

// restart shuts the server down and starts a new one on the same data dir,
// with the same options.
func (e *hkEnv) restart() {
	e.t.Helper()
	e.s.Shutdown()
	e.s = nopstest.Start(e.t, e.dir, e.opts...)
}

// hkManaged returns the options of a managed job with a policy.
func hkManaged(policy structs.Policy, more ...testutil.JobOption) []testutil.JobOption {
	return append([]testutil.JobOption{testutil.WithMeta("nops_managed", "true"), testutil.WithMeta("nops_policy", string(policy))}, more...)
}

// commit writes files (and removes names) in the jobs folder, commits, and
// waits until every given managed job's observed status is at the commit,
// which means detection has decided on it.
func (e *hkEnv) commit(msg string, files map[string]string, jobs ...string) string {
	e.t.Helper()
	for name, content := range files {
		e.repo.WriteFile(hkDir+"/"+name, content)
	}
	head := e.repo.Commit(msg)
	for _, job := range jobs {
		e.s.WaitForJobStatus("default", job, hkWait, func(st *structs.JobStatus) bool { return st.Commit == head })
	}
	return head
}

// cycles waits until n more detection cycles have completed.
func (e *hkEnv) cycles(n int) {
	e.t.Helper()
	start := e.cycleIndex()
	seen := 0
	last := start
	testutil.WaitForResult(e.t, hkWait, func() (bool, error) {
		if i := e.cycleIndex(); i > last {
			last = i
			seen++
		}
		e.s.Trigger()
		return seen >= n, fmt.Errorf("%d of %d detection cycles after index %d", seen, n, start)
	})
}

func (e *hkEnv) cycleIndex() uint64 {
	c, err := e.s.State().DetectionCycle()
	if err != nil {
		e.t.Fatal(err)
	}
	if c == nil {
		return 0
	}
	return c.Index
}

// deployment reads one deployment through the API.
func (e *hkEnv) deployment(id string) *structs.Deployment {
	e.t.Helper()
	var d structs.Deployment
	if code, body := e.s.Do("GET", "/v1/deployment/"+id, nil, &d); code != 200 {
		e.t.Fatalf("GET deployment %s: %d %s", id, code, body)
	}
	return &d
}

// waitDeployment waits until a deployment is in state.
func (e *hkEnv) waitDeployment(id string, state structs.DeploymentState) *structs.Deployment {
	e.t.Helper()
	var d *structs.Deployment
	testutil.WaitForResult(e.t, hkWait, func() (bool, error) {
		d = e.deployment(id)
		if d.State != state {
			if d.State.Terminal() {
				e.t.Fatalf("deployment %s of %s ended %s (%s), want %s", id, d.JobID, d.State, d.Error, state)
			}
			return false, fmt.Errorf("deployment %s of %s is %s, want %s", id, d.JobID, d.State, state)
		}
		return true, nil
	})
	return d
}

// waitNew waits for a deployment of job that is not one of the known IDs
// and returns it.
func (e *hkEnv) waitNew(job string, known ...*structs.Deployment) *structs.Deployment {
	e.t.Helper()
	var found *structs.Deployment
	testutil.WaitForResult(e.t, hkWait, func() (bool, error) {
		list := e.s.Deployments("default", job)
		if len(list) == 0 {
			return false, fmt.Errorf("job %s has no deployment", job)
		}
		for _, k := range known {
			if k != nil && list[0].ID == k.ID {
				return false, fmt.Errorf("job %s has no deployment newer than %s", job, k.ID)
			}
		}
		found = list[0]
		return true, nil
	})
	return found
}

// count returns how many deployments a job has.
func (e *hkEnv) count(job string) int {
	e.t.Helper()
	return len(e.s.Deployments("default", job))
}

// status returns the observed status of a job.
func (e *hkEnv) status(job string) *structs.JobStatus {
	e.t.Helper()
	st := e.s.JobStatus("default", job)
	if st == nil {
		e.t.Fatalf("job %s has no status", job)
	}
	return st
}

// post sends a write and wants 200.
func (e *hkEnv) post(path string, body any) {
	e.t.Helper()
	if code, raw := e.s.Do("POST", path, body, nil); code != 200 {
		e.t.Fatalf("POST %s: %d %s", path, code, raw)
	}
}

// wantEvents checks that a deployment's events contain messages with each
// of the fragments, in order.
func (e *hkEnv) wantEvents(id string, fragments ...string) []*structs.Event {
	e.t.Helper()
	var events []*structs.Event
	if code, body := e.s.Do("GET", "/v1/deployment/"+id+"/events", nil, &events); code != 200 {
		e.t.Fatalf("events of %s: %d %s", id, code, body)
	}
	i := 0
	for _, ev := range events {
		if i < len(fragments) && strings.Contains(ev.Message, fragments[i]) {
			i++
		}
	}
	if i < len(fragments) {
		var msgs []string
		for _, ev := range events {
			msgs = append(msgs, fmt.Sprintf("%s->%s: %s", ev.From, ev.To, ev.Message))
		}
		e.t.Fatalf("events of %s lack %q (in order from %q):\n%s", id, fragments[i], fragments, strings.Join(msgs, "\n"))
	}
	return events
}

// nomadJob returns a job from Nomad, or nil.
func (e *hkEnv) nomadJob(id string) *nomadapi.Job {
	e.t.Helper()
	j, _, err := e.nomad.Client.Jobs().Info(id, nil)
	if err != nil {
		if strings.Contains(err.Error(), "404") {
			return nil
		}
		e.t.Fatalf("nomad job %s: %v", id, err)
	}
	return j
}

// nomadVersions returns the versions Nomad holds of a job.
func (e *hkEnv) nomadVersions(id string) []*nomadapi.Job {
	e.t.Helper()
	versions, _, _, err := e.nomad.Client.Jobs().Versions(id, false, nil)
	if err != nil {
		e.t.Fatalf("nomad versions of %s: %v", id, err)
	}
	return versions
}

// registrations returns the versions Nomad holds of a job that were
// registers: a stop is a version of its own.
func (e *hkEnv) registrations(id string) []*nomadapi.Job {
	e.t.Helper()
	var out []*nomadapi.Job
	for _, v := range e.nomadVersions(id) {
		if !stopped(v) {
			out = append(out, v)
		}
	}
	return out
}

// children returns the dispatched children of a hook revision job in Nomad,
// oldest first.
func (e *hkEnv) children(revision string) []*nomadapi.JobListStub {
	e.t.Helper()
	stubs, _, err := e.nomad.Client.Jobs().PrefixList(revision + "/")
	if err != nil {
		e.t.Fatalf("nomad children of %s: %v", revision, err)
	}
	var out []*nomadapi.JobListStub
	for _, s := range stubs {
		if s.ParentID == revision {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex < out[j].CreateIndex })
	return out
}

// waitNomad polls Nomad until ok.
func (e *hkEnv) waitNomad(what string, ok func() bool) {
	e.t.Helper()
	testutil.WaitForResult(e.t, hkWait, func() (bool, error) {
		return ok(), fmt.Errorf("nomad: %s", what)
	})
}

// stopped reports whether Nomad holds a job as stopped.
func stopped(j *nomadapi.Job) bool { return j != nil && j.Stop != nil && *j.Stop }

// hookRun returns a deployment's run of a phase and position.
func hookRun(t *testing.T, d *structs.Deployment, phase structs.HookPhase, pos int) structs.HookRun {
	t.Helper()
	r, ok := d.HookRun(phase, pos)
	if !ok {
		t.Fatalf("deployment %s has no %s hook run at %d: %+v", d.ID, phase, pos, d.HookRuns)
	}
	return r
}

// frozen returns a deployment's frozen hook of a phase and position.
func frozen(t *testing.T, d *structs.Deployment, phase structs.HookPhase, pos int) structs.FrozenHook {
	t.Helper()
	for _, h := range d.Hooks {
		if h.Phase == phase && h.Position == pos {
			if !revisionRE.MatchString(h.RevisionJobID) || !strings.HasPrefix(h.RevisionJobID, h.Name+"-") ||
				!strings.HasPrefix(h.Hash, strings.TrimPrefix(h.RevisionJobID, h.Name+"-")) {
				t.Fatalf("hook %s: revision job %q is not <hook>-<first 8 hex of %s>", h.Name, h.RevisionJobID, h.Hash)
			}
			return h
		}
	}
	t.Fatalf("deployment %s has no %s hook at %d: %+v", d.ID, phase, pos, d.Hooks)
	return structs.FrozenHook{}
}
