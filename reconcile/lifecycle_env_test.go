package reconcile_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// The integration scenarios of detection and the deployment lifecycle run
// against a real Nomad dev agent, a real git repository and a real Nops
// server. Each starts its own Nomad agent; run them with -parallel 3 or
// less on a small machine.

const (
	// lcWait bounds a wait for a deployment state or a job status.
	lcWait = 90 * time.Second
	// lcRepoPath is the folder of the watched repository that holds the
	// job files.
	lcRepoPath = "jobs"
)

// lcEnv is the world of one scenario: a Nomad agent, a git repository and a
// Nops server that watches the repository's jobs folder.
type lcEnv struct {
	t     *testing.T
	nomad *testutil.NomadAgent
	repo  *testutil.GitRepo
	s     *nopstest.Server
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
	e := &lcEnv{t: t, nomad: testutil.StartNomad(t), repo: testutil.NewGitRepo(t)}
	for p, c := range files {
		e.repo.WriteFile(p, c)
	}
	e.repo.Commit("initial jobs")
	return e
}

// serve starts the Nops server of the world, watching url.
func (e *lcEnv) serve(url string, opts ...nopstest.Option) {
	e.t.Helper()
	base := []nopstest.Option{nopstest.WithNomad(e.nomad.Addr), nopstest.WithRepo("main", url, "main", lcRepoPath)}
	e.s = nopstest.Start(e.t, "", append(base, opts...)...)
}

// managed returns the options of a job Nops manages with a policy.
func managed(policy structs.Policy, more ...testutil.JobOption) []testutil.JobOption {
	return append([]testutil.JobOption{testutil.WithMeta("nops_managed", "true"),
		testutil.WithMeta("nops_policy", string(policy))}, more...)
}

// jobFile is the repository path of a job's file.
func jobFile(id string) string { return lcRepoPath + "/" + id + ".nomad.hcl" }

// commit writes files, removes paths, commits, and returns the commit.
func (e *lcEnv) commit(msg string, files map[string]string, remove ...string) string {
	e.t.Helper()
	for p, c := range files {
		e.repo.WriteFile(p, c)
	}
	for _, p := range remove {
		e.repo.Remove(p)
	}
	return e.repo.Commit(msg)
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

// deployment returns one deployment by ID through the API.
func (e *lcEnv) deployment(id string) *structs.Deployment {
	e.t.Helper()
	var d structs.Deployment
	if code, body := e.s.Do("GET", "/v1/deployment/"+id, nil, &d); code != 200 {
		e.t.Fatalf("GET /v1/deployment/%s: %d %s", id, code, body)
	}
	return &d
}

// waitDeploymentState waits until deployment id is in state.
func (e *lcEnv) waitDeploymentState(id string, state structs.DeploymentState) *structs.Deployment {
	e.t.Helper()
	var d *structs.Deployment
	testutil.WaitForResult(e.t, lcWait, func() (bool, error) {
		d = e.deployment(id)
		if d.State != state {
			return false, fmt.Errorf("deployment %s is %s (%s), want %s", id, d.State, d.Error, state)
		}
		return true, nil
	})
	return d
}

// post sends a write and fails the test unless it answers 200.
func (e *lcEnv) post(path string, body any) {
	e.t.Helper()
	if code, raw := e.s.Do("POST", path, body, nil); code != 200 {
		e.t.Fatalf("POST %s: %d %s", path, code, raw)
	}
}

// nomadJob returns the live job.
func (e *lcEnv) nomadJob(id string) *nomadapi.Job {
	e.t.Helper()
	j, _, err := e.nomad.Client.Jobs().Info(id, nil)
	if err != nil {
		e.t.Fatalf("read job %s from Nomad: %v", id, err)
	}
	return j
}

// nomadVersions returns the versions Nomad keeps of a job, newest first.
func (e *lcEnv) nomadVersions(id string) []*nomadapi.Job {
	e.t.Helper()
	v, _, _, err := e.nomad.Client.Jobs().Versions(id, false, nil)
	if err != nil {
		e.t.Fatalf("read versions of job %s from Nomad: %v", id, err)
	}
	return v
}

// nomadHasNoJob fails the test if Nomad has the job.
func (e *lcEnv) nomadHasNoJob(id string) {
	e.t.Helper()
	j, _, err := e.nomad.Client.Jobs().Info(id, nil)
	if err == nil {
		e.t.Fatalf("Nomad has job %s (version %d), want none", id, *j.Version)
	}
	if !strings.Contains(err.Error(), "404") {
		e.t.Fatalf("read job %s from Nomad: %v", id, err)
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
	i := 0
	for _, got := range events {
		if i < len(want) && got.From == want[i].from && got.To == want[i].to && strings.Contains(got.Message, want[i].msg) {
			i++
		}
	}
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
