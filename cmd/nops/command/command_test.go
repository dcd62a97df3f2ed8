package command

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// Help goes to stdout with 0; usage errors go to stderr with 2, before any
// server is contacted.
func TestHelpAndUsageErrors(t *testing.T) {
	c := newCLI(t, nil)
	c.env[EnvAddress] = testutil.ClosedAddress(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: nil, stdout: "Usage: nops <command>"},
		{args: []string{"-h"}, stdout: "Usage: nops <command>"},
		{args: []string{"--help"}, stdout: "Usage: nops <command>"},
		{args: []string{"help"}, stdout: "operator"},
		{args: []string{"help", "deployment", "list"}, stdout: "Usage: nops deployment list"},
		{args: []string{"deployment", "list", "-h"}, stdout: "-state=<state>"},
		{args: []string{"deployment"}, stdout: "approve"},
		{args: []string{"operator", "raft"}, stdout: "transfer-leadership"},
		{args: []string{"serve", "-h"}, stdout: "Usage: nops serve"},
		// Every block a config file takes is listed (agent/config checks every attribute).
		{args: []string{"serve", "-h"}, stdout: "retention { spec_after"},
		{args: []string{"serve", "-h"}, stdout: "autopilot { cleanup_dead_servers"},
		{args: []string{"serve", "-h"}, stdout: "approval { forbid_self, ttl }"},
		{args: []string{"window", "apply", "--help"}, stdout: "window \"nightly-freeze\""},
		{args: []string{"bogus"}, code: 2, stderr: `unknown command "bogus"`},
		{args: []string{"help", "bogus"}, code: 2, stderr: `unknown command "bogus"`},
		{args: []string{"deployment", "bogus"}, code: 2, stderr: `unknown subcommand "bogus"`},
		{args: []string{"status", "-bogus"}, code: 2, stderr: "flag provided but not defined: -bogus"},
		{args: []string{"status", "extra"}, code: 2, stderr: "takes no arguments"},
		{args: []string{"deployment", "status"}, code: 2, stderr: "missing argument: a deployment ID"},
		{args: []string{"window", "delete", "a", "b"}, code: 2, stderr: "too many arguments"},
		{args: []string{"window", "apply"}, code: 2, stderr: "-f is required"},
		{args: []string{"pause"}, code: 2, stderr: "-reason is required"},
		{args: []string{"job", "pause", "web"}, code: 2, stderr: "-reason is required"},
		{args: []string{"operator", "raft", "remove-peer"}, code: 2, stderr: "-peer-id is required"},
		{args: []string{"deployment", "list", "-state", "sleeping"}, code: 2, stderr: `"sleeping" is not a deployment state`},
		{args: []string{"events", "-since", "yesterday"}, code: 2, stderr: `-since: "yesterday"`},
		{args: []string{"deployment", "list", "-limit", "x"}, code: 2, stderr: "invalid value"},
		{args: []string{"serve", "-bogus"}, code: 2, stderr: "-bogus"},
		{args: []string{"-json"}, code: 2, stderr: "must be followed by a command"},
		{args: []string{"validate"}, code: 2, stderr: "missing argument: a directory"},
		{args: []string{"preview", "-h"}, stdout: "-ref=<ref>"},
		// 2 is what nops preview answers when something would change.
		{args: []string{"preview", "-repository", "main"}, code: 1, stderr: "-repository and -ref are required"},
		{args: []string{"preview", "-bogus"}, code: 1, stderr: "flag provided but not defined: -bogus"},
	} {
		r := c.run(tc.args...)
		name := "nops " + strings.Join(tc.args, " ")
		if r.code != tc.code {
			t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", name, r.code, tc.code, r.stdout, r.stderr)
			continue
		}
		if tc.code == 0 {
			mustContain(t, name+" stdout", r.stdout, tc.stdout)
			if r.stderr != "" {
				t.Errorf("%s: stderr %q, want none", name, r.stderr)
			}
			continue
		}
		mustContain(t, name+" stderr", r.stderr, tc.stderr, "Usage: nops")
		if r.stdout != "" {
			t.Errorf("%s: stdout %q, want none", name, r.stdout)
		}
	}
}

func TestVersion_PrintsBuildVersionAsTextAndJSON(t *testing.T) {
	c := newCLI(t, nil)
	mustContain(t, "version", c.ok("version"), "Nops v"+agent.Version)
	var v map[string]string
	c.okJSON(&v, "version")
	if b := agent.Build(); v["version"] != agent.Version || v["commit"] != b.Commit || v["build_date"] != b.BuildDate || v["go"] != b.Go {
		t.Errorf("version -json: %v, want %+v", v, b)
	}
	mustContain(t, "-version", c.ok("-version"), agent.Version)
}

func TestUnreachableServer(t *testing.T) {
	addr := testutil.ClosedAddress(t)
	c := newCLI(t, nil)
	stderr := c.fails(1, "status", "-address", addr)
	mustContain(t, "stderr", stderr, "cannot reach the Nops server at "+addr, "connection refused", "NOPS_ADDR")

	// The environment names the address too, and the flag wins over it.
	c.env[EnvAddress] = addr
	mustContain(t, "stderr", c.fails(1, "deployment", "list"), addr)
	mustContain(t, "stderr", c.fails(1, "pause", "-reason", "x", "-address", "http://127.0.0.1:1"), "http://127.0.0.1:1")
}

func TestCLI_ClusterStatus(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)
	self := s.Config().NodeName

	out := c.ok("status")
	mustContain(t, "status", out, "Leader", s.RPCAddr()+" ("+self+")", self+" (leader)", "dev mode", "1 (1 voter)",
		"Jobs", "unavailable", "Deployments", "= 0")

	var st statusOutput
	c.okJSON(&st, "status")
	if st.Server == nil || st.Server.NodeID != s.NodeID() || len(st.Raft.Servers) != 1 || len(st.Unavailable) != 2 {
		t.Errorf("status -json: %+v", st)
	}

	// API flags before the command, and the address without a scheme.
	c.env = map[string]string{}
	mustContain(t, "status", c.ok("-address", s.HTTPAddr(), "status"), self)
	mustContain(t, "status", c.ok("-address="+s.HTTPAddr(), "-json", "status"), `"node_id"`)

	out = c.ok("operator", "raft", "list-peers", "-address", "http://"+s.HTTPAddr())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("list-peers:\n%s", out)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "Node ID Address State Voter RaftProtocol" {
		t.Errorf("list-peers columns %q", got)
	}
	if got := strings.Fields(lines[1]); len(got) != 6 || got[0] != self || got[1] != s.NodeID() || got[2] != s.RPCAddr() ||
		got[3] != "leader" || got[4] != "true" || got[5] != "3" {
		t.Errorf("list-peers row %q", got)
	}
	mustContain(t, "remove-peer", c.fails(1, "operator", "raft", "remove-peer", "-peer-id", "nope", "-address", s.HTTPAddr()),
		`no raft peer with ID "nope"`)
}

func TestCLI_Deployments(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)
	c.env[EnvToken] = "unused-token"

	mustContain(t, "empty list", c.ok("deployment", "list"), "No deployments")
	var empty []any
	c.okJSON(&empty, "deployment", "list")
	if empty == nil || len(empty) != 0 {
		t.Errorf("empty list -json: %v", empty)
	}

	web := s.CreatePending("default", "web")
	api := s.CreatePending("default", "api")
	out := c.ok("deployment", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], api.ID[:8]) || !strings.HasPrefix(lines[2], web.ID[:8]) {
		t.Fatalf("list, newest first:\n%s", out)
	}
	mustContain(t, "list", out, "pending_approval", "approval", "abababababab")
	mustContain(t, "list -job web", c.ok("deployment", "list", "-job", "web", "-verbose"), web.ID)
	out = c.ok("deployment", "list", "-limit", "1")
	if strings.Count(strings.TrimSpace(out), "\n") != 1 {
		t.Errorf("list -limit 1:\n%s", out)
	}

	// Approve by prefix with a comment given after the ID.
	out = c.ok("deployment", "approve", web.ID[:8], "-comment", "ship it")
	mustContain(t, "approve", out, "approved: now applying")
	var d structs.Deployment
	c.okJSON(&d, "deployment", "status", web.ID)
	if d.State != structs.StateApplying || len(d.Decisions) != 1 || d.Decisions[0].Comment != "ship it" ||
		!strings.Contains(d.Decisions[0].Actor, "@") {
		t.Errorf("approved deployment: %+v", d)
	}

	out = c.ok("deployment", "status", web.ID)
	t.Logf("nops deployment status:\n%s", out)
	mustContain(t, "status", out, "ID", web.ID, "default/web", "applying since", "Decisions", "approve", "ship it",
		"Diff (redacted)", `+/- Job: "web"`, "Events", "-> detected", "detected -> pending_approval", "pending_approval -> applying")

	stderr := c.fails(1, "deployment", "approve", web.ID)
	mustContain(t, "second approve", stderr, "not pending approval", "409")

	// A pause refuses approvals.
	c.ok("pause", "-reason", "freeze for the release")
	mustContain(t, "approve while paused", c.fails(1, "deployment", "approve", api.ID), "paused", "freeze for the release")
	c.ok("resume", "-reason", "release done")

	mustContain(t, "reject", c.ok("deployment", "reject", api.ID, "-reason", "wrong image"), "rejected: now rejected")

	// Two approvals from distinct identities (SPEC section 20): the CLI's
	// one identity approves once, and is refused the second time.
	db := s.CreatePendingWith("default", "db", func(d *structs.Deployment) { d.ApprovalsRequired, d.ApprovalTTL = 2, 72*time.Hour })
	mustContain(t, "first of two", c.ok("deployment", "approve", db.ID), "now pending_approval, with 1 of 2 approvals")
	out = c.ok("deployment", "status", db.ID)
	mustContain(t, "status of one of two", out, "Approvals", "1 of 2 (", "@", " at ", "Expires", "approved by ", "1 of 2 approvals")
	mustContain(t, "second approval by one identity", c.fails(1, "deployment", "approve", db.ID), "409", "nops_approvals", "already approved")
	out = c.ok("deployment", "list", "-state", "rejected")
	mustContain(t, "rejected list", out, api.ID[:8])
	if strings.Contains(out, web.ID[:8]) {
		t.Errorf("-state rejected lists the approved deployment:\n%s", out)
	}
	mustContain(t, "missing", c.fails(1, "deployment", "status", "ffffffff-none"), "not found", "404")
}

func TestCLI_PausesAndWindows(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)

	out := c.ok("pause", "-reason", "maintenance")
	mustContain(t, "pause", out, "Every job is paused", "* (every job)", "maintenance")
	out = c.ok("job", "pause", "web", "-namespace", "prod", "-reason", "db upgrade")
	mustContain(t, "job pause", out, "Job prod/web paused")
	var pauses []*structs.Pause
	c.okJSON(&pauses, "resume", "-reason", "done")
	if len(pauses) != 1 || pauses[0].Key != "prod/web" {
		t.Errorf("pauses after resume of every job: %+v", pauses)
	}
	c.ok("job", "resume", "web", "-namespace", "prod", "-reason", "upgraded")
	var lift structs.WindowLift
	c.okJSON(&lift, "job", "deploy-now", "web")
	if lift.Namespace != "default" || lift.JobID != "web" {
		t.Errorf("deploy-now: %+v", lift)
	}

	dir := t.TempDir()
	good := filepath.Join(dir, "windows.hcl")
	writeFile(t, good, `
window "nightly" {
  kind       = "deny"
  schedule   = "0 22 * * *"
  duration   = "8h"
  timezone   = "Europe/Paris"
  namespaces = ["default"]
  jobs       = ["web-*", "api"]
}

window "office-hours" {
  kind     = "allow"
  schedule = "0 9 * * 1-5"
  duration = "9h"
}
`)
	out = c.ok("window", "apply", "-f", good)
	mustContain(t, "apply", out, `Window "nightly" applied`, `Window "office-hours" applied`)
	out = c.ok("window", "list")
	mustContain(t, "list", out, "nightly", "deny", "0 22 * * *", "Europe/Paris", "web-*,api", "office-hours", "UTC")

	// JSON files work too.
	js := filepath.Join(dir, "w.json")
	writeFile(t, js, `{"window": {"weekend": {"kind": "deny", "schedule": "0 0 * * 6", "duration": "48h"}}}`)
	c.ok("window", "apply", "-f", js)

	bad := filepath.Join(dir, "bad.hcl")
	writeFile(t, bad, `window "x" {
  kind     = "deny"
  schedule = "0 22 * * *"
  duration = "8h"
  colour   = "blue"
}

window "y" {
  kind     = "maybe"
  schedule = "0 22 * * *"
  duration = "8h"
}

window "z" {
  kind = "deny"
}
`)
	stderr := c.fails(1, "window", "apply", "-f", bad)
	mustContain(t, "bad file", stderr, "invalid window file "+bad, bad+":5,", `"colour" is not expected`,
		bad+":8,", `window "y": kind: must be allow or deny, not "maybe"`, bad+":14,", `"schedule" is required`)
	var windows []*structs.SyncWindow
	c.okJSON(&windows, "window", "list")
	if len(windows) != 3 {
		t.Errorf("a bad file applied something: %d windows", len(windows))
	}
	writeFile(t, bad, "window \"x\" {\n  kind = \n")
	mustContain(t, "syntax error", c.fails(1, "window", "apply", bad), bad+":")
	mustContain(t, "missing file", c.fails(1, "window", "apply", "-f", filepath.Join(dir, "none.hcl")), "none.hcl")

	mustContain(t, "delete", c.ok("window", "delete", "nightly"), `Window "nightly" deleted`)
	mustContain(t, "delete again", c.fails(1, "window", "delete", "nightly"), `sync window "nightly"`, "404")
	if out := c.ok("window", "list"); strings.Contains(out, "nightly") {
		t.Errorf("deleted window still listed:\n%s", out)
	}

	out = c.ok("events", "-kind", "window")
	mustContain(t, "window events", out, "Seq", "Object", "nightly", "-> created", "-> deleted")
	if strings.Contains(out, "pause") {
		t.Errorf("-kind window lists pause events:\n%s", out)
	}
	var events []*structs.Event
	c.okJSON(&events, "events", "-since", "1h")
	if len(events) < 8 {
		t.Errorf("events of the last hour: %d", len(events))
	}
	c.okJSON(&events, "events", "-since", "1", "-limit", "2")
	if len(events) != 2 || events[0].Seq != 2 {
		t.Errorf("events after 1, limit 2: %+v", events)
	}
}

func TestCLI_EventsFollow(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)
	c.ok("pause", "-reason", "before follow")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- c.meta(&stdout, &stderr).run(ctx, []string{"events", "-follow", "-json"}) }()

	waitFor(t, func() bool { return strings.Contains(stdout.String(), "before follow") })
	c.ok("resume", "-reason", "while following")
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "while following") })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("follow exited %d after cancel; stderr: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not stop when its context was cancelled")
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("follow printed:\n%s", stdout.String())
	}
	for i, want := range []string{"before follow", "while following"} {
		var e structs.Event
		if err := json.Unmarshal([]byte(lines[i]), &e); err != nil || e.Message != want || e.Seq != uint64(i+1) {
			t.Errorf("line %d %q: %+v %v", i, lines[i], e, err)
		}
	}
}

func TestCLI_SnapshotSaveInspectRestore(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)
	s.CreatePending("default", "web")
	c.ok("pause", "-reason", "snapshot test")
	dir := t.TempDir()
	file := filepath.Join(dir, "state.snap")

	mustContain(t, "save", c.ok("operator", "snapshot", "save", file), "Snapshot saved to "+file)
	// The snapshot holds job specs with their secrets: only its owner may
	// read it, whatever the umask.
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the saved snapshot's mode is %v, want 0600", fi.Mode().Perm())
	}

	// Inspect is offline.
	offline := newCLI(t, nil)
	offline.env[EnvAddress] = testutil.ClosedAddress(t)
	out := offline.ok("operator", "snapshot", "inspect", file)
	mustContain(t, "inspect", out, "Index", "Term", "Size", "Kind", "Count")
	var info snapshotInfo
	offline.okJSON(&info, "operator", "snapshot", "inspect", file)
	if info.Index == 0 || info.Term == 0 || info.Size == 0 || info.Counts["deployments"] != 1 || info.Counts["pauses"] != 1 ||
		info.Counts["events"] != 3 {
		t.Errorf("inspect -json: %+v", info)
	}

	// Change the state, then restore the snapshot.
	c.ok("resume", "-reason", "after snapshot")
	mustContain(t, "restore", c.ok("operator", "snapshot", "restore", file), "Snapshot restored")
	var pauses []*structs.Pause
	api, err := client.New(client.Config{Address: s.HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	pauses, _, err = api.Jobs().Pauses(context.Background(), nil)
	if err != nil || len(pauses) != 1 || pauses[0].Reason != "snapshot test" {
		t.Errorf("pauses after restore: %+v, %v", pauses, err)
	}

	// A corrupt file is refused before anything is sent, and inspect says why.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0xff
	corrupt := filepath.Join(dir, "corrupt.snap")
	writeFile(t, corrupt, string(raw))
	mustContain(t, "inspect corrupt", offline.fails(1, "operator", "snapshot", "inspect", corrupt), corrupt)
	mustContain(t, "restore corrupt", offline.fails(1, "operator", "snapshot", "restore", corrupt), corrupt)
	mustContain(t, "inspect missing", offline.fails(1, "operator", "snapshot", "inspect", filepath.Join(dir, "none")), "none")

	// A save to a directory that does not exist fails and leaves nothing.
	mustContain(t, "save", c.fails(1, "operator", "snapshot", "save", filepath.Join(dir, "no", "such", "dir.snap")), "create file")
}

func TestCLI_ReconcilerRoutes(t *testing.T) {
	fake := fakeReconciler()
	s := nopstest.StartDev(t, nopstest.WithReconciler(fake))
	c := newCLI(t, s)

	out := c.ok("status")
	mustContain(t, "status", out, "Jobs", "3: 1 in_sync, 2 drift", "Last detection", "2030-01-02T03:04:06Z", "by n1: 3 jobs, 2 drifted, 1 deployments created")

	out = c.ok("job", "status", "web")
	t.Logf("nops job status:\n%s", out)
	mustContain(t, "job status", out, "default/web", "in_sync", "jobs/web.nomad.hcl", "Paused", "by ann@ops", "db upgrade",
		"Waiting", "waiting for default/db: not in sync",
		"Blocked", "after deployment 5e1f0c2a failed after its register", "Active deployment", "none", "Last deployment", "failed", "allocation failed")
	mustContain(t, "missing job", c.fails(1, "job", "status", "nope", "-namespace", "prod"), "prod/nope", "404")

	mustContain(t, "retry", c.ok("job", "retry", "web", "-namespace", "prod"), "Job prod/web: block lifted")
	out = c.ok("repo", "list")
	mustContain(t, "repo list", out, "ops", "https://git.example/ops.git", "main", "cccccccccccc", "4", "1 parse errors")
	mustContain(t, "repo refresh", c.ok("repo", "refresh", "ops"), `Repository "ops" fetched: head cccccccccccc, 4 job files`)
	mustContain(t, "orphans", c.ok("orphans"), "legacy", "jobs/legacy.nomad.hcl")

	d := s.CreatePending("default", "web")
	mustContain(t, "promote", c.ok("deployment", "promote", d.ID), "canaries promoted")

	// The CLI's actor is the client's default, user@host.
	def, err := client.New(client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	actor := def.Actor()
	want := []string{
		`Jobs "" ""`, "Cycle", "Job default/web", "Job prod/nope",
		"Retry prod/web by " + actor, "Repos", "Refresh ops", "Repos", "Orphans",
		"PromoteDeployment " + d.ID + " by " + actor,
	}
	if got := fake.Calls(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("calls\n got %q\nwant %q", got, want)
	}
}

// nops serve starts a server from flags, prints its banner, serves the API,
// and stops when its context is cancelled.
func TestServe_DevServerLeadsAndStopsOnCancel(t *testing.T) {
	c := newCLI(t, nil)
	const timeout = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		serve := &serveCommand{m: c.meta(&stdout, &stderr), shutdownTimeout: timeout}
		done <- serve.Run(ctx, []string{"-dev", "-node", "serve-test", "-data-dir", t.TempDir(), "-log-level", "debug",
			"-http-port", "0", "-rpc-port", "0", "-serf-port", "0"})
	}()
	var addr string
	waitFor(t, func() bool {
		for _, line := range strings.Split(stdout.String(), "\n") {
			if k, v, ok := strings.Cut(line, ": "); ok && strings.TrimSpace(k) == "HTTP addr" {
				addr = strings.TrimSpace(v)
				return true
			}
		}
		return false
	})
	mustContain(t, "banner", stdout.String(), "Nops server started", "serve-test", "RPC addr", "Data dir", "Dev mode: true")
	waitFor(t, func() bool { return strings.Contains(c.run("status", "-address", addr).stdout, "serve-test (leader)") })
	mustContain(t, "logs", stderr.String(), "[INFO]  nops")

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
		}
	case <-time.After(timeout + 5*time.Second):
		t.Fatal("serve did not return after its context was cancelled")
	}
	mustContain(t, "stdout", stdout.String(), "Nops server stopped")

	// Bad configuration: exit 1, every problem named.
	mustContain(t, "bad config", c.fails(1, "serve", "-bootstrap-expect", "0", "-data-dir", t.TempDir()), "invalid configuration")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, for at most 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
