package main

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWrite_Reproducible: the same names and contents give the same bytes
// whatever the files' times and modes on disk; entries keep the order given,
// carry the one time, and only the executable bit of the mode.
func TestWrite_Reproducible(t *testing.T) {
	at := time.Unix(1700000000, 0).UTC()
	var out [2]bytes.Buffer
	for i := range out {
		dir := t.TempDir()
		for name, mode := range map[string]os.FileMode{"nops.exe": 0o750 - os.FileMode(i)*0o50, "LICENSE": 0o600 + os.FileMode(i)*0o44} {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, []byte("content of "+name), mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			mtime := time.Now().Add(time.Duration(i) * time.Hour)
			if err := os.Chtimes(path, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		if err := write(&out[i], dir, []string{"nops.exe", "LICENSE"}, at); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Fatal("two archives of the same files differ")
	}
	zr, err := zip.NewReader(bytes.NewReader(out[0].Bytes()), int64(out[0].Len()))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name string
		mode os.FileMode
	}{{"nops.exe", 0o755}, {"LICENSE", 0o644}}
	if len(zr.File) != len(want) {
		t.Fatalf("%d entries, want %d", len(zr.File), len(want))
	}
	for i, f := range zr.File {
		if f.Name != want[i].name || f.Mode().Perm() != want[i].mode || !f.Modified.Equal(at) {
			t.Errorf("entry %d: %s %v %v, want %s %v %v", i, f.Name, f.Mode().Perm(), f.Modified, want[i].name, want[i].mode, at)
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil || string(data) != "content of "+f.Name {
			t.Errorf("%s: %q, %v", f.Name, data, err)
		}
	}
}

// TestRun_RefusesBadInput: a missing file or argument fails and leaves no
// archive behind.
func TestRun_RefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.zip")
	for _, args := range [][]string{
		{"-o", out, "-mtime", "1", "-C", dir, "missing"},
		{"-o", out, "-C", dir, "x"},
		{"-o", out, "-mtime", "1"},
	} {
		if err := run(args); err == nil {
			t.Errorf("%v: no error", args)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: left %s behind", args, out)
		}
	}
}
