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
	// DefaultStopGrace is how long Process.Stop waits after SIGINT before
	// it kills the process group, unless ProcessConfig.StopGrace says
	// otherwise.
	DefaultStopGrace = 10 * time.Second

	// logTailLines is how many lines of an agent's log a failed test shows:
	// enough for the error and what led to it, not a screen of startup.
	logTailLines = 60
)

// ErrPortInUse means a process could not bind one of the ports it was
// given, because another process took it after FreePorts returned.
// Process.ExitError wraps it; the helpers that start agents and servers try
// again on new ports when they see it.
var ErrPortInUse = errors.New("port already in use")

// ProcessConfig describes a process for StartProcess.
type ProcessConfig struct {
	// Name names the process in errors, for example "nomad agent".
	Name string

	// Bin is the executable and Args its arguments.
	Bin  string
	Args []string

	// LogPath is the file that collects the process's stdout and stderr.
	LogPath string

	// AppendLog appends to LogPath instead of truncating it, for a process
	// that is started again and keeps the log of its earlier runs.
	AppendLog bool

	// StopGrace is how long Stop waits after SIGINT before it kills the
	// process group; zero means DefaultStopGrace.
	StopGrace time.Duration
}

// Process is a child of the test binary: in its own process group, so that
// stopping it also stops what it started (on Linux the kernel also kills it
// if the test binary dies first), with the test's environment less the
// variables that would point it at something else (see ProcessEnv), and its
// stdout and stderr written to a log file. One Process is one run: a
// process started again is a new Process.
type Process struct {
	cfg ProcessConfig
	cmd *exec.Cmd

	// logStart is the size of the log when this run started: ExitError
	// reads only what the run wrote.
	logStart int64

	// done is closed once the process has exited and waitErr is set.
	done    chan struct{}
	waitErr error

	stopOnce sync.Once
}

// StartProcess starts the process cfg describes.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if cfg.AppendLog {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logFile, err := os.OpenFile(cfg.LogPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", cfg.Name, err)
	}
	info, err := logFile.Stat()
	if err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("opening the log of %s: %w", cfg.Name, err)
	}

	cmd := exec.Command(cfg.Bin, cfg.Args...)
	cmd.Stdin = nil
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = ProcessEnv()
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", cfg.Name, err)
	}

	p := &Process{
		cfg:      cfg,
		cmd:      cmd,
		logStart: info.Size(),
		done:     make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// ExitError describes an exit of the process, wrapping ErrPortInUse when
// what this run wrote to its log shows that a port was taken. It is meant
// for a process that exited when it should not have.
func (p *Process) ExitError() error {
	_, waitErr := p.Exited()
	if waitErr == nil {
		waitErr = errors.New("exit status 0")
	}
	if p.logContains("address already in use") {
		return fmt.Errorf("%s exited (%v): %w", p.cfg.Name, waitErr, ErrPortInUse)
	}
	return fmt.Errorf("%s exited: %w", p.cfg.Name, waitErr)
}

// logContains reports whether this run's part of the log contains s.
func (p *Process) logContains(s string) bool {
	f, err := os.Open(p.cfg.LogPath)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(p.logStart, io.SeekStart); err != nil {
		return false
	}
	log, _ := io.ReadAll(f)
	return bytes.Contains(log, []byte(s))
}

// Stop sends SIGINT, waits up to the stop grace for the process to exit,
// then kills its whole process group (which also reaps helpers it started,
// such as task executors). It returns once the process has exited, and is
// safe to call more than once.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(p.cfg.StopGrace):
				killProcessGroup(p.cmd.Process)
				<-p.done
			}
		}
		killProcessGroup(p.cmd.Process)
	})
}

// Kill sends SIGKILL to the process group, as a crash would, and returns
// once the process has exited.
func (p *Process) Kill() {
	killProcessGroup(p.cmd.Process)
	<-p.done
}

// ProcessEnv is the environment of the processes tests start: the test's,
// without the NOPS_, NOMAD_, CONSUL_ and VAULT_ variables, which would point
// a process at something else than its command line says.
func ProcessEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "NOPS_") || strings.HasPrefix(name, "NOMAD_") ||
			strings.HasPrefix(name, "CONSUL_") || strings.HasPrefix(name, "VAULT_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TailFile returns the last n lines of a file, or a note that says why it
// cannot be read. It reads at most the last 128 KiB, which holds far more
// than the lines a test shows, even of long ones.
func TailFile(path string, n int) string {
	const maxBytes = 128 << 10

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
