//go:build !linux

package nopstest

import (
	"os"
	"syscall"
)

// sysProcAttr leaves the process attributes as they are: only Linux can
// tie a child's life to its parent's.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killProcessGroup kills the process p.
func killProcessGroup(p *os.Process) {
	_ = p.Kill()
}
