package agenthttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"golang.org/x/net/http/httpguts"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
)

// The forwarding protocol is the one transport of requests a follower
// forwards to the leader (rpcForward on the RPC port): writes, consistent
// reads, snapshot saves and restores, and reads whose token the follower
// does not know yet. A forwarded request is typed: (method, URI, host,
// headers with the token, body) in, (status, headers, body) out. The
// follower only forwards; the leader runs the whole middleware once — the
// guard (methods, limits, content type, origin against the host the client
// addressed), the ACL check with the forwarded token, the route — with the
// same handler as its HTTP port, and the follower copies back the status,
// headers and body. (The RPC port's internal HTTP server remains for calls
// a server makes to one peer on its own behalf: status, Raft stats, a
// monitor stream of a named server; nothing is forwarded over it.)
//
// A connection opens with the protocol byte, read inside TLS when RPC TLS
// is on; the leader answers with one byte, rpcForwardVersion, so that a
// follower learns before it sends a request whether the peer speaks the
// protocol (a peer that does not closes the connection, which counts as a
// failed dial). Then each side sends frames: a uint32 big-endian length
// followed by that many bytes of msgpack (structs.NewMsgpackHandle), a
// fwdRequest from the follower, a fwdResponse from the leader. Requests
// are multiplexed: each carries an ID its answer repeats, and answers come
// in the order the leader finishes them.
//
// Large bodies are streamed in bounded frames, not sent in one: a snapshot
// (up to snapshot_max_size, 1 GiB by default) goes with Stream set, alone
// on a connection of its own, its body in frames of at most fwdChunk bytes
// (More set on every frame but the last), and its answer in frames of at
// most fwdChunk bytes the same way. Every frame stays under fwdMaxFrame or
// fwdMaxAnswerFrame, so no frame limit is raised for one route; the
// leader reads an upload only as fast as the route consumes it, and a
// caller the leader refuses is answered before the rest of its upload is
// read. Any other request's body is at most maxBody and goes in one frame;
// its answer at most fwdMaxAnswer.
//
// Guarantees:
//   - A frame over its limit closes the connection before a byte of it is
//     buffered; a frame that does not decode closes it too. The leader runs
//     at most fwdMaxInFlight requests of a connection at once and stops
//     reading it while they run; a connection idle for HTTPIdleTimeout is
//     closed, and a frame must arrive whole within HTTPReadTimeout.
//   - A request runs for at most fwdCallLimit on the leader
//     (snapshotTransferTimeout for a streamed one), as long as the follower
//     waits for it; a follower whose caller gives up sends a cancel frame,
//     which cancels the request's context.
//   - Server.Shutdown drains the connections with the HTTP servers: the
//     leader stops reading frames and answers the requests it read, within
//     shutdownGrace, before raft stops; a streamed body cut by the drain
//     ends its request with an error.
//   - The follower retries only what the leader cannot have applied: a
//     failed dial, a frame of which no byte was written, or a not-leader
//     answer (not for an upload whose rest was sent: that is answered 503,
//     not applied). A connection lost after the frame went out answers 502,
//     possibly applied. With no leader, a request waits up to leaderWait,
//     then answers 503.
const (
	rpcForwardVersion byte = 0x01
	// fwdMaxInFlight bounds the requests of one connection the leader runs
	// at once.
	fwdMaxInFlight = 64
	// fwdHeaderAllowance is the room a frame has beyond its body: the
	// headers (bounded like an HTTP request's), the method, the URI and the
	// encoding.
	fwdHeaderAllowance = maxHeaderBytes + 16<<10
	// fwdMaxFrame bounds a request frame: the largest body sent in one
	// frame (maxBody; a streamed body comes in chunks of fwdChunk) and its
	// headers.
	fwdMaxFrame = maxBody + fwdHeaderAllowance
	// fwdChunk is the most body bytes a frame of a streamed request or
	// answer carries.
	fwdChunk = 256 << 10
	// fwdBodyQueue is how many chunks of a streamed body the leader holds
	// for its route before it stops reading the connection.
	fwdBodyQueue = 4
	// fwdMaxAnswer bounds the body of an answer; fwdMaxAnswerFrame the
	// frame that carries it.
	fwdMaxAnswer      = 16 << 20
	fwdMaxAnswerFrame = fwdMaxAnswer + fwdHeaderAllowance
	// fwdPoolSize is how many connections a follower keeps to the leader:
	// two, so that one large frame does not hold every call behind it.
	fwdPoolSize = 2
	// fwdCallLimit bounds a forwarded request, as long as the longest
	// handler allows itself; a streamed one has snapshotTransferTimeout.
	fwdCallLimit = time.Minute
	// fwdCancelTimeout bounds the write of a cancel frame.
	fwdCancelTimeout = 5 * time.Second
	// fwdDialTimeout bounds the dial and the leader's version byte.
	fwdDialTimeout = rpcHandshakeTimeout
)

// fwdRequest is a forwarded request: Header is the client's, with
// headerForwarded set to the follower's node ID; Host is the host the
// client addressed, which the leader's guard checks an Origin against.
//
// A frame with Cancel set is no request: it cancels the context of the
// running request of its ID (an ID that runs no request is ignored). A
// frame with no Method is the next chunk of the body of the running
// request of its ID, which had More to come (dropped when there is no such
// body). Stream asks for the answer in chunks.
type fwdRequest struct {
	ID     uint64      `codec:"id"`
	Cancel bool        `codec:"cancel,omitempty"`
	Method string      `codec:"method"`
	URI    string      `codec:"uri"`
	Host   string      `codec:"host"`
	Header http.Header `codec:"header"`
	Body   []byte      `codec:"body"`
	More   bool        `codec:"more,omitempty"`
	Stream bool        `codec:"stream,omitempty"`

	// rest is the body after this frame's, on the follower, and interrupt
	// ends a read of it that blocks.
	rest      io.Reader `codec:"-"`
	interrupt func()    `codec:"-"`
}

// fwdResponse is the leader's answer to the request of the same ID. Abort
// is an answer the handler cut (http.ErrAbortHandler): the client sees a
// broken answer. More says the body goes on in the next frames of the ID,
// which carry only Body, More and Abort.
type fwdResponse struct {
	ID     uint64      `codec:"id"`
	Status int         `codec:"status"`
	Header http.Header `codec:"header"`
	Body   []byte      `codec:"body"`
	Abort  bool        `codec:"abort"`
	More   bool        `codec:"more,omitempty"`

	// stream reads the whole body of a streamed answer, on the follower.
	stream io.ReadCloser `codec:"-"`
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
// When ctx (may be nil) is done once the writer is free, nothing is
// written and its cause is returned. An error of the connection wraps
// errWriteFailed.
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

// fwdServer serves the forwarding protocol on the leader (and answers
// not-leader on any other server, as the handler does).
type fwdServer struct {
	s       Server
	api     *httpAPI
	handler http.Handler
	logger  hclog.Logger
	handle  *codec.MsgpackHandle
	// running counts the requests being answered, peak its high-water
	// mark (for tests).
	running, peak atomic.Int64
	// idle is how long a connection may wait for its next frame with no
	// request running; read how long a frame may take to arrive once it
	// started; write how long an answer may take to go out.
	idle, read, write time.Duration

	// mu guards conns, the connections being served, and quit, closed
	// when Shutdown starts the drain; readers counts the read loops that
	// still run.
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	quit     chan struct{}
	quitOnce sync.Once
	readers  atomic.Int64
}

func newFwdServer(api *httpAPI, handler http.Handler, logger hclog.Logger) *fwdServer {
	s := api.s
	return &fwdServer{
		s: s, api: api, handler: handler, logger: logger,
		handle: structs.NewMsgpackHandle(),
		idle:   orDefault(s.Config().HTTPIdleTimeout, config.DefaultHTTPIdleTimeout),
		read:   orDefault(s.Config().HTTPReadTimeout, config.DefaultHTTPReadTimeout),
		write:  orDefault(s.Config().HTTPWriteTimeout, config.DefaultHTTPWriteTimeout),
		conns:  map[net.Conn]struct{}{},
		quit:   make(chan struct{}),
	}
}

// serve accepts the forwarding connections of the mux until it closes.
// Every goroutine it starts is counted in s.Goroutines().
func (f *fwdServer) serve(ln net.Listener) {
	defer f.s.Goroutines().Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		f.s.Goroutines().Add(1)
		go f.serveConn(conn)
	}
}

// Shutdown drains the forwarding connections, as http.Server.Shutdown
// drains HTTP ones: every connection stops reading frames (a frame cut
// mid-way is not run), the requests already read run and their answers go
// out, then the connections close. Past ctx's deadline the connections
// close at once, and the error is ctx's. It is safe to call more than
// once, and on a nil fwdServer.
func (f *fwdServer) Shutdown(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	f.quitOnce.Do(func() { close(f.quit) })
	for conn := range f.conns {
		// Wakes the read loop waiting for a frame.
		_ = conn.SetReadDeadline(time.Now())
	}
	f.mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for f.readers.Load() > 0 || f.running.Load() > 0 {
		select {
		case <-ctx.Done():
			f.mu.Lock()
			for conn := range f.conns {
				conn.Close()
			}
			f.mu.Unlock()
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// draining reports whether Shutdown started.
func (f *fwdServer) draining() bool {
	select {
	case <-f.quit:
		return true
	default:
		return false
	}
}

// fwdRunning holds the running requests of a connection, by ID.
type fwdRunning struct {
	mu      sync.Mutex
	entries map[uint64]*fwdEntry
}

// fwdEntry is one running request: its cancel, and its body while more of
// it is to come.
type fwdEntry struct {
	cancel context.CancelFunc
	body   *fwdBody
}

// fwdConnState is what the read loop of one connection shares with the
// requests it started.
type fwdConnState struct {
	conn    net.Conn
	remote  net.Addr
	ctx     context.Context
	out     *frameWriter
	slots   chan struct{}
	reqs    *fwdRunning
	running sync.WaitGroup
	// readEnded is closed when the read loop returns: a body waiting for
	// its next chunk ends with an error.
	readEnded chan struct{}
}

// serveConn runs the requests of one connection: it reads a frame only
// when fewer than fwdMaxInFlight of them run, so a peer that sends faster
// than the leader answers is held back by TCP. Each request runs for at
// most fwdCallLimit, and a cancel frame of its ID ends it sooner. When the
// drain starts, it stops reading and closes the connection once its
// requests are answered; when the peer goes, it cancels them.
func (f *fwdServer) serveConn(conn net.Conn) {
	defer f.s.Goroutines().Done()
	f.readers.Add(1)
	readerDone := sync.OnceFunc(func() { f.readers.Add(-1) })
	defer readerDone()
	f.mu.Lock()
	if f.draining() {
		f.mu.Unlock()
		conn.Close()
		return
	}
	f.conns[conn] = struct{}{}
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(f.s.RequestContext())
	c := &fwdConnState{
		conn: conn, remote: conn.RemoteAddr(), ctx: ctx,
		out:       newFrameWriter(conn, f.handle),
		slots:     make(chan struct{}, fwdMaxInFlight),
		reqs:      &fwdRunning{entries: map[uint64]*fwdEntry{}},
		readEnded: make(chan struct{}),
	}
	drained := false
	defer func() {
		close(c.readEnded)
		if drained {
			// The requests read run to their answers; the connection is
			// cut only when Shutdown's deadline passes.
			readerDone()
			c.running.Wait()
			cancel()
			conn.Close()
		} else {
			cancel()
			conn.Close()
			c.running.Wait()
		}
		f.mu.Lock()
		delete(f.conns, conn)
		f.mu.Unlock()
	}()
	if _, err := conn.Write([]byte{rpcForwardVersion}); err != nil {
		f.logger.Debug("forwarding connection lost before its first frame", "remote", c.remote, "error", err)
		return
	}
	drained = f.readLoop(c)
}

// readLoop reads the frames of a connection and starts their requests
// until the connection fails or the drain starts; it reports the latter.
func (f *fwdServer) readLoop(c *fwdConnState) (drained bool) {
	br := bufio.NewReaderSize(c.conn, 32<<10)
	dec := codec.NewDecoderBytes(nil, f.handle)
	for {
		select {
		case c.slots <- struct{}{}:
		case <-f.quit:
			return true
		}
		if f.draining() {
			return true
		}
		req, err := f.nextFrame(c, br, dec)
		if err != nil {
			return f.draining()
		}
		switch {
		case req.Cancel:
			c.reqs.cancel(req.ID)
			<-c.slots
		case req.Method == "":
			// The next chunk of a body: a frame with no method starts no
			// request.
			ok := c.reqs.feed(req, f.quit)
			<-c.slots
			if !ok {
				return true
			}
		default:
			f.start(c, req)
		}
	}
}

// nextFrame waits for the next frame (up to the idle timeout when no
// request runs, for as long as one does) and decodes it. An error ends the
// connection; it is logged when it is the peer's fault.
func (f *fwdServer) nextFrame(c *fwdConnState, br *bufio.Reader, dec *codec.Decoder) (*fwdRequest, error) {
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(f.idle))
		if f.draining() {
			return nil, errClosed
		}
		_, err := br.Peek(1)
		if err == nil {
			break
		}
		if f.draining() {
			return nil, errClosed
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && len(c.slots) > 1 {
			continue
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !(errors.As(err, &ne) && ne.Timeout()) {
			f.logger.Debug("forwarding connection lost", "remote", c.remote, "error", err)
		}
		return nil, err
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(f.read))
	// Each frame has its own buffer: the request's body may point into it
	// while the next frame is read.
	buf, err := readFrame(br, fwdMaxFrame)
	if err != nil {
		if !f.draining() {
			// A frame cut by the drain is not run: its caller sees a
			// connection lost after sending.
			f.logger.Warn("closed a forwarding connection: bad frame", "remote", c.remote, "error", err)
		}
		return nil, err
	}
	req := &fwdRequest{}
	dec.ResetBytes(buf)
	if err := dec.Decode(req); err != nil {
		f.logger.Warn("closed a forwarding connection: bad frame", "remote", c.remote, "error", err)
		return nil, err
	}
	return req, nil
}

// start runs one request in its own goroutine, which sends its answer and
// frees its slot.
func (f *fwdServer) start(c *fwdConnState, req *fwdRequest) {
	limit := fwdCallLimit
	if req.Stream {
		limit = snapshotTransferTimeout
	}
	rctx, rcancel := context.WithTimeout(c.ctx, limit)
	// A peer that reuses the ID of a running request can cancel (or feed)
	// only the last one; each still ends within its limit.
	mine := &fwdEntry{cancel: rcancel}
	var body *fwdBody
	if req.More {
		body = &fwdBody{chunks: make(chan []byte, fwdBodyQueue), ended: c.readEnded, ctx: rctx, done: make(chan struct{})}
		mine.body = body
	}
	c.reqs.add(req.ID, mine)
	c.running.Add(1)
	for n, peak := f.running.Add(1), f.peak.Load(); n > peak && !f.peak.CompareAndSwap(peak, n); peak = f.peak.Load() {
	}
	go func() {
		defer c.running.Done()
		defer func() { <-c.slots }()
		defer f.running.Add(-1)
		send := func(resp *fwdResponse) error {
			_, err := c.out.write(context.Background(), resp, fwdMaxAnswerFrame, time.Now().Add(f.write))
			return err
		}
		var stream io.Reader
		if body != nil {
			stream = body
		}
		err := f.run(rctx, c.remote, req, stream, send)
		rcancel()
		if body != nil {
			close(body.done)
		}
		c.reqs.remove(req.ID, mine)
		if err != nil {
			// The connection is cut, and its read loop ends.
			f.logger.Debug("closed a forwarding connection: answer not sent", "remote", c.remote, "error", err)
			c.conn.Close()
		}
	}()
}

func (r *fwdRunning) add(id uint64, e *fwdEntry) {
	r.mu.Lock()
	r.entries[id] = e
	r.mu.Unlock()
}

// remove drops a finished request's entry, unless a later request of the
// same ID took it: the map holds at most fwdMaxInFlight entries.
func (r *fwdRunning) remove(id uint64, e *fwdEntry) {
	r.mu.Lock()
	if r.entries[id] == e {
		delete(r.entries, id)
	}
	r.mu.Unlock()
}

// cancel cancels the context of the running request of an ID.
func (r *fwdRunning) cancel(id uint64) {
	r.mu.Lock()
	if e, ok := r.entries[id]; ok {
		e.cancel()
	}
	r.mu.Unlock()
}

// feed hands a chunk to the body of the running request of its ID; the
// last chunk closes it. A chunk of a request that ended, or that has no
// body to come, is dropped. It reports false when the drain started while
// the route did not read.
func (r *fwdRunning) feed(req *fwdRequest, quit <-chan struct{}) bool {
	r.mu.Lock()
	var b *fwdBody
	if e, ok := r.entries[req.ID]; ok {
		b = e.body
		if !req.More {
			e.body = nil
		}
	}
	r.mu.Unlock()
	if b == nil {
		return true
	}
	return b.push(req.Body, req.More, quit)
}

// errBodyCut is a streamed body whose connection ended before its last
// chunk.
var errBodyCut = errors.New("the forwarding connection ended before the whole body arrived")

// fwdBody is the body of a request that arrives in several frames: the
// read loop pushes each chunk, the route reads them. The queue holds
// fwdBodyQueue chunks; past that the read loop waits for the route, which
// holds back the peer (a streamed request is alone on its connection).
type fwdBody struct {
	chunks chan []byte
	// ended is closed when the connection's read loop ends, ctx is the
	// request's, done is closed once the request is answered (the rest of
	// the body is dropped).
	ended <-chan struct{}
	ctx   context.Context
	done  chan struct{}
	cur   []byte
	eof   bool
}

func (b *fwdBody) Read(p []byte) (int, error) {
	for len(b.cur) == 0 {
		if b.eof {
			return 0, io.EOF
		}
		select {
		case c, ok := <-b.chunks:
			b.cur, b.eof = c, !ok
		case <-b.ended:
			return 0, errBodyCut
		case <-b.ctx.Done():
			return 0, context.Cause(b.ctx)
		}
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

// push queues one chunk; the last closes the queue. It reports false when
// the drain started first.
func (b *fwdBody) push(chunk []byte, more bool, quit <-chan struct{}) bool {
	if len(chunk) > 0 {
		select {
		case b.chunks <- chunk:
		case <-b.done:
		case <-quit:
			return false
		}
	}
	if !more {
		close(b.chunks)
	}
	return true
}

// run answers one request with the internal handler and sends the answer
// through send: in one frame, or, for a streamed request, in chunks as the
// route writes them. An error is send's: the connection is unusable.
func (f *fwdServer) run(ctx context.Context, remote net.Addr, req *fwdRequest, body io.Reader, send func(*fwdResponse) error) (err error) {
	w := &fwdResponseWriter{id: req.ID, header: http.Header{}, send: send, stream: req.Stream}
	defer func() {
		if p := recover(); p != nil {
			err = send(f.recovered(w, req, p))
		}
	}()
	r, err := req.httpRequest(ctx, remote, body)
	if err != nil {
		writeError(w, err)
		return w.finish()
	}
	f.handler.ServeHTTP(w, r)
	if w.overflow {
		w = &fwdResponseWriter{id: req.ID, header: http.Header{}, send: send}
		f.api.setMeta(w)
		writeError(w, &HTTPError{Code: http.StatusInternalServerError,
			Msg: fmt.Sprintf("the answer is over the forwarding limit of %d bytes; the request may have been applied", fwdMaxAnswer)})
	}
	return w.finish()
}

// recovered is the answer of a request whose handler panicked: cut short
// when the handler aborted or part of the answer went out, else a 500.
func (f *fwdServer) recovered(w *fwdResponseWriter, req *fwdRequest, p any) *fwdResponse {
	if p != http.ErrAbortHandler {
		f.logger.Error("panic in a forwarded request", "path", req.URI, "panic", p)
	}
	if isAbort(p) || w.started {
		return &fwdResponse{ID: req.ID, Abort: true}
	}
	w = &fwdResponseWriter{id: req.ID, header: http.Header{}}
	writeError(w, &HTTPError{Code: http.StatusInternalServerError, Msg: "internal error"})
	return w.response()
}

// httpRequest builds the request the handler serves, as the HTTP server
// would have read it: a bad method, URI or header is refused as it refuses
// them, and headers over maxHeaderBytes (keys and values) with a 431.
// stream, when set, reads the chunks of a body that has More to come.
func (req *fwdRequest) httpRequest(ctx context.Context, remote net.Addr, stream io.Reader) (*http.Request, error) {
	if req.Method == "" || !validMethod(req.Method) {
		return nil, badRequest(fmt.Sprintf("invalid method %q", req.Method))
	}
	u, err := url.ParseRequestURI(req.URI)
	if err != nil {
		return nil, badRequest(fmt.Sprintf("invalid request URI %q", req.URI))
	}
	if !httpguts.ValidHostHeader(req.Host) {
		return nil, badRequest(fmt.Sprintf("invalid host %q", req.Host))
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	size := 0
	for k, vs := range req.Header {
		for _, v := range vs {
			size += len(k) + len(v)
		}
	}
	if size > maxHeaderBytes {
		return nil, &HTTPError{Code: http.StatusRequestHeaderFieldsTooLarge,
			Msg: fmt.Sprintf("request headers over %d bytes", maxHeaderBytes)}
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) || http.CanonicalHeaderKey(k) != k {
			return nil, badRequest(fmt.Sprintf("invalid header name %q", k))
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, badRequest(fmt.Sprintf("invalid value of header %s", k))
			}
		}
	}
	body, length := io.ReadCloser(http.NoBody), int64(len(req.Body))
	switch {
	case stream != nil:
		// The length is unknown until the last chunk: the route's limit
		// bounds what it reads.
		body, length = io.NopCloser(io.MultiReader(bytes.NewReader(req.Body), stream)), -1
	case len(req.Body) > 0:
		body = io.NopCloser(bytes.NewReader(req.Body))
	}
	r := &http.Request{
		Method: req.Method, URL: u, RequestURI: req.URI,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: req.Header, Body: body, ContentLength: length,
		Host: req.Host, RemoteAddr: remote.String(),
	}
	return r.WithContext(ctx), nil
}

func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return true
}

// fwdResponseWriter buffers an answer: the status and headers as the
// handler set them, and a body of at most fwdMaxAnswer bytes. Like the
// HTTP server, it answers 200 when the handler writes no status, and
// sniffs the Content-Type of a body that has none. A streamed answer's
// body has no bound: each fwdChunk of it goes out in a frame through send
// as soon as it is written.
type fwdResponseWriter struct {
	id       uint64
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool

	send   func(*fwdResponse) error
	stream bool
	// started is set once a frame of a streamed answer went out; err is
	// the error of its send.
	started bool
	err     error
}

func (w *fwdResponseWriter) Header() http.Header { return w.header }

func (w *fwdResponseWriter) WriteHeader(code int) {
	if w.status != 0 || code < 100 || code > 999 {
		return
	}
	w.status = code
}

func (w *fwdResponseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if !w.stream {
		if w.body.Len()+len(p) > fwdMaxAnswer {
			w.overflow = true
			return 0, fmt.Errorf("forwarded answer over %d bytes", fwdMaxAnswer)
		}
		return w.body.Write(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	w.body.Write(p)
	for w.body.Len() >= fwdChunk && w.err == nil {
		w.flush(w.body.Next(fwdChunk), true)
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// flush sends one frame of a streamed answer; the first carries the status
// and headers.
func (w *fwdResponseWriter) flush(chunk []byte, more bool) {
	resp := &fwdResponse{ID: w.id, Body: chunk, More: more}
	if !w.started {
		resp = w.head(chunk)
		resp.More = more
		w.started = true
	}
	if err := w.send(resp); err != nil {
		w.err = fmt.Errorf("send answer: %w", err)
	}
}

// head is the first (or only) frame of the answer.
func (w *fwdResponseWriter) head(body []byte) *fwdResponse {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if _, ok := w.header["Content-Type"]; !ok && len(body) > 0 {
		w.header.Set("Content-Type", http.DetectContentType(body))
	}
	return &fwdResponse{ID: w.id, Status: w.status, Header: w.header, Body: body}
}

// response is the whole answer of a request that is not streamed.
func (w *fwdResponseWriter) response() *fwdResponse { return w.head(w.body.Bytes()) }

// finish sends the answer, or the last frame of a streamed one.
func (w *fwdResponseWriter) finish() error {
	if !w.stream {
		return w.send(w.response())
	}
	if w.err == nil {
		w.flush(w.body.Bytes(), false)
	}
	return w.err
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}
