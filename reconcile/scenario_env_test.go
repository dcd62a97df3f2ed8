package reconcile_test

import (
	"errors"
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

// The integration scenarios run against a real Nomad dev agent, a real git
// repository and a real Nops server (in-process, or the built binary for
// the kill -9 ones). Each starts its own Nomad agent; run them with
// -parallel 2 or 3 on a small machine.
//
// Two worlds serve them: lcEnv for detection and the deployment lifecycle,
// hkEnv for hooks, holds and recovery (its server's data dir outlives the
// server, so that a scenario can restart it). Both embed world; the helpers
// both use are defined once, first.

const (
	// scenarioWait bounds a wait for a deployment state, a job status or
	// Nomad.
	scenarioWait = 90 * time.Second
	// jobsDir is the folder of the watched repository that holds job files.
	jobsDir = "jobs"

	lcWait     = scenarioWait
	lcRepoPath = jobsDir
	hkWait     = scenarioWait
	hkDir      = jobsDir
)

// managed returns the options of a job Nops manages with a policy.
func managed(policy structs.Policy, more ...testutil.JobOption) []testutil.JobOption {
	return append([]testutil.JobOption{testutil.WithManaged(string(policy))}, more...)
}

// managedWeb is the files of a repository that holds one job, "web",
// managed with a policy and more options.
func managedWeb(policy structs.Policy, more ...testutil.JobOption) map[string]string {
	return map[string]string{jobFile("web"): testutil.ServiceJobHCL("web", managed(policy, more...)...)}
}

// hkManaged is managed, under the name of the hook scenarios.
func hkManaged(policy structs.Policy, more ...testutil.JobOption) []testutil.JobOption {
	return managed(policy, more...)
}

// jobFile is the repository path of a job's file.
func jobFile(id string) string { return jobsDir + "/" + id + ".nomad.hcl" }

// startWorld starts a Nomad agent and creates a git repository whose first
// commit holds files (repository path → content).
func startWorld(t *testing.T, files map[string]string) (*testutil.NomadAgent, *testutil.GitRepo) {
	t.Helper()
	nomad, repo := testutil.StartNomad(t), testutil.NewGitRepo(t)
	commitFiles(repo, "initial jobs", files)
	return nomad, repo
}

// serverOptions are the options of a scenario's Nops server: the Nomad
// agent, and the jobs folder of the repository at url.
func serverOptions(nomad *testutil.NomadAgent, url string) []nopstest.Option {
	return []nopstest.Option{nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("main", url, "main", jobsDir)}
}

// commitFiles writes files (repository path → content), removes paths,
// commits, and returns the commit.
func commitFiles(repo *testutil.GitRepo, msg string, files map[string]string, remove ...string) string {
	for p, c := range files {
		repo.WriteFile(p, c)
	}
	for _, p := range remove {
		repo.Remove(p)
	}
	return repo.Commit(msg)
}

// lookupNomadJob returns a job from Nomad, or nil when Nomad has none.
func lookupNomadJob(t *testing.T, nomad *testutil.NomadAgent, id string) *nomadapi.Job {
	t.Helper()
	j, _, err := nomad.Client.Jobs().Info(id, nil)
	if err != nil {
		if strings.Contains(err.Error(), "404") {
			return nil
		}
		t.Fatalf("read job %s from Nomad: %v", id, err)
	}
	return j
}

// matchInOrder returns how many of want events match in order, other
// events coming between them; len(want) means all.
func matchInOrder[W any](events []*structs.Event, want []W, match func(*structs.Event, W) bool) int {
	i := 0
	for _, got := range events {
		if i < len(want) && match(got, want[i]) {
			i++
		}
	}
	return i
}

// world is what the two worlds have alike: a Nomad agent, a git
// repository and a Nops server, and the helpers that read them.
type world struct {
	t     *testing.T
	nomad *testutil.NomadAgent
	repo  *testutil.GitRepo
	s     *nopstest.Server
}

// deployment returns one deployment by ID through the API.
func (w *world) deployment(id string) *structs.Deployment {
	w.t.Helper()
	var d structs.Deployment
	if code, body := w.s.Do("GET", "/v1/deployment/"+id, nil, &d); code != 200 {
		w.t.Fatalf("GET /v1/deployment/%s: %d %s", id, code, body)
	}
	return &d
}

// waitDeployment waits until deployment id is in state. It fails the test
// at once when the deployment ends in another state.
func (w *world) waitDeployment(id string, state structs.DeploymentState) *structs.Deployment {
	w.t.Helper()
	var d *structs.Deployment
	testutil.WaitForResult(w.t, scenarioWait, func() (bool, error) {
		d = w.deployment(id)
		if d.State != state {
			if d.State.Terminal() {
				w.t.Fatalf("deployment %s of %s ended %s (%s), want %s", id, d.JobID, d.State, d.Error, state)
			}
			return false, fmt.Errorf("deployment %s of %s is %s (%s), want %s", id, d.JobID, d.State, d.Error, state)
		}
		return true, nil
	})
	return d
}

// post sends a write and fails the test unless it answers 200.
func (w *world) post(path string, body any) {
	w.t.Helper()
	if code, raw := w.s.Do("POST", path, body, nil); code != 200 {
		w.t.Fatalf("POST %s: %d %s", path, code, raw)
	}
}

// nomadVersions returns the versions Nomad keeps of a job, newest first.
func (w *world) nomadVersions(id string) []*nomadapi.Job {
	w.t.Helper()
	v, _, _, err := w.nomad.Client.Jobs().Versions(id, false, nil)
	if err != nil {
		w.t.Fatalf("read versions of job %s from Nomad: %v", id, err)
	}
	return v
}

// lcEnv is the world of one detection or lifecycle scenario: a Nomad agent,
// a git repository and a Nops server that watches the repository's jobs
// folder.
type lcEnv struct {
	world
}

// lcStart starts Nomad, commits files (path → content) to a new repository
// and starts a Nops server watching it.
func lcStart(t *testing.T, files map[string]string, opts ...nopstest.Option) *lcEnv {
	t.Helper()
	e := lcWorld(t, files)
	e.serve(e.repo.URL(), opts...)
	return e
}

// lcWorld starts Nomad and commits files, but starts no Nops server.
func lcWorld(t *testing.T, files map[string]string) *lcEnv {
	t.Helper()
	e := &lcEnv{world{t: t}}
	e.nomad, e.repo = startWorld(t, files)
	return e
}

// serve starts the Nops server of the world, watching url.
func (e *lcEnv) serve(url string, opts ...nopstest.Option) {
	e.t.Helper()
	e.s = nopstest.Start(e.t, "", append(serverOptions(e.nomad, url), opts...)...)
}

// commit writes files, removes paths, commits, and returns the commit.
func (e *lcEnv) commit(msg string, files map[string]string, remove ...string) string {
	e.t.Helper()
	return commitFiles(e.repo, msg, files, remove...)
}

// repoStatus returns the replicated status of the watched repository.
func (e *lcEnv) repoStatus() *structs.RepoStatus {
	e.t.Helper()
	var list []*structs.RepoStatus
	if code, body := e.s.Do("GET", "/v1/repos", nil, &list); code != 200 {
		e.t.Fatalf("GET /v1/repos: %d %s", code, body)
	}
	for _, r := range list {
		if r.Name == "main" {
			return r
		}
	}
	return nil
}

// waitHead waits until a detection cycle has recorded commit as the head of
// the watched repository.
func (e *lcEnv) waitHead(commit string) {
	e.t.Helper()
	testutil.WaitForResult(e.t, lcWait, func() (bool, error) {
		r := e.repoStatus()
		if r == nil || r.Head != commit {
			return false, fmt.Errorf("repository head is %+v, want %s", r, commit)
		}
		return true, nil
	})
}

// cycle asks for a detection cycle and waits until one that started after
// the request has been recorded. It returns that cycle.
func (e *lcEnv) cycle() *structs.DetectionCycle {
	e.t.Helper()
	asked := time.Now().UTC()
	e.s.Trigger()
	var c *structs.DetectionCycle
	testutil.WaitForResult(e.t, lcWait, func() (bool, error) {
		var err error
		c, err = e.s.State().DetectionCycle()
		if err != nil {
			return false, err
		}
		if c == nil || !c.StartedAt.After(asked) {
			return false, fmt.Errorf("no detection cycle started after %s yet (last: %+v)", asked, c)
		}
		return true, nil
	})
	return c
}

// settle runs two full detection cycles and apply passes, so that whatever
// the current state leads to has happened.
func (e *lcEnv) settle() {
	e.t.Helper()
	e.cycle()
	e.cycle()
}

// nomadJob returns the live job.
func (e *lcEnv) nomadJob(id string) *nomadapi.Job {
	e.t.Helper()
	j := lookupNomadJob(e.t, e.nomad, id)
	if j == nil {
		e.t.Fatalf("Nomad has no job %s", id)
	}
	return j
}

// nomadHasNoJob fails the test if Nomad has the job.
func (e *lcEnv) nomadHasNoJob(id string) {
	e.t.Helper()
	if j := lookupNomadJob(e.t, e.nomad, id); j != nil {
		e.t.Fatalf("Nomad has job %s (version %d), want none", id, *j.Version)
	}
}

// groupCount returns the count of the job's group "app".
func groupCount(j *nomadapi.Job) int {
	for _, tg := range j.TaskGroups {
		if tg.Name != nil && *tg.Name == "app" && tg.Count != nil {
			return *tg.Count
		}
	}
	return -1
}

// deploymentsOf returns the deployments of a job, newest first.
func (e *lcEnv) deploymentsOf(jobID string) []*structs.Deployment {
	e.t.Helper()
	return e.s.Deployments("default", jobID)
}

// wantDeployments fails the test unless the job's deployments, newest
// first, are in the given states.
func (e *lcEnv) wantDeployments(jobID string, states ...structs.DeploymentState) []*structs.Deployment {
	e.t.Helper()
	list := e.deploymentsOf(jobID)
	var got []string
	for _, d := range list {
		got = append(got, fmt.Sprintf("%s(%s)", d.State, d.Error))
	}
	if len(list) != len(states) {
		e.t.Fatalf("job %s has %d deployments %v, want states %v", jobID, len(list), got, states)
	}
	for i, st := range states {
		if list[i].State != st {
			e.t.Fatalf("job %s deployments are %v, want states %v", jobID, got, states)
		}
	}
	return list
}

// ev is an expected event: from and to states, and a part of its message.
type ev struct{ from, to, msg string }

// wantEvents fails the test unless the events of the object contain the
// wanted ones in order (other events may come between them).
func (e *lcEnv) wantEvents(object string, want ...ev) []*structs.Event {
	e.t.Helper()
	events := e.s.Events(object)
	i := matchInOrder(events, want, func(got *structs.Event, w ev) bool {
		return got.From == w.from && got.To == w.to && strings.Contains(got.Message, w.msg)
	})
	if i < len(want) {
		var b strings.Builder
		for _, got := range events {
			fmt.Fprintf(&b, "\n  %q -> %q by %s: %s", got.From, got.To, got.Actor, got.Message)
		}
		e.t.Fatalf("events of %s: missing %+v (and after); got:%s", object, want[i], b.String())
	}
	return events
}

// jobStatus returns the observed status of a job through the API.
func (e *lcEnv) jobStatus(jobID string) *structs.JobStatus {
	e.t.Helper()
	var d struct {
		Status *structs.JobStatus `json:"status"`
	}
	if code, body := e.s.Do("GET", "/v1/job/default/"+jobID, nil, &d); code != 200 {
		e.t.Fatalf("GET /v1/job/default/%s: %d %s", jobID, code, body)
	}
	return d.Status
}

// wantSettledOnce waits until the job is in sync, then checks that quiet
// cycles leave it with one deployment, completed, and one Nomad version.
func (e *lcEnv) wantSettledOnce(jobID string) {
	e.t.Helper()
	e.waitStatus(jobID, func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	e.settle()
	e.wantDeployments(jobID, structs.StateCompleted)
	if v := e.nomadVersions(jobID); len(v) != 1 {
		e.t.Fatalf("Nomad keeps %d versions of %s after quiet cycles, want 1", len(v), jobID)
	}
}

// waitStatus waits until the job's observed status satisfies ok.
func (e *lcEnv) waitStatus(jobID string, ok func(*structs.JobStatus) bool) *structs.JobStatus {
	e.t.Helper()
	return e.s.WaitForJobStatus("default", jobID, lcWait, ok)
}

// waitFor polls cond until it holds, within lcWait; cond says why not.
func (e *lcEnv) waitFor(cond func() (bool, string)) {
	e.t.Helper()
	testutil.WaitForResult(e.t, lcWait, func() (bool, error) {
		ok, why := cond()
		if ok {
			return true, nil
		}
		return false, errors.New(why)
	})
}

// revisionRE is the form of a hook revision job ID.
var revisionRE = regexp.MustCompile(`^[a-z0-9-]+-[0-9a-f]{8}$`)

// hkEnv is the world of one hook, hold or recovery scenario: a Nomad agent,
// a git repository and a Nops server on a data dir that outlives the
// server, so that a scenario can restart it.
type hkEnv struct {
	world
	dir  string
	opts []nopstest.Option
}

// hkWorld starts Nomad and commits files (name in the jobs folder →
// content), but starts no Nops server.
func hkWorld(t *testing.T, files map[string]string) *hkEnv {
	t.Helper()
	e := &hkEnv{world: world{t: t}, dir: t.TempDir()}
	e.nomad, e.repo = startWorld(t, inJobsDir(files))
	return e
}

// inJobsDir returns files (name → content) as repository paths in the jobs
// folder.
func inJobsDir(files map[string]string) map[string]string {
	out := make(map[string]string, len(files))
	for name, content := range files {
		out[hkDir+"/"+name] = content
	}
	return out
}

// hkStart starts Nomad, commits files and starts a Nops server watching the
// repository, with opts.
func hkStart(t *testing.T, files map[string]string, opts ...nopstest.Option) *hkEnv {
	t.Helper()
	e := hkWorld(t, files)
	e.opts = append(serverOptions(e.nomad, e.repo.URL()), opts...)
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

// commit writes files (name in the jobs folder → content), commits, and
// waits until every given managed job's observed status is at the commit,
// which means detection has decided on it.
func (e *hkEnv) commit(msg string, files map[string]string, jobs ...string) string {
	e.t.Helper()
	head := commitFiles(e.repo, msg, inJobsDir(files))
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

// wantEvents checks that a deployment's events contain messages with each
// of the fragments, in order.
func (e *hkEnv) wantEvents(id string, fragments ...string) []*structs.Event {
	e.t.Helper()
	var events []*structs.Event
	if code, body := e.s.Do("GET", "/v1/deployment/"+id+"/events", nil, &events); code != 200 {
		e.t.Fatalf("events of %s: %d %s", id, code, body)
	}
	i := matchInOrder(events, fragments, func(got *structs.Event, fragment string) bool {
		return strings.Contains(got.Message, fragment)
	})
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
	return lookupNomadJob(e.t, e.nomad, id)
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
