package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPoll_EndsOnSuccessTimeoutOrContext(t *testing.T) {
	t.Parallel()
	errNotYet := errors.New("not yet")

	t.Run("succeeds once the condition holds", func(t *testing.T) {
		calls := 0
		err := poll(context.Background(), 10*time.Second, func() (bool, error) {
			calls++
			return calls == 3, errNotYet
		})
		if err != nil || calls != 3 {
			t.Fatalf("err %v after %d calls, want nil after 3", err, calls)
		}
	})

	t.Run("times out with the last error", func(t *testing.T) {
		err := poll(context.Background(), 50*time.Millisecond, func() (bool, error) { return false, errNotYet })
		if !errors.Is(err, errNotYet) || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("err %v, want a timeout wrapping %v", err, errNotYet)
		}
	})

	t.Run("times out without an error", func(t *testing.T) {
		err := poll(context.Background(), 50*time.Millisecond, func() (bool, error) { return false, nil })
		if !errors.Is(err, errConditionNotMet) {
			t.Fatalf("err %v, want %v", err, errConditionNotMet)
		}
	})

	t.Run("stops at once when the context ends with a cause", func(t *testing.T) {
		errGone := errors.New("agent gone")
		ctx, cancel := context.WithCancelCause(context.Background())
		calls := 0
		start := time.Now()
		err := poll(ctx, time.Minute, func() (bool, error) {
			calls++
			cancel(errGone)
			return false, errNotYet
		})
		if !errors.Is(err, errGone) || calls != 1 || time.Since(start) > 10*time.Second {
			t.Fatalf("err %v after %d calls in %s, want %v after 1 call", err, calls, time.Since(start), errGone)
		}
	})
}

func TestWaitForListen(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	WaitForListen(t, l.Addr().String(), 10*time.Second)
}

func TestFreePorts_DistinctAndFreeOnTCPAndUDP(t *testing.T) {
	t.Parallel()
	// Another process (other test packages run at once) can take a port
	// between FreePorts returning and the check binding it: a round with a
	// taken port is tried again, and three such rounds in a row fail.
	// Where the machine says which range outgoing connections take their
	// local ports from, every port is below it.
	lo, hi := portRange()
	if lo == hi {
		lo, hi = 1, 65536
		t.Logf("the ephemeral range is unknown here: the kernel picks the ports")
	}
	var taken error
	for round := 0; round < 3; round++ {
		ports := FreePorts(t, 20)
		seen := make(map[int]bool)
		for _, p := range ports {
			if p < lo || p >= hi || seen[p] {
				t.Fatalf("ports %v: repeated port %d, or outside [%d, %d)", ports, p, lo, hi)
			}
			seen[p] = true
		}
		if taken = bindAll(ports); taken == nil {
			break
		}
		t.Logf("round %d: %v", round+1, taken)
	}
	if taken != nil {
		t.Fatal(taken)
	}
	if _, err := freePorts(0); err == nil {
		t.Fatal("freePorts(0) returned no error")
	}
}

// bindAll binds each port on TCP and UDP and releases it.
func bindAll(ports []int) error {
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return fmt.Errorf("port %d not free on TCP: %w", p, err)
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		l.Close()
		if err != nil {
			return fmt.Errorf("port %d not free on UDP: %w", p, err)
		}
		pc.Close()
	}
	return nil
}

// TestProcess_ExitClassification runs stand-in agents (shell scripts) to
// check that an agent that dies at startup is reported at once, with
// ErrPortInUse only when its log says a port was taken.
func TestProcess_ExitClassification(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	neverReady := func() (bool, error) { return false, errors.New("not ready") }

	cases := []struct {
		name      string
		body      string
		portInUse bool
	}{
		{"port taken", `echo "Error starting agent: listen tcp 127.0.0.1:4646: bind: address already in use"; exit 1`, true},
		{"bad config", `echo "Error loading configuration: unexpected token"; exit 1`, false},
		{"clean exit", `exit 0`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bin := script(strings.ReplaceAll(tc.name, " ", "-")+".sh", tc.body)
			p, err := StartProcess(ProcessConfig{Name: "stand-in", Bin: bin, LogPath: filepath.Join(dir, tc.name+".log")})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop()

			start := time.Now()
			err = waitReady(p, neverReady)
			if err == nil {
				t.Fatal("waitReady succeeded for an agent that exited")
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("exit noticed after %s", time.Since(start))
			}
			if got := errors.Is(err, ErrPortInUse); got != tc.portInUse {
				t.Fatalf("errors.Is(%v, ErrPortInUse) = %t, want %t", err, got, tc.portInUse)
			}
		})
	}
}

// TestProcess_ExitErrorReadsOnlyItsRun starts a process again on a log
// whose earlier run could not bind a port: the new run's exit is not taken
// for a taken port, and the earlier run's lines stay in the log.
func TestProcess_ExitErrorReadsOnlyItsRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fails.sh")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho bad config\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "log")
	const earlier = "bind: address already in use"
	if err := os.WriteFile(logPath, []byte(earlier+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := StartProcess(ProcessConfig{Name: "again", Bin: bin, LogPath: logPath, AppendLog: true})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.ExitError(); err == nil || errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), "again exited") {
		t.Fatalf("ExitError() = %v, want the exit of this run, not a taken port", err)
	}
	if got, want := TailFile(logPath, 2), earlier+"\nbad config"; got != want {
		t.Fatalf("log = %q, want %q", got, want)
	}
}

func TestProcess_StopKillsWhatIgnoresSIGINT(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stubborn.sh")
	// The shell ignores SIGINT and so does the sleep it starts in the
	// background, which stands for a helper such as a task executor.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\ntrap '' INT\nsleep 600 &\necho started $!\nwait\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const grace = 300 * time.Millisecond
	logPath := filepath.Join(dir, "log")
	p, err := StartProcess(ProcessConfig{Name: "stubborn", Bin: bin, LogPath: logPath, StopGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	WaitForResult(t, 10*time.Second, func() (bool, error) {
		_, err := fmt.Sscanf(TailFile(logPath, 1), "started %d", &child)
		return err == nil, err
	})

	start := time.Now()
	p.Stop()
	if exited, _ := p.Exited(); !exited {
		t.Fatal("process still running after stop")
	}
	if elapsed := time.Since(start); elapsed < grace || elapsed > grace+10*time.Second {
		t.Fatalf("stop took %s, want about %s", elapsed, grace)
	}
	p.Stop() // idempotent

	// The helper went with the process group: gone, or a zombie waiting for
	// whoever adopted it.
	WaitForResult(t, 10*time.Second, func() (bool, error) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if errors.Is(err, os.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if fields := strings.Fields(string(stat)); len(fields) > 2 && fields[2] == "Z" {
			return true, nil
		}
		return false, fmt.Errorf("helper %d still running", child)
	})
}

func TestTailFile_LastLinesOrWhyUnreadable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 100 {
		b.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := TailFile(path, 3), "line 97\nline 98\nline 99"; got != want {
		t.Fatalf("TailFile = %q, want %q", got, want)
	}
	if got := TailFile(filepath.Join(t.TempDir(), "missing"), 3); !strings.Contains(got, "log unavailable") {
		t.Fatalf("TailFile of a missing file = %q", got)
	}
}
