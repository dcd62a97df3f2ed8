package testutil

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts an agent in its own process group, so that stopping it
// also stops what it started, and has the kernel kill it if the test binary
// dies first (a panic or a -timeout), so no agent outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
}

func killProcessGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}

// unmountUnder detaches every mount below dir. A Nomad client running as
// root mounts a tmpfs for each task's secrets and private directories; when
// the agent is killed before it cleans up, those mounts would make the
// removal of the test's temporary directory fail.
func unmountUnder(dir string) {
	if os.Geteuid() != 0 {
		return
	}
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()

	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mountPoint := unescapeMountPath(fields[4])
		if strings.HasPrefix(mountPoint, dir+string(filepath.Separator)) {
			mounts = append(mounts, mountPoint)
		}
	}

	// Deepest first, so nested mounts go before their parents.
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, m := range mounts {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

// unescapeMountPath decodes the octal escapes (\040 for a space, ...) of
// /proc/self/mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
