//go:build linux

package scripts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
)

// TestDemo runs `make demo`'s script end to end, non-interactively
// (DEMO_CHECK=1): a Nomad dev agent, a demo repository and a 3-server
// cluster with ACLs on; the script checks that every server serves the
// dashboard, that a deployment was created, and that the canary of the
// demo's canary job, once a new version of it is committed, is promoted
// through the dashboard's Promote form and completes, then stops what it
// started. The test then checks that no process of the script's process
// group is left.
func TestDemo(t *testing.T) {
	nomad := testutil.NomadBinary(t)
	nops := testutil.NopsBinary(t)
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The script takes a base port and uses base+0..2, +10..12, +20..22
	// for Nops and base..base+2 for Nomad: pick two bases far apart and
	// check that they are free.
	nomadPort, nopsPort := freeRange(t, 3), freeRange(t, 23)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "demo.sh"))
	cmd.Dir = root
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_ADDR=") && !strings.HasPrefix(kv, "NOPS_ADDR=") && !strings.HasPrefix(kv, "NOPS_TOKEN=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "DEMO_CHECK=1", "DEMO_DIR="+dir, "NOPS_NOMAD_BIN="+nomad, "NOPS_BIN="+nops,
		fmt.Sprintf("DEMO_NOMAD_PORT=%d", nomadPort), fmt.Sprintf("DEMO_NOPS_PORT=%d", nopsPort))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	pgid := cmd.Process.Pid
	t.Logf("demo ran in %s:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Errorf("demo script: %v", err)
	}
	for _, want := range []string{"serves the dashboard", "A deployment was created", "Committed shop version 2",
		"The canary of shop version 2 was promoted from the dashboard", "DEMO CHECK OK", "Stopping the demo"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// Every process the script started is gone (the agents stop on
	// SIGINT; give them a moment), else the test kills them and fails.
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
			return true, nil
		}
		return false, fmt.Errorf("processes of the demo's group %d are still running", pgid)
	})
	if syscall.Kill(-pgid, 0) != syscall.ESRCH {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// TestDemo_StopsOnSIGTERMInTheBackground runs the interactive demo as a
// background job of a shell runs it: with SIGINT ignored, which no trap
// can undo. Once the demo says its cluster runs, SIGTERM to the pid it
// wrote (what its closing message and the README say to do) stops every
// process it started and removes the management token file.
func TestDemo_StopsOnSIGTERMInTheBackground(t *testing.T) {
	nomad := testutil.NomadBinary(t)
	nops := testutil.NopsBinary(t)
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	nomadPort, nopsPort := freeRange(t, 3), freeRange(t, 23)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// `trap "" INT` then exec: the script starts with SIGINT ignored, as
	// bash starts a background job of a non-interactive shell.
	cmd := exec.CommandContext(ctx, "bash", "-c", `trap "" INT; exec bash "$0"`, filepath.Join(root, "scripts", "demo.sh"))
	cmd.Dir = root
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_ADDR=") && !strings.HasPrefix(kv, "NOPS_ADDR=") && !strings.HasPrefix(kv, "NOPS_TOKEN=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "DEMO_CHECK=0", "DEMO_DIR="+dir, "NOPS_NOMAD_BIN="+nomad, "NOPS_BIN="+nops,
		fmt.Sprintf("DEMO_NOMAD_PORT=%d", nomadPort), fmt.Sprintf("DEMO_NOPS_PORT=%d", nopsPort))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if syscall.Kill(-pgid, 0) != syscall.ESRCH {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		t.Logf("demo output:\n%s", out.String())
	}()
	testutil.WaitForResult(t, 3*time.Minute, func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("the demo exited before its cluster ran: %v", err)
		default:
		}
		if !strings.Contains(out.String(), "A 3-server Nops cluster is running") {
			return false, fmt.Errorf("the demo does not say its cluster runs yet")
		}
		return true, nil
	})
	token := filepath.Join(dir, "token")
	if _, err := os.Stat(token); err != nil {
		t.Fatalf("the demo wrote no token file: %v", err)
	}
	pidText, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatalf("the demo wrote no pid file: %v", err)
	}
	var pid int
	if _, err := fmt.Sscan(string(pidText), &pid); err != nil || pid != cmd.Process.Pid {
		t.Fatalf("the pid file holds %q, the script runs as %d", pidText, cmd.Process.Pid)
	}
	// SIGINT is ignored, as in a background job: the demo runs on.
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the demo exited on a SIGINT it should not see: %v", err)
	case <-time.After(2 * time.Second):
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the demo did not exit within a minute of SIGTERM")
	}
	if !strings.Contains(out.String(), "Stopping the demo") {
		t.Errorf("the demo did not say it stopped")
	}
	if _, err := os.Stat(token); !os.IsNotExist(err) {
		t.Errorf("the token file is still there after the stop: %v", err)
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
			return true, nil
		}
		return false, fmt.Errorf("processes of the demo's group %d are still running after SIGTERM", pgid)
	})
}

// TestDemo_JobFilesValidate: the demo's job files (scripts/demo/jobs) pass
// `nops validate`, parsed by a real Nomad: every job and its hook are
// valid, and the canary job waits for a person's promotion.
func TestDemo_JobFilesValidate(t *testing.T) {
	nomad := testutil.StartNomad(t)
	nops := testutil.NopsBinary(t)
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "scripts", "demo", "jobs")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nops, "validate", "-json", "-nomad-addr", nomad.Addr, dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nops validate %s: %v\n%s", dir, err, out)
	}
	var res struct {
		CheckedBy string `json:"checked_by"`
		Jobs      []struct {
			Namespace string   `json:"namespace"`
			JobID     string   `json:"job_id"`
			Role      string   `json:"role"`
			Valid     bool     `json:"valid"`
			Problems  []string `json:"problems"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("nops validate -json: %v\n%s", err, out)
	}
	jobs := map[string]string{}
	for _, j := range res.Jobs {
		if j.Valid && len(j.Problems) == 0 {
			jobs[j.Namespace+"/"+j.JobID] = j.Role
		}
	}
	for job, role := range map[string]string{"default/web": "managed", "default/billing": "managed", "default/backup": "hook", "default/shop": "managed"} {
		if jobs[job] != role {
			t.Errorf("job %s is missing, invalid or not %s:\n%s", job, role, out)
		}
	}
	if res.CheckedBy != "nomad" {
		t.Errorf("the files were checked by %q, not parsed by Nomad:\n%s", res.CheckedBy, out)
	}
	shop, err := os.ReadFile(filepath.Join(dir, "shop.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"canary            = 1", "auto_promote      = false"} {
		if !strings.Contains(string(shop), want) {
			t.Errorf("the canary job lacks %q", want)
		}
	}
}

// freeRange returns a base port such that base..base+n-1 are free now.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := testutil.FreePorts(t, 1)[0]
		if base+n > 65000 {
			continue
		}
		if portsFree(base, n) {
			return base
		}
	}
	t.Fatalf("no range of %d free ports", n)
	return 0
}

// portsFree reports whether TCP and UDP ports base..base+n-1 can be bound
// on 127.0.0.1 now.
func portsFree(base, n int) bool {
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	for p := base; p < base+n; p++ {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		closers = append(closers, l.Close)
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		closers = append(closers, u.Close)
	}
	return true
}
