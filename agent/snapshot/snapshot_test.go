package snapshot

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func archive(t *testing.T, state string) []byte {
	t.Helper()
	var buf bytes.Buffer
	meta := &raft.SnapshotMeta{ID: "2-42-1", Index: 42, Term: 2}
	if err := Write(&buf, meta, strings.NewReader(state)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRead_ReturnsWhatWriteWrote(t *testing.T) {
	arc, err := Read(bytes.NewReader(archive(t, "the state")))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(arc.State())
	if string(got) != "the state" || arc.Meta.Index != 42 || arc.Meta.Term != 2 || arc.Size() != 9 || arc.Meta.Size != 9 {
		t.Fatalf("round trip: %q %+v", got, arc.Meta)
	}
}

// TestReadRefusesDamage: a truncated, altered or foreign archive is an
// error, never a partial state.
func TestReadRefusesDamage(t *testing.T) {
	good := archive(t, strings.Repeat("state ", 1000))
	// Alter the state inside the gzip stream: unzip, flip a byte of the
	// tar payload, zip again.
	zr, err := gzip.NewReader(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(zr)
	i := bytes.Index(raw, []byte("state state"))
	raw[i] = 'S'
	var altered bytes.Buffer
	zw := gzip.NewWriter(&altered)
	_, _ = zw.Write(raw)
	_ = zw.Close()

	cases := map[string]struct {
		data []byte
		want string
	}{
		"truncated":   {good[:len(good)/2], "read"},
		"altered":     {altered.Bytes(), "checksum mismatch for state.bin"},
		"not gzip":    {[]byte("hello"), "not a snapshot archive"},
		"empty input": {nil, "not a snapshot archive"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
