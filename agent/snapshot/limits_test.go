package snapshot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// rawArchive writes a gzipped tar of the given files as they are, with
// their declared sizes: what an attacker can send.
func rawArchive(t testing.TB, files ...rawFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		typ := f.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		size := f.size
		if size == 0 {
			size = int64(len(f.body))
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: size, Typeflag: typ, Linkname: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.body); err != nil && !errors.Is(err, tar.ErrWriteTooLong) {
			t.Fatal(err)
		}
	}
	// A file shorter than it claims leaves the stream cut, as an attacker
	// would send it: flush what there is.
	_ = tw.Flush()
	_ = gz.Close()
	return buf.Bytes()
}

type rawFile struct {
	name string
	body []byte
	size int64
	typ  byte
}

// GzipBomb returns a small archive whose state claims size bytes and holds
// zeros: a few hundred kilobytes that expand far beyond a server's limit.
func gzipBomb(t testing.TB, claim int64, zeros int) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: stateFile, Mode: 0o600, Size: claim, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := 0; i < zeros>>20; i++ {
		if _, err := tw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	_ = gz.Close()
	return buf.Bytes()
}

func TestRead_RefusesArchivesOverLimits(t *testing.T) {
	good := archive(t, "the state")
	zr, _ := gzip.NewReader(bytes.NewReader(good))
	tarBytes, _ := io.ReadAll(zr)
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(tarBytes))
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		files[h.Name], _ = io.ReadAll(tr)
	}
	withMeta := func(meta raft.SnapshotMeta) []byte {
		var buf bytes.Buffer
		if err := Write(&buf, &meta, strings.NewReader("the state")); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}

	for name, tc := range map[string]struct {
		data []byte
		lim  Limits
		want string
	}{
		"gzip bomb":            {gzipBomb(t, 8<<30, 64<<20), Limits{MaxSize: 16 << 20}, "claims 8589934592 bytes, over the limit of 16777216"},
		"bomb under the limit": {gzipBomb(t, 15<<20, 15<<20), Limits{MaxSize: 16 << 20}, "no meta.json"},
		"state twice": {rawArchive(t, rawFile{name: metaFile, body: files[metaFile]}, rawFile{name: stateFile, body: files[stateFile]},
			rawFile{name: stateFile, body: files[stateFile]}, rawFile{name: sumsFile, body: files[sumsFile]}), Limits{}, "state.bin appears twice"},
		"a symlink":     {rawArchive(t, rawFile{name: stateFile, typ: tar.TypeSymlink}), Limits{}, "not a regular file"},
		"unknown file":  {rawArchive(t, rawFile{name: "../../etc/passwd", body: []byte("x")}), Limits{}, "unexpected file"},
		"huge meta":     {rawArchive(t, rawFile{name: metaFile, body: make([]byte, 100<<10)}), Limits{}, "meta.json claims"},
		"index 2^64-1":  {withMeta(raft.SnapshotMeta{ID: "x", Index: math.MaxUint64, Term: 2}), Limits{}, "snapshot index 18446744073709551615 is out of range"},
		"index 0":       {withMeta(raft.SnapshotMeta{ID: "x", Index: 0, Term: 2}), Limits{}, "snapshot index 0 is out of range"},
		"term 0":        {withMeta(raft.SnapshotMeta{ID: "x", Index: 5, Term: 0}), Limits{}, "snapshot term 0 is out of range"},
		"term 2^64-1":   {withMeta(raft.SnapshotMeta{ID: "x", Index: 5, Term: math.MaxUint64}), Limits{}, "snapshot term"},
		"version 9":     {withMeta(raft.SnapshotMeta{ID: "x", Index: 5, Term: 1, Version: 9}), Limits{}, "version 9 is not supported"},
		"missing state": {rawArchive(t, rawFile{name: metaFile, body: files[metaFile]}, rawFile{name: sumsFile, body: files[sumsFile]}), Limits{}, "no state.bin"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tc.lim.TempDir = dir
			arc, err := ReadLimited(bytes.NewReader(tc.data), tc.lim)
			if err == nil {
				arc.Close()
				t.Fatalf("a %d-byte archive was read", len(tc.data))
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want one wrapping ErrInvalid saying %q", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("a refused archive left %d files behind", len(left))
			}
		})
	}

	// A good archive kept in a file reads the same twice, and Close
	// removes the file.
	dir := t.TempDir()
	arc, err := ReadLimited(bytes.NewReader(good), Limits{TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, _ := io.ReadAll(arc.State()); string(got) != "the state" {
			t.Fatalf("state %q", got)
		}
	}
	if err := arc.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("Close left %d files behind", len(left))
	}
}
