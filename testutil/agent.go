package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const (
	// agentStartTimeout bounds the start of one agent, from exec to ready.
	// It is generous because go test runs many packages at once, each of
	// which may start agents, on machines with few cores.
	agentStartTimeout = 90 * time.Second

	// agentStartAttempts is how many times an agent is started on new ports
	// when the ports it was given were taken by another process.
	agentStartAttempts = 3
)

// testAgent is what startAgent needs of the agents it starts.
type testAgent interface {
	// describe returns the agent's address and the file of its log, for
	// messages.
	describe() (addr, logPath string)

	// Stop stops the agent; it is safe to call more than once.
	Stop()
}

// startAgent starts an agent of a kind ("nomad", "consul") with start, which
// starts one in the directory it is given, on the n free ports it is given,
// and returns once it is ready. While the agent could not bind its ports,
// it tries again on new ones, in a new directory under t.TempDir(), up to
// agentStartAttempts times; any other error fails the test. The agent is
// stopped in t.Cleanup; if the test failed, the tail of its log is printed.
func startAgent[A testAgent](t testing.TB, kind string, n int, start func(dir string, ports []int) (A, error)) A {
	t.Helper()

	root := t.TempDir()
	began := time.Now()
	var err error
	for attempt := 1; attempt <= agentStartAttempts; attempt++ {
		var a A
		a, err = startIn(filepath.Join(root, fmt.Sprintf("%s-%d", kind, attempt)), n, start)
		if err == nil {
			addr, logPath := a.describe()
			t.Cleanup(func() {
				// The tail before the shutdown is the part that explains
				// a failure.
				var tail string
				if t.Failed() {
					tail = TailFile(logPath, logTailLines)
				}
				a.Stop()
				if tail != "" {
					t.Logf("testutil: %s agent %s log (%s), last %d lines before shutdown:\n%s", kind, addr, logPath, logTailLines, tail)
				}
			})
			t.Logf("testutil: %s agent ready at %s in %s", kind, addr, time.Since(began).Round(time.Millisecond))
			return a
		}
		if !errors.Is(err, ErrPortInUse) {
			break
		}
	}
	t.Fatalf("testutil: starting %s agent: %v", kind, err)
	var none A
	return none
}

// startIn creates dir, picks n free ports and calls start with them.
func startIn[A testAgent](dir string, n int, start func(dir string, ports []int) (A, error)) (A, error) {
	var none A
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return none, fmt.Errorf("creating agent directory: %w", err)
	}
	ports, err := freePorts(n)
	if err != nil {
		return none, err
	}
	return start(dir, ports)
}

// startAgentProcess starts the process of an agent and waits until ready
// reports the agent usable. When it exits or is not ready within
// agentStartTimeout, the process is stopped and the error carries the tail
// of its log.
func startAgentProcess(name, logPath, bin string, args []string, ready func() (bool, error)) (*Process, error) {
	p, err := StartProcess(ProcessConfig{Name: name, Bin: bin, Args: args, LogPath: logPath})
	if err != nil {
		return nil, err
	}
	if err := waitReady(p, ready); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%w\nlast lines of %s:\n%s", err, logPath, TailFile(logPath, logTailLines))
	}
	return p, nil
}

// hasLeader returns an error unless leader, the status call of an agent's
// API client, names a leader.
func hasLeader(leader func() (string, error)) error {
	addr, err := leader()
	if err != nil {
		return fmt.Errorf("reading leader: %w", err)
	}
	if addr == "" {
		return errors.New("no leader yet")
	}
	return nil
}

// permanentError ends polling at once.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// stopPolling wraps err so that waitReadyTimeout gives up at once.
func stopPolling(err error) error { return &permanentError{err: err} }

// waitReady polls ready until it succeeds, the process exits, or
// agentStartTimeout passes.
func waitReady(p *Process, ready func() (bool, error)) error {
	return waitReadyTimeout(p, agentStartTimeout, ready)
}

func waitReadyTimeout(p *Process, timeout time.Duration, ready func() (bool, error)) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case <-p.Done():
			cancel(p.ExitError())
		case <-ctx.Done():
		}
	}()

	return poll(ctx, timeout, func() (bool, error) {
		ok, err := ready()
		var perm *permanentError
		if errors.As(err, &perm) {
			cancel(perm.err)
		}
		return ok, err
	})
}
