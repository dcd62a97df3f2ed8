// Command zipdet writes a zip archive that depends only on the files' names,
// contents and executable bits: entries in the order given, every time set
// to one instant, fixed modes (0755 for executables, 0644 otherwise), no
// extra fields. The release (scripts/release.sh) packs the Windows binary
// with it, so that building a release twice gives the same bytes.
//
// usage: zipdet -o out.zip -mtime UNIX_SECONDS -C dir file...
package main

import (
	"archive/zip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "zipdet: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("zipdet", flag.ContinueOnError)
	out := fs.String("o", "", "the zip file to write")
	mtime := fs.Int64("mtime", -1, "the time of every entry, in Unix seconds (SOURCE_DATE_EPOCH)")
	dir := fs.String("C", ".", "the directory the file names are relative to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *mtime < 0 || fs.NArg() == 0 {
		return errors.New("usage: zipdet -o out.zip -mtime UNIX_SECONDS [-C dir] FILE [FILE]")
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := write(f, *dir, fs.Args(), time.Unix(*mtime, 0).UTC()); err != nil {
		_ = f.Close()
		_ = os.Remove(*out)
		return err
	}
	return f.Close()
}

// write packs each file of dir named in names into w.
func write(w io.Writer, dir string, names []string, at time.Time) error {
	zw := zip.NewWriter(w)
	for _, name := range names {
		if err := add(zw, filepath.Join(dir, name), filepath.ToSlash(name), at); err != nil {
			return err
		}
	}
	return zw.Close()
}

func add(zw *zip.Writer, path, name string, at time.Time) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: at}
	mode := os.FileMode(0o644)
	if info.Mode()&0o111 != 0 {
		mode = 0o755
	}
	h.SetMode(mode)
	dst, err := zw.CreateHeader(h)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
