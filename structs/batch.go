package structs

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A batch entry is the BatchRequestType byte followed by its requests, each
// a whole entry of its own (type byte and msgpack body) behind its length
// as a uvarint. The leader packs the writes that arrive together into one
// batch entry, so that Raft stores, replicates and commits one entry for
// them rather than one each: on every server the log's per-entry work
// (encoding, the store's keys, the futures) is done once per batch.
//
// The requests share the entry's index. A batch holds no batch, every
// request in it is non-empty, and it holds at most MaxBatchRequests.

// EncodeBatch returns the batch entry of the given entries.
func EncodeBatch(entries [][]byte) []byte {
	n := 1
	for _, e := range entries {
		n += binary.MaxVarintLen64 + len(e)
	}
	buf := make([]byte, 1, n)
	buf[0] = byte(BatchRequestType)
	for _, e := range entries {
		buf = binary.AppendUvarint(buf, uint64(len(e)))
		buf = append(buf, e...)
	}
	return buf
}

// MaxBatchRequests bounds the requests of a batch entry, and so what
// applying one allocates per byte of it: the leader packs far fewer.
const MaxBatchRequests = 1024

// ErrBadBatch is a batch entry whose framing does not read.
var ErrBadBatch = errors.New("malformed batch entry")

// SplitBatch returns the requests of a batch entry's body (the entry after
// its type byte). The requests share body's bytes. A body that is empty, cut
// short, or holds an empty request is an error, never a panic.
func SplitBatch(body []byte) ([][]byte, error) {
	if len(body) == 0 {
		return nil, fmt.Errorf("%w: no requests", ErrBadBatch)
	}
	var out [][]byte
	for off := 0; off < len(body); {
		n, k := binary.Uvarint(body[off:])
		if k <= 0 {
			return nil, fmt.Errorf("%w: request %d: bad length at byte %d", ErrBadBatch, len(out), off+1)
		}
		off += k
		if n == 0 || n > uint64(len(body)-off) {
			return nil, fmt.Errorf("%w: request %d: length %d with %d bytes left", ErrBadBatch, len(out), n, len(body)-off)
		}
		if len(out) == MaxBatchRequests {
			return nil, fmt.Errorf("%w: more than %d requests", ErrBadBatch, MaxBatchRequests)
		}
		out = append(out, body[off:off+int(n)])
		off += int(n)
	}
	return out, nil
}
