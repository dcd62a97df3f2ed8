package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

const (
	// stopGrace is how long an agent gets to exit after SIGINT before its
	// process group is killed.
	stopGrace = 10 * time.Second

	// logTailLines is how many lines of an agent's log a failed test shows.
	logTailLines = 60
)

// errPortInUse means an agent could not bind one of the ports it was given,
// because another process took it after FreePorts returned.
var errPortInUse = errors.New("port already in use")

// process is an agent running as a child of the test binary, in its own
// process group, with stdout and stderr written to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string

	// grace is how long stop waits after SIGINT before it kills.
	grace time.Duration

	// done is closed once the process has exited and waitErr is set.
	done    chan struct{}
	waitErr error

	stopOnce sync.Once
}

// startProcess starts bin with args, writing its output to logPath.
func startProcess(name, logPath, bin string, args []string, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating %s log file: %w", name, err)
	}

	cmd := exec.Command(bin, args...)
	cmd.Stdin = nil
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}

	p := &process{
		name:    name,
		cmd:     cmd,
		logPath: logPath,
		grace:   stopGrace,
		done:    make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// exitError describes an early exit of the process, wrapping errPortInUse
// when its log shows that a port was taken.
func (p *process) exitError() error {
	_, waitErr := p.exited()
	if waitErr == nil {
		waitErr = errors.New("exit status 0")
	}
	log, _ := os.ReadFile(p.logPath)
	if bytes.Contains(log, []byte("address already in use")) {
		return fmt.Errorf("%s exited (%v): %w", p.name, waitErr, errPortInUse)
	}
	return fmt.Errorf("%s exited: %w", p.name, waitErr)
}

// stop sends SIGINT, waits up to p.grace for the process to exit, then
// kills its whole process group (which also reaps helpers it started, such
// as task executors). It is safe to call more than once.
func (p *process) stop() {
	p.stopOnce.Do(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(p.grace):
				killProcessGroup(p.cmd.Process)
				<-p.done
			}
		}
		killProcessGroup(p.cmd.Process)
	})
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	const maxBytes = 64 << 10

	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(log unavailable: %v)", err)
	}
	defer f.Close()

	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(log unavailable: %v)", err)
	}
	offset := max(info.Size()-maxBytes, 0)
	buf, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil {
		return fmt.Sprintf("(log unavailable: %v)", err)
	}

	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if offset > 0 && len(lines) > 0 {
		lines = lines[1:] // first line is most likely cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
