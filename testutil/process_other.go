//go:build !linux

package testutil

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killProcessGroup(p *os.Process) { _ = p.Kill() }

func unmountUnder(string) {}
