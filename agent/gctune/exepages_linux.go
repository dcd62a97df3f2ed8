package gctune

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// releaseExecutablePages unmaps from the process the pages of its own
// executable that the kernel mapped read-only (code, read-only data, the
// symbol tables the runtime reads), and returns how many bytes were mapped.
// The pages stay in the page cache: the next use of one maps it again (a
// minor fault). A mapping that may hold a page the process changed (a
// writable one, or one with anonymous pages, as a relocated read-only
// segment of a position-independent binary has) is left alone, since
// dropping its pages would bring the file's bytes back in their place.
func releaseExecutablePages() (uint64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("finding the executable: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("reading the process's mappings: %w", err)
	}
	var released uint64
	for _, m := range readOnlyMappings(smaps, exe) {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("releasing %x-%x of %s: %w", m.start, m.end, exe, errno)
		}
		released += m.rss
	}
	return released, nil
}

// mapping is one mapping of /proc/self/smaps.
type mapping struct {
	start, end uintptr
	perms      string
	path       string
	// rss and anon are its resident and anonymous bytes.
	rss, anon uint64
}

// readOnlyMappings returns the mappings of path in an smaps listing that
// are private, not writable, resident, and hold no anonymous page.
func readOnlyMappings(smaps []byte, path string) []mapping {
	var out []mapping
	var cur *mapping
	keep := func() {
		if cur != nil && cur.path == path && len(cur.perms) == 4 && cur.perms[1] == '-' && cur.perms[3] == 'p' && cur.rss > 0 && cur.anon == 0 {
			out = append(out, *cur)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if m, ok := parseMappingHeader(f); ok {
			keep()
			cur = &m
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Rss:":
			cur.rss = kib(f[1])
		case "Anonymous:":
			cur.anon = kib(f[1])
		}
	}
	keep()
	return out
}

// parseMappingHeader parses "start-end perms offset dev inode [path]".
func parseMappingHeader(f []string) (mapping, bool) {
	if len(f) < 5 || strings.HasSuffix(f[0], ":") {
		return mapping{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return mapping{}, false
	}
	m := mapping{start: uintptr(start), end: uintptr(end), perms: f[1]}
	if len(f) >= 6 {
		m.path = strings.Join(f[5:], " ")
	}
	return m, true
}

// kib parses a size in kB of smaps into bytes (0 when unreadable).
func kib(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n << 10
}
