// Package snapshot reads and writes the operator's snapshot archive: a
// gzipped tar holding the Raft snapshot metadata (meta.json), the state
// (state.bin) and their SHA-256 sums (SHA256SUMS).
//
// Guarantee: Read returns an archive only when every file is present and
// matches its checksum; a truncated or altered archive is an error.
package snapshot

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

const (
	metaFile  = "meta.json"
	stateFile = "state.bin"
	sumsFile  = "SHA256SUMS"
)

// Archive is a verified snapshot archive.
type Archive struct {
	Meta  *raft.SnapshotMeta
	state []byte
}

// State returns a reader of the state snapshot.
func (a *Archive) State() io.Reader { return bytes.NewReader(a.state) }

// Size returns the size of the state snapshot in bytes.
func (a *Archive) Size() int { return len(a.state) }

// Write writes an archive of meta and the state read from r.
func Write(w io.Writer, meta *raft.SnapshotMeta, r io.Reader) error {
	state, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	metaJSON, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return fmt.Errorf("encode snapshot meta: %w", err)
	}
	var sums strings.Builder
	for _, f := range []struct {
		name string
		b    []byte
	}{{metaFile, metaJSON}, {stateFile, state}} {
		h := sha256.Sum256(f.b)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(h[:]), f.name)
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	now := time.Now()
	for _, f := range []struct {
		name string
		b    []byte
	}{{metaFile, metaJSON}, {stateFile, state}, {sumsFile, []byte(sums.String())}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.b)), ModTime: now}); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
		if _, err := tw.Write(f.b); err != nil {
			return fmt.Errorf("write archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return gz.Close()
}

// Read reads and verifies an archive.
func Read(r io.Reader) (*Archive, error) {
	gz, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, fmt.Errorf("not a snapshot archive (gzip): %w", err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read archive: %w", err)
		}
		switch h.Name {
		case metaFile, stateFile, sumsFile:
		default:
			return nil, fmt.Errorf("unexpected file %q in archive", h.Name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", h.Name, err)
		}
		files[h.Name] = b
	}
	for _, name := range []string{metaFile, stateFile, sumsFile} {
		if _, ok := files[name]; !ok {
			return nil, fmt.Errorf("archive has no %s", name)
		}
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(files[sumsFile])), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			return nil, fmt.Errorf("malformed %s line %q", sumsFile, line)
		}
		want[name] = sum
	}
	for _, name := range []string{metaFile, stateFile} {
		h := sha256.Sum256(files[name])
		if got := hex.EncodeToString(h[:]); got != want[name] {
			return nil, fmt.Errorf("checksum mismatch for %s: archive is corrupt", name)
		}
	}
	var meta raft.SnapshotMeta
	if err := json.Unmarshal(files[metaFile], &meta); err != nil {
		return nil, fmt.Errorf("decode %s: %w", metaFile, err)
	}
	meta.Size = int64(len(files[stateFile]))
	return &Archive{Meta: &meta, state: files[stateFile]}, nil
}
