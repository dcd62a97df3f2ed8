// Package snapshot reads and writes the operator's snapshot archive: a
// gzipped tar holding the Raft snapshot metadata (meta.json), the state
// (state.bin) and their SHA-256 sums (SHA256SUMS).
//
// Guarantee: Read returns an archive only when every file is present once
// and matches its checksum, its content stays within the size limit (it
// stops decompressing there) and its Raft index and term are in range; a
// truncated, altered, oversize or duplicated archive is an error wrapping
// ErrInvalid.
package snapshot

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

const (
	metaFile  = "meta.json"
	stateFile = "state.bin"
	sumsFile  = "SHA256SUMS"
)

// DefaultMaxSize bounds an archive's content, decompressed, when the
// caller sets no limit.
const DefaultMaxSize = 1 << 30

// maxIndex bounds a snapshot's Raft index and term: Raft restores a snapshot
// at an index after it, and an index near 2^64 would wrap.
const maxIndex = 1 << 62

// Limits of the snapshot archive files other than the state: both are a
// few hundred bytes (the metadata JSON, one SHA-256 line per file).
const (
	maxMetaSize = 64 << 10
	maxSumsSize = 4 << 10
	// tarFraming is the room left for the tar headers and padding on top
	// of the files' own sizes: a few 512-byte blocks per file.
	tarFraming = 16 << 10
)

// Sentinel errors of Read.
var (
	// ErrInvalid wraps every reason an archive is refused.
	ErrInvalid = errors.New("invalid snapshot archive")
)

// Limits bound what Read accepts.
type Limits struct {
	// MaxSize bounds the archive's content once decompressed: the state
	// and the small files together. 0 means DefaultMaxSize.
	MaxSize int64
	// TempDir, when set, is where the state is kept while it is checked
	// and restored, instead of in memory; Close removes it.
	TempDir string
}

// Archive is a verified snapshot archive.
type Archive struct {
	Meta  *raft.SnapshotMeta
	state []byte
	file  *os.File
	size  int64
}

// State returns a reader of the state snapshot, from its start.
func (a *Archive) State() io.Reader {
	if a.file != nil {
		return io.NewSectionReader(a.file, 0, a.size)
	}
	return bytes.NewReader(a.state)
}

// Size returns the size of the state snapshot in bytes.
func (a *Archive) Size() int { return int(a.size) }

// Close removes the state kept in a temporary file, if any.
func (a *Archive) Close() error {
	if a.file == nil {
		return nil
	}
	err := a.file.Close()
	if rerr := os.Remove(a.file.Name()); err == nil {
		err = rerr
	}
	a.file = nil
	return err
}

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

// Read reads and verifies an archive, in memory, within DefaultMaxSize.
func Read(r io.Reader) (*Archive, error) {
	return ReadLimited(r, Limits{})
}

// ReadLimited reads and verifies an archive within limits. It refuses an
// archive that expands past MaxSize (it stops reading there: a gzip bomb
// costs at most MaxSize of decompression), that holds a file twice, an
// unknown file or anything but regular files, whose checksums do not
// match, or whose index or term is out of range. A refusal wraps
// ErrInvalid.
func ReadLimited(r io.Reader, lim Limits) (_ *Archive, err error) {
	if lim.MaxSize <= 0 {
		lim.MaxSize = DefaultMaxSize
	}
	gz, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, fmt.Errorf("%w: not a snapshot archive (gzip): %w", ErrInvalid, err)
	}
	gz.Multistream(false)
	// The tar framing adds at most a few blocks per file on top of the
	// files themselves.
	content := &limitedReader{r: gz, n: lim.MaxSize + tarFraming}
	tr := tar.NewReader(content)
	arc := &Archive{}
	defer func() {
		if err != nil {
			_ = arc.Close()
		}
	}()
	small, stateSum, err := readEntries(tr, content, lim, arc)
	if err != nil {
		return nil, err
	}
	if err := checkSums(small, stateSum); err != nil {
		return nil, err
	}
	var meta raft.SnapshotMeta
	if err := json.Unmarshal(small[metaFile], &meta); err != nil {
		return nil, fmt.Errorf("%w: decode %s: %w", ErrInvalid, metaFile, err)
	}
	if err := checkMeta(&meta); err != nil {
		return nil, err
	}
	meta.Size = arc.size
	arc.Meta = &meta
	return arc, nil
}

// readEntries reads the archive's files: the small ones into memory, keyed
// by name, and the state into arc (in memory or in a file under
// lim.TempDir). It returns the small files and the state's SHA-256, and
// refuses a file twice, an unknown or oversized file, or a missing one.
func readEntries(tr *tar.Reader, content *limitedReader, lim Limits, arc *Archive) (map[string][]byte, []byte, error) {
	small := map[string][]byte{}
	var stateSum []byte
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, archiveError(content, lim, fmt.Errorf("read archive: %w", err))
		}
		if seen[h.Name] {
			return nil, nil, fmt.Errorf("%w: %s appears twice in the archive", ErrInvalid, h.Name)
		}
		seen[h.Name] = true
		if err := checkEntry(h, lim); err != nil {
			return nil, nil, err
		}
		if h.Name != stateFile {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, nil, archiveError(content, lim, fmt.Errorf("read %s: %w", h.Name, err))
			}
			small[h.Name] = b
			continue
		}
		if stateSum, err = readState(tr, content, lim, arc); err != nil {
			return nil, nil, err
		}
	}
	for _, name := range []string{metaFile, stateFile, sumsFile} {
		if !seen[name] {
			return nil, nil, fmt.Errorf("%w: archive has no %s", ErrInvalid, name)
		}
	}
	return small, stateSum, nil
}

// checkEntry refuses an entry that is not a regular file, not one of the
// archive's files, or larger than that file may be.
func checkEntry(h *tar.Header, lim Limits) error {
	if h.Typeflag != tar.TypeReg {
		return fmt.Errorf("%w: %s is not a regular file", ErrInvalid, h.Name)
	}
	limit := int64(0)
	switch h.Name {
	case metaFile:
		limit = maxMetaSize
	case sumsFile:
		limit = maxSumsSize
	case stateFile:
		limit = lim.MaxSize
	default:
		return fmt.Errorf("%w: unexpected file %q in archive", ErrInvalid, h.Name)
	}
	if h.Size < 0 || h.Size > limit {
		return fmt.Errorf("%w: %s claims %d bytes, over the limit of %d", ErrInvalid, h.Name, h.Size, limit)
	}
	return nil
}

// readState reads the state file into arc, in a file under lim.TempDir
// when set, and returns its SHA-256.
func readState(tr *tar.Reader, content *limitedReader, lim Limits, arc *Archive) ([]byte, error) {
	sum := sha256.New()
	if lim.TempDir != "" {
		f, err := os.CreateTemp(lim.TempDir, "snapshot-restore-*")
		if err != nil {
			return nil, fmt.Errorf("keep snapshot state: %w", err)
		}
		arc.file = f
		n, err := io.Copy(io.MultiWriter(f, sum), tr)
		if err != nil {
			return nil, archiveError(content, lim, fmt.Errorf("read %s: %w", stateFile, err))
		}
		arc.size = n
	} else {
		b, err := io.ReadAll(io.TeeReader(tr, sum))
		if err != nil {
			return nil, archiveError(content, lim, fmt.Errorf("read %s: %w", stateFile, err))
		}
		arc.state, arc.size = b, int64(len(b))
	}
	return sum.Sum(nil), nil
}

// checkSums compares the metadata's and the state's SHA-256 with the
// archive's SHA256SUMS.
func checkSums(small map[string][]byte, stateSum []byte) error {
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(small[sumsFile])), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			return fmt.Errorf("%w: malformed %s line %q", ErrInvalid, sumsFile, line)
		}
		want[name] = sum
	}
	metaSum := sha256.Sum256(small[metaFile])
	for name, got := range map[string][]byte{metaFile: metaSum[:], stateFile: stateSum} {
		if hex.EncodeToString(got) != want[name] {
			return fmt.Errorf("%w: checksum mismatch for %s: archive is corrupt", ErrInvalid, name)
		}
	}
	return nil
}

// checkMeta refuses Raft metadata that Raft cannot restore safely.
func checkMeta(m *raft.SnapshotMeta) error {
	if m.Index == 0 || m.Index > maxIndex {
		return fmt.Errorf("%w: snapshot index %d is out of range (1 to %d)", ErrInvalid, m.Index, uint64(maxIndex))
	}
	if m.Term == 0 || m.Term > maxIndex {
		return fmt.Errorf("%w: snapshot term %d is out of range (1 to %d)", ErrInvalid, m.Term, uint64(maxIndex))
	}
	if m.Version < raft.SnapshotVersionMin || m.Version > raft.SnapshotVersionMax {
		return fmt.Errorf("%w: snapshot version %d is not supported (%d to %d)", ErrInvalid, m.Version, raft.SnapshotVersionMin, raft.SnapshotVersionMax)
	}
	return nil
}

// archiveError names the limit when reading stopped there.
func archiveError(content *limitedReader, lim Limits, err error) error {
	if content.n <= 0 {
		return fmt.Errorf("%w: archive expands past the limit of %d bytes", ErrInvalid, lim.MaxSize)
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// limitedReader is io.LimitedReader that reports going past its limit as
// an error rather than an end of file, so that a cut archive and an
// oversize one are told apart.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var errTooLarge = errors.New("archive too large")
