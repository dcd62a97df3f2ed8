// Package forward is the forwarding protocol: the one transport of the
// requests a follower forwards to the leader (rpcForward on the RPC port):
// writes, consistent reads, snapshot saves and restores, and reads whose
// token the follower does not know yet. Server is the leader's end, Client
// the follower's. A forwarded request is typed: (method, URI, host, headers
// with the token, body) in, (status, headers, body) out. The follower only
// forwards; the leader runs the whole middleware once — the guard
// (methods, limits, content type, origin against the host the client
// addressed), the ACL check with the forwarded token, the route — with the
// handler it is given, the same as its HTTP port's, and the follower
// copies back the status, headers and body. (The RPC port's internal HTTP
// server remains for calls a server makes to one peer on its own behalf:
// status, Raft stats, a monitor stream of a named server; nothing is
// forwarded over it.)
//
// A connection opens with the protocol byte, read inside TLS when RPC TLS
// is on; the leader answers with one byte, Version, so that a follower
// learns before it sends a request whether the peer speaks the protocol (a
// peer that does not closes the connection, which counts as a failed
// dial). Then each side sends frames: a uint32 big-endian length followed
// by that many bytes of msgpack (structs.NewMsgpackHandle), a Request from
// the follower, a Response from the leader. Requests are multiplexed: each
// carries an ID its answer repeats, and answers come in the order the
// leader finishes them.
//
// Large bodies are streamed in bounded frames, not sent in one: a snapshot
// (up to snapshot_max_size, 1 GiB by default) goes with Stream set, alone
// on a connection of its own, its body in frames of at most Chunk bytes
// (More set on every frame but the last), and its answer in frames of at
// most Chunk bytes the same way. Every frame stays under MaxFrame or
// MaxAnswerFrame, so no frame limit is raised for one route; the leader
// reads an upload only as fast as the route consumes it, and a caller the
// leader refuses is answered before the rest of its upload is read. Any
// other request's body is at most MaxBody and goes in one frame; its
// answer at most MaxAnswer.
//
// A frame with Keepalive set asks the leader to show it is alive: from
// then on, every KeepaliveInterval until the connection closes, the leader
// sends a keepalive frame (a Response with Keepalive set and ID 0), however
// long its requests run. The Client opens every connection with such a
// frame (one with no method and ID 0, which starts no request), and counts
// a connection on which calls wait and nothing arrived, not even a
// keepalive, for SilenceLimit as dead: a leader cut off by a partition
// whose packets are dropped fails the calls sent to it within seconds, not
// at CallLimit. The servers of a cluster run one version (a leader that
// predates keepalives would drop the opening frame as the chunk of no
// body, and its silent connections would fail their calls); a peer that
// never asks gets no keepalive.
//
// Guarantees:
//   - A frame over its limit closes the connection before a byte of it is
//     buffered; a frame that does not decode closes it too. The leader runs
//     at most MaxInFlight requests of a connection at once and stops
//     reading it while they run; a connection idle for the idle timeout is
//     closed, and a frame must arrive whole within the read timeout.
//   - A request runs for at most CallLimit on the leader (the stream
//     timeout for a streamed one), as long as the follower waits for it; a
//     follower whose caller gives up sends a cancel frame, which cancels
//     the request's context.
//   - Server.Shutdown drains the connections: the leader stops reading
//     frames and answers the requests it read, within the caller's
//     deadline; a streamed body cut by the drain ends its request with an
//     error.
//   - The Client tells its caller whether the leader may have received a
//     request: never after a failed dial, a frame of which no byte was
//     written, or a connection that retired first; always once a byte of
//     the frame went out. A connection lost after that, or silent for
//     SilenceLimit while calls wait on it, fails its calls as sent: they
//     may have been applied. A long request (a handler that takes its
//     time, a snapshot stream) is never cut for silence: its keepalives
//     arrive.
package forward

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

const (
	// Version is the byte the leader opens a connection with.
	Version byte = 0x01
	// MaxBody is the largest body a request sends in one frame; MaxHeaderBytes
	// bounds its headers (keys and values). They are the HTTP port's limits,
	// which package agenthttp checks at compile time.
	MaxBody        = 1 << 20
	MaxHeaderBytes = 64 << 10
	// MaxInFlight bounds the requests of one connection the leader runs at
	// once.
	MaxInFlight = 64
	// headerAllowance is the room a frame has beyond its body: the headers
	// (bounded like an HTTP request's), the method, the URI and the
	// encoding.
	headerAllowance = MaxHeaderBytes + 16<<10
	// MaxFrame bounds a request frame: the largest body sent in one frame
	// (MaxBody; a streamed body comes in chunks of Chunk) and its headers.
	MaxFrame = MaxBody + headerAllowance
	// Chunk is the most body bytes a frame of a streamed request or answer
	// carries.
	Chunk = 256 << 10
	// bodyQueue is how many chunks of a streamed body the leader holds for
	// its route before it stops reading the connection.
	bodyQueue = 4
	// MaxAnswer bounds the body of an answer; MaxAnswerFrame the frame that
	// carries it.
	MaxAnswer      = 16 << 20
	MaxAnswerFrame = MaxAnswer + headerAllowance
	// poolSize is how many connections a follower keeps to the leader: two,
	// so that one large frame does not hold every call behind it.
	poolSize = 2
	// CallLimit bounds a forwarded request, as long as the longest handler
	// allows itself; a streamed one has the server's stream timeout.
	CallLimit = time.Minute
	// cancelTimeout bounds the write of a cancel frame.
	cancelTimeout = 5 * time.Second
	// DialTimeout bounds the dial and the leader's version byte.
	DialTimeout = 10 * time.Second
	// KeepaliveInterval is how often the leader sends a keepalive frame on
	// a connection whose follower asked for them.
	KeepaliveInterval = time.Second
	// SilenceLimit is how long a follower waits on a connection from which
	// nothing arrives, not even a keepalive, while calls wait on it, before
	// it counts the connection as dead.
	SilenceLimit = 4 * time.Second
)

// Request is a forwarded request: Header is the client's, with the
// follower's forwarded header set; Host is the host the client addressed,
// which the leader's guard checks an Origin against.
//
// A frame with Cancel set is no request: it cancels the context of the
// running request of its ID (an ID that runs no request is ignored). A
// frame with no Method is the next chunk of the body of the running
// request of its ID, which had More to come (dropped when there is no such
// body). Stream asks for the answer in chunks; Keepalive (on any frame)
// for keepalive frames on the connection from then on.
type Request struct {
	ID        uint64      `codec:"id"`
	Cancel    bool        `codec:"cancel,omitempty"`
	Method    string      `codec:"method"`
	URI       string      `codec:"uri"`
	Host      string      `codec:"host"`
	Header    http.Header `codec:"header"`
	Body      []byte      `codec:"body"`
	More      bool        `codec:"more,omitempty"`
	Stream    bool        `codec:"stream,omitempty"`
	Keepalive bool        `codec:"keepalive,omitempty"`

	// Rest is the body after this frame's, on the follower, and Interrupt
	// ends a read of it that blocks. Neither is sent.
	Rest      io.Reader `codec:"-"`
	Interrupt func()    `codec:"-"`
}

// Response is the leader's answer to the request of the same ID. Abort is
// an answer the handler cut (http.ErrAbortHandler): the client sees a
// broken answer. More says the body goes on in the next frames of the ID,
// which carry only Body, More and Abort. A frame with Keepalive set (and
// ID 0) is no answer: the leader shows it is alive.
type Response struct {
	ID        uint64      `codec:"id"`
	Status    int         `codec:"status"`
	Header    http.Header `codec:"header"`
	Body      []byte      `codec:"body"`
	Abort     bool        `codec:"abort"`
	More      bool        `codec:"more,omitempty"`
	Keepalive bool        `codec:"keepalive,omitempty"`

	// BodyStream reads the whole body of a streamed answer, on the
	// follower; it is not sent.
	BodyStream io.ReadCloser `codec:"-"`
}

// errFrameTooLarge is a frame whose length is over the limit.
var errFrameTooLarge = errors.New("frame over the size limit")

// frameWriter writes the frames of one side of a connection; its mutex
// serializes them.
type frameWriter struct {
	mu    sync.Mutex
	conn  net.Conn
	enc   *codec.Encoder
	body  []byte
	frame []byte
}

func newFrameWriter(conn net.Conn, h *codec.MsgpackHandle) *frameWriter {
	return &frameWriter{conn: conn, enc: codec.NewEncoderBytes(nil, h)}
}

// errWriteFailed marks an error of the connection's Write: the
// connection is unusable (a TLS connection keeps a failed write's error),
// unlike a frame refused before a byte was written.
var errWriteFailed = errors.New("write failed")

// write sends one frame, the length then the msgpack of v, within
// deadline (none when zero). n is how many bytes of the frame went out.
// When ctx is done once the writer is free, nothing is written and its
// cause is returned. An error of the connection wraps errWriteFailed.
func (w *frameWriter) write(ctx context.Context, v any, limit int, deadline time.Time) (n int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	body := w.body[:0]
	w.enc.ResetBytes(&body)
	if err := w.enc.Encode(v); err != nil {
		return 0, fmt.Errorf("encode frame: %w", err)
	}
	if len(body) > limit {
		return 0, fmt.Errorf("%w: %d bytes, the limit is %d", errFrameTooLarge, len(body), limit)
	}
	frame := binary.BigEndian.AppendUint32(w.frame[:0], uint32(len(body)))
	frame = append(frame, body...)
	// Keep no large frame's buffers for the connection's life.
	if cap(body) <= 64<<10 {
		w.body, w.frame = body, frame
	} else {
		w.body, w.frame = nil, nil
	}
	_ = w.conn.SetWriteDeadline(deadline)
	n, err = w.conn.Write(frame)
	if err != nil {
		err = fmt.Errorf("%w: %w", errWriteFailed, err)
	}
	return n, err
}

// readFrame reads one frame of at most limit bytes into a new buffer. The
// length is checked before anything is allocated for the frame.
func readFrame(r *bufio.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", errFrameTooLarge, n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// ReadChunk fills buf from r. end reports that r ended (io.EOF); any other
// error, io.ErrUnexpectedEOF of a client cut mid-body included, is the
// body's failure, never its end.
func ReadChunk(r io.Reader, buf []byte) (n int, end bool, err error) {
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, true, nil
		}
		if err != nil {
			return n, false, err
		}
	}
	return n, false, nil
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
