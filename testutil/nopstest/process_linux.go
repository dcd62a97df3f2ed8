package nopstest

import (
	"os"
	"syscall"
)

// sysProcAttr puts a server in its own process group, and has the kernel
// kill it if the test binary dies first (a panic or a -timeout), so that no
// server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killProcessGroup sends SIGKILL to the process group of p.
func killProcessGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}
