package agent_test

import (
	"archive/tar"
	"compress/gzip"
	"io"
)

// writeBomb writes a gzipped tar whose state.bin claims claim bytes and
// holds zeros bytes of zeros, cut there.
func writeBomb(w io.Writer, claim, zeros int64) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "state.bin", Mode: 0o600, Size: claim, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for n := int64(0); n < zeros; n += int64(len(chunk)) {
		if _, err := tw.Write(chunk); err != nil {
			return err
		}
	}
	return gz.Close()
}
