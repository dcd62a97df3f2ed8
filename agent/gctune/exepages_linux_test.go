package gctune

import (
	"crypto/sha256"
	"os"
	"strings"
	"testing"
	"unicode"
)

func TestReadOnlyMappings(t *testing.T) {
	const exe = "/opt/nops/bin/nops server"
	smaps := `00400000-00c00000 r-xp 00000000 fd:01 42 /opt/nops/bin/nops server
Size:               8192 kB
Rss:                6144 kB
Anonymous:             0 kB
00c00000-01400000 r--p 00800000 fd:01 42 /opt/nops/bin/nops server
Rss:                2048 kB
Anonymous:             0 kB
01400000-01500000 rw-p 01000000 fd:01 42 /opt/nops/bin/nops server
Rss:                 512 kB
Anonymous:           256 kB
01500000-01600000 r--p 01100000 fd:01 42 /opt/nops/bin/nops server
Rss:                  64 kB
Anonymous:             4 kB
01600000-01700000 r--p 01200000 fd:01 42 /opt/nops/bin/nops server
Rss:                   0 kB
Anonymous:             0 kB
01700000-01800000 r--s 01300000 fd:01 42 /opt/nops/bin/nops server
Rss:                  64 kB
Anonymous:             0 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:01 77 /usr/lib/libc.so.6
Rss:                 900 kB
Anonymous:             0 kB
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
Rss:                1024 kB
Anonymous:          1024 kB
garbage line
7fff00000000-zzzz r-xp 00000000 00:00 0 [vdso]
`
	got := readOnlyMappings([]byte(smaps), exe)
	want := []mapping{
		{start: 0x400000, end: 0xc00000, perms: "r-xp", path: exe, rss: 6144 << 10},
		{start: 0xc00000, end: 0x1400000, perms: "r--p", path: exe, rss: 2048 << 10},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mappings %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// exeRSS sums the resident bytes of the executable's read-only mappings.
func exeRSS(t *testing.T) uint64 {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, m := range readOnlyMappings(smaps, exe) {
		n += m.rss
	}
	return n
}

// digest reads read-only data of the executable (the Unicode tables and the
// program's own strings) that a wrong release would zero or corrupt.
func digest() [32]byte {
	h := sha256.New()
	for _, tab := range []*unicode.RangeTable{unicode.Letter, unicode.Han, unicode.Mark, unicode.Symbol} {
		for _, r := range tab.R16 {
			h.Write([]byte{byte(r.Lo), byte(r.Lo >> 8), byte(r.Hi), byte(r.Hi >> 8)})
		}
		for _, r := range tab.R32 {
			h.Write([]byte{byte(r.Lo), byte(r.Lo >> 8), byte(r.Lo >> 16), byte(r.Hi), byte(r.Hi >> 8)})
		}
	}
	h.Write([]byte(strings.Repeat("nops", 3)))
	var d [32]byte
	copy(d[:], h.Sum(nil))
	return d
}

// TestReleaseExecutablePages unmaps the test binary's own pages: its
// resident set shrinks, and the code and read-only data mapped again
// afterwards are the file's, unchanged.
func TestReleaseExecutablePages(t *testing.T) {
	before := digest()
	rss := exeRSS(t)
	if rss == 0 {
		t.Fatal("no resident page of the executable before the release")
	}
	n, err := releaseExecutablePages()
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	if n == 0 || n > rss+(1<<20) {
		t.Fatalf("released %d bytes of %d resident", n, rss)
	}
	after := exeRSS(t)
	if after >= rss {
		t.Fatalf("the executable's resident pages went from %d to %d bytes after releasing %d", rss, after, n)
	}
	if digest() != before {
		t.Fatal("read-only data changed after the release")
	}
	t.Logf("executable's read-only mappings: %d KiB resident, %d KiB after the release", rss>>10, after>>10)
}
