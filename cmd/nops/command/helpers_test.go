package command

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// syncBuffer is the buffer of the commands' output and of the recorded
// calls, safe for concurrent writers and readers.
type syncBuffer = testutil.SyncBuffer

// cli runs nops commands in-process with a controlled environment.
type cli struct {
	t   *testing.T
	env map[string]string
}

// result is the outcome of one command.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

// apiServer is a server the CLI talks to: an *agent.Server or a
// *nopstest.Server.
type apiServer interface{ HTTPAddr() string }

// newCLI returns a cli whose address is that of s, when s is not nil.
func newCLI(t *testing.T, s apiServer) *cli {
	env := map[string]string{}
	if s != nil {
		env[EnvAddress] = "http://" + s.HTTPAddr()
	}
	return &cli{t: t, env: env}
}

func (c *cli) meta(stdout, stderr *syncBuffer) *runner {
	return &runner{
		stdout: stdout, stderr: stderr, now: time.Now,
		lookupEnv: func(k string) (string, bool) { v, ok := c.env[k]; return v, ok },
	}
}

func (c *cli) run(args ...string) result {
	return c.runCtx(context.Background(), args...)
}

func (c *cli) runCtx(ctx context.Context, args ...string) result {
	var stdout, stderr syncBuffer
	code := c.meta(&stdout, &stderr).run(ctx, args)
	return result{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// ok runs a command that must succeed and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("nops %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs a command that must exit with code and returns its stderr.
func (c *cli) fails(code int, args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code {
		c.t.Fatalf("nops %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r.stderr
}

// okJSON runs a command with -json and decodes its stdout into out.
func (c *cli) okJSON(out any, args ...string) {
	c.t.Helper()
	stdout := c.ok(append(args, "-json")...)
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		c.t.Fatalf("nops %s -json: %v\n%s", strings.Join(args, " "), err, stdout)
	}
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

var observedAt = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeReconciler answers the reconcilers' routes with fixed values: three
// jobs (web paused and blocked after a failed deployment), one repository
// with a parse error, one orphan and one detection cycle.
func fakeReconciler() *nopstest.FakeReconciler {
	jobs := []*structs.JobStatus{
		{Namespace: "default", JobID: "web", Sync: structs.SyncInSync, Policy: structs.PolicyAuto, Repository: "ops",
			File: "jobs/web.nomad.hcl", Commit: strings.Repeat("c", 40), ObservedAt: observedAt,
			WaitingFor: "waiting for default/db: not in sync"},
		{Namespace: "default", JobID: "api", Sync: structs.SyncDrift, DriftSummary: "count 2 -> 3", ObservedAt: observedAt},
		{Namespace: "default", JobID: "db", Sync: structs.SyncDrift, ObservedAt: observedAt},
	}
	const failed = "5e1f0c2a-0000-4000-8000-000000000001"
	f := &nopstest.FakeReconciler{
		Details: map[string]*structs.JobDetail{"default/web": {
			Status: jobs[0],
			LastDeployment: &structs.Deployment{ID: failed, Namespace: "default", JobID: "web",
				State: structs.StateFailed, Error: "allocation failed", CreatedAt: observedAt},
			Block: &structs.Block{Namespace: "default", JobID: "web", DeploymentID: failed, AfterRegister: true},
			Pause: &structs.Pause{Key: "default/web", Namespace: "default", JobID: "web", Actor: "ann@ops", Reason: "db upgrade", CreatedAt: observedAt},
		}},
		RepoList: []*structs.RepoStatus{{Name: "ops", URL: "https://git.example/ops.git", Branch: "main", Path: "jobs",
			Head: strings.Repeat("c", 40), Files: 4, LastFetch: observedAt, ParseErrors: []string{"jobs/bad.nomad.hcl:3: Unsupported argument"}}},
		OrphanList: []*structs.JobStatus{{Namespace: "default", JobID: "legacy", Orphan: true, Repository: "ops",
			File: "jobs/legacy.nomad.hcl", ObservedAt: observedAt}},
		LastCycle: &structs.DetectionCycle{Leader: "n1", StartedAt: observedAt, FinishedAt: observedAt.Add(time.Second),
			Jobs: 3, Drifted: 2, Created: 1},
	}
	for _, j := range jobs {
		f.JobList = append(f.JobList, &structs.JobSummary{JobStatus: j})
	}
	return f
}

// startServe starts `nops serve -dev` (the built binary) as node, with a
// Nomad address where nothing listens, the log in dir/nops.log and args
// after the other flags, on a free HTTP port; it returns the process and
// the port. The process stops when the test ends.
func startServe(t *testing.T, dir, node string, args ...string) (*testutil.Process, int) {
	t.Helper()
	port := testutil.FreePorts(t, 1)[0]
	p, err := testutil.StartProcess(testutil.ProcessConfig{
		Name: "nops serve", Bin: testutil.NopsBinary(t), LogPath: filepath.Join(dir, "nops.log"),
		Args: append([]string{"serve", "-dev", "-node", node, "-http-port", strconv.Itoa(port), "-rpc-port", "0", "-serf-port", "0",
			"-nomad-addr", testutil.ClosedAddress(t)}, args...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, port
}
