package structs

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestBatch_RoundTrip: what EncodeBatch writes, SplitBatch reads back,
// request by request and byte for byte, at every length up to the longest
// one-byte and past it.
func TestBatch_RoundTrip(t *testing.T) {
	parts := [][]byte{{byte(PauseRequestType)}, bytes.Repeat([]byte{7}, 127), bytes.Repeat([]byte{8}, 128), bytes.Repeat([]byte{9}, 70000)}
	buf := EncodeBatch(parts)
	if MessageType(buf[0]) != BatchRequestType {
		t.Fatalf("type byte %d", buf[0])
	}
	got, err := SplitBatch(buf[1:])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(parts) {
		t.Fatalf("%d requests, want %d", len(got), len(parts))
	}
	if most, err := SplitBatch(bytes.Repeat([]byte{1, byte(PauseRequestType)}, MaxBatchRequests)); err != nil || len(most) != MaxBatchRequests {
		t.Fatalf("a batch of %d requests: %d, %v", MaxBatchRequests, len(most), err)
	}
	for i := range parts {
		if !bytes.Equal(got[i], parts[i]) {
			t.Fatalf("request %d differs", i)
		}
	}
}

// TestBatch_Malformed: a body that does not read is an error that names
// the problem, never a panic.
func TestBatch_Malformed(t *testing.T) {
	good := EncodeBatch([][]byte{[]byte("ab")})[1:]
	for _, tc := range []struct {
		name, want string
		body       []byte
	}{
		{"empty", "no requests", nil},
		{"zero length", "length 0", []byte{0}},
		{"past the end", "length 3 with 2 bytes left", []byte{3, 'a', 'b'}},
		{"cut after a request", "bad length", append(good[:len(good):len(good)], 0x80)},
		{"varint overflow", "bad length", bytes.Repeat([]byte{0xff}, 11)},
		{"huge length", "with 1 bytes left", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 'a'}},
		{"too many requests", "more than 1024 requests", bytes.Repeat([]byte{1, byte(PauseRequestType)}, MaxBatchRequests+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SplitBatch(tc.body)
			if !errors.Is(err, ErrBadBatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrBadBatch naming %q", err, tc.want)
			}
		})
	}
}
