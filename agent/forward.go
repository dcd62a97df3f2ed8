package agent

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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"golang.org/x/net/http/httpguts"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
)

// The forwarding protocol carries the writes a follower forwards to the
// leader (rpcForward on the RPC port), without the cost of an HTTP/1.1
// exchange: a write forwarded over HTTP cost the cluster about 120 µs of
// CPU in transport goroutines and header parsing on both ends.
//
// A connection opens with the protocol byte, read inside TLS when RPC TLS
// is on; the leader answers with one byte, fwdVersion, so that a follower
// learns before it sends a request whether the peer speaks the protocol (a
// server too old to know it closes the connection, and the follower uses
// HTTP). Then each side sends frames: a uint32 big-endian length followed
// by that many bytes of msgpack (structs.NewMsgpackHandle), a fwdRequest
// from the follower, a fwdResponse from the leader. Requests are
// multiplexed: each carries an ID its answer repeats, and answers come in
// the order the leader finishes them.
//
// Guarantees:
//   - A request runs through the same handler as a request forwarded over
//     HTTP (api.handler(true)): the leader's ACL check with the forwarded
//     token, the not-leader answer, the cluster headers and the errors are
//     the same, and the follower copies back the same status, headers and
//     body.
//   - A frame over fwdMaxFrame closes the connection before a byte of it is
//     buffered; a frame that does not decode closes it too. The leader runs
//     at most fwdMaxInFlight requests of a connection at once and stops
//     reading it while they run; a connection idle for HTTPIdleTimeout is
//     closed, and a frame must arrive whole within HTTPReadTimeout.
//   - A request runs for at most fwdCallLimit on the leader, as long as the
//     follower waits for it; a follower whose caller gives up sends a cancel
//     frame, which cancels the request's context, as closing an HTTP
//     forward's connection did.
//   - Server.Shutdown drains the connections with the HTTP servers: the
//     leader stops reading frames and answers the requests it read, within
//     shutdownGrace, before raft stops.
//   - The follower retries only what the leader cannot have applied: a
//     failed dial, a frame of which no byte was written, or a not-leader
//     answer. A connection lost after the frame went out fails the call as
//     possibly applied.
const (
	rpcForwardVersion byte = 0x01
	// fwdMaxInFlight bounds the requests of one connection the leader runs
	// at once.
	fwdMaxInFlight = 64
	// fwdHeaderAllowance is the room a frame has beyond its body: the
	// headers (bounded like an HTTP request's), the method, the URI and the
	// encoding.
	fwdHeaderAllowance = maxHeaderBytes + 16<<10
	// fwdMaxFrame bounds a request frame: the largest body of a route that
	// is forwarded this way (snapshots go over HTTP) and its headers.
	fwdMaxFrame = maxBody + fwdHeaderAllowance
	// fwdMaxAnswer bounds the body of an answer; fwdMaxAnswerFrame the
	// frame that carries it.
	fwdMaxAnswer      = 16 << 20
	fwdMaxAnswerFrame = fwdMaxAnswer + fwdHeaderAllowance
	// fwdPoolSize is how many connections a follower keeps to the leader:
	// two, so that one large frame does not hold every call behind it.
	fwdPoolSize = 2
	// fwdCallLimit bounds a forwarded write, as long as the longest handler
	// allows itself (the same as an HTTP forward).
	fwdCallLimit = time.Minute
	// fwdCancelTimeout bounds the write of a cancel frame.
	fwdCancelTimeout = 5 * time.Second
	// fwdDialTimeout bounds the dial and the leader's version byte.
	fwdDialTimeout = rpcHandshakeTimeout
	// fwdUnsupportedRetry is how long a follower keeps using HTTP with a
	// leader that does not speak the protocol before it tries again.
	fwdUnsupportedRetry = 30 * time.Second
)

// fwdRequest is a forwarded request: Header is the client's, with
// headerForwarded set to the follower's node ID; Host is the leader's
// address, as an HTTP forward addresses it.
//
// A frame with Cancel set is no request: it cancels the context of the
// running request of its ID (an ID that runs no request is ignored).
type fwdRequest struct {
	ID     uint64      `codec:"id"`
	Cancel bool        `codec:"cancel,omitempty"`
	Method string      `codec:"method"`
	URI    string      `codec:"uri"`
	Host   string      `codec:"host"`
	Header http.Header `codec:"header"`
	Body   []byte      `codec:"body"`
}

// fwdResponse is the leader's answer to the request of the same ID. Abort
// is an answer the handler cut (http.ErrAbortHandler): the client sees a
// broken answer, as from an HTTP forward whose connection was cut.
type fwdResponse struct {
	ID     uint64      `codec:"id"`
	Status int         `codec:"status"`
	Header http.Header `codec:"header"`
	Body   []byte      `codec:"body"`
	Abort  bool        `codec:"abort"`
}

// isForwardedWrite reports whether a request is forwarded with the
// forwarding protocol: a state-changing request, except a snapshot
// restore, which streams a large archive over HTTP.
func isForwardedWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch:
		return !isSnapshotPath(r.URL.Path)
	}
	return false
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
	s       *Server
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
		idle:   orDefault(s.config.HTTPIdleTimeout, config.DefaultHTTPIdleTimeout),
		read:   orDefault(s.config.HTTPReadTimeout, config.DefaultHTTPReadTimeout),
		write:  orDefault(s.config.HTTPWriteTimeout, config.DefaultHTTPWriteTimeout),
		conns:  map[net.Conn]struct{}{},
		quit:   make(chan struct{}),
	}
}

// serve accepts the forwarding connections of the mux until it closes.
// Every goroutine it starts is counted in s.wg.
func (f *fwdServer) serve(ln net.Listener) {
	defer f.s.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		f.s.wg.Add(1)
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

// fwdRunning holds the cancel of each running request of a connection, by
// its ID.
type fwdRunning struct {
	mu      sync.Mutex
	cancels map[uint64]*fwdCancel
}

type fwdCancel struct{ cancel context.CancelFunc }

// serveConn runs the requests of one connection: it reads a frame only
// when fewer than fwdMaxInFlight of them run, so a peer that sends faster
// than the leader answers is held back by TCP. Each request runs for at
// most fwdCallLimit, and a cancel frame of its ID ends it sooner. When the
// drain starts, it stops reading and closes the connection once its
// requests are answered; when the peer goes, it cancels them.
func (f *fwdServer) serveConn(conn net.Conn) {
	defer f.s.wg.Done()
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
	ctx, cancel := context.WithCancel(f.s.requestCtx)
	var running sync.WaitGroup
	drained := false
	defer func() {
		if drained {
			// The requests read run to their answers; the connection is
			// cut only when Shutdown's deadline passes.
			readerDone()
			running.Wait()
			cancel()
			conn.Close()
		} else {
			cancel()
			conn.Close()
			running.Wait()
		}
		f.mu.Lock()
		delete(f.conns, conn)
		f.mu.Unlock()
	}()
	remote := conn.RemoteAddr()
	if _, err := conn.Write([]byte{rpcForwardVersion}); err != nil {
		f.logger.Debug("forwarding connection lost before its first frame", "remote", remote, "error", err)
		return
	}
	out := newFrameWriter(conn, f.handle)
	slots := make(chan struct{}, fwdMaxInFlight)
	reqs := &fwdRunning{cancels: map[uint64]*fwdCancel{}}
	br := bufio.NewReaderSize(conn, 32<<10)
	dec := codec.NewDecoderBytes(nil, f.handle)
	for {
		select {
		case slots <- struct{}{}:
		case <-f.quit:
			drained = true
			return
		}
		if f.draining() {
			drained = true
			return
		}
		// Wait for the first byte of the next frame: up to the idle
		// timeout when no request runs, for as long as one does.
		for {
			_ = conn.SetReadDeadline(time.Now().Add(f.idle))
			if f.draining() {
				drained = true
				return
			}
			_, err := br.Peek(1)
			if err == nil {
				break
			}
			if f.draining() {
				drained = true
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && len(slots) > 1 {
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !(errors.As(err, &ne) && ne.Timeout()) {
				f.logger.Debug("forwarding connection lost", "remote", remote, "error", err)
			}
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(f.read))
		// Each frame has its own buffer: the request's body may point
		// into it while the next frame is read.
		buf, err := readFrame(br, fwdMaxFrame)
		if err != nil {
			if f.draining() {
				// The frame was cut by the drain: its caller sees a
				// connection lost after sending, as over HTTP.
				drained = true
				return
			}
			f.logger.Warn("closed a forwarding connection: bad frame", "remote", remote, "error", err)
			return
		}
		req := &fwdRequest{}
		dec.ResetBytes(buf)
		if err := dec.Decode(req); err != nil {
			f.logger.Warn("closed a forwarding connection: bad frame", "remote", remote, "error", err)
			return
		}
		if req.Cancel {
			reqs.mu.Lock()
			if c, ok := reqs.cancels[req.ID]; ok {
				c.cancel()
			}
			reqs.mu.Unlock()
			<-slots
			continue
		}
		rctx, rcancel := context.WithTimeout(ctx, fwdCallLimit)
		reqs.mu.Lock()
		// A peer that reuses the ID of a running request can cancel only
		// the last one; each still ends within fwdCallLimit.
		mine := &fwdCancel{cancel: rcancel}
		reqs.cancels[req.ID] = mine
		reqs.mu.Unlock()
		running.Add(1)
		for n, peak := f.running.Add(1), f.peak.Load(); n > peak && !f.peak.CompareAndSwap(peak, n); peak = f.peak.Load() {
		}
		go func() {
			defer running.Done()
			defer func() { <-slots }()
			defer f.running.Add(-1)
			resp := f.run(rctx, remote, req)
			rcancel()
			reqs.mu.Lock()
			// The map holds at most fwdMaxInFlight entries: the ID's entry
			// goes with its request (unless a later request took it).
			if reqs.cancels[req.ID] == mine {
				delete(reqs.cancels, req.ID)
			}
			reqs.mu.Unlock()
			if _, err := out.write(context.Background(), resp, fwdMaxAnswerFrame, time.Now().Add(f.write)); err != nil {
				// The connection is cut, and its read loop ends.
				f.logger.Debug("closed a forwarding connection: answer not sent", "remote", remote, "error", err)
				conn.Close()
			}
		}()
	}
}

// run answers one request with the internal handler.
func (f *fwdServer) run(ctx context.Context, remote net.Addr, req *fwdRequest) (resp *fwdResponse) {
	w := &fwdResponseWriter{header: http.Header{}}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				resp = &fwdResponse{ID: req.ID, Abort: true}
				return
			}
			f.logger.Error("panic in a forwarded request", "path", req.URI, "panic", p)
			w = &fwdResponseWriter{header: http.Header{}}
			writeError(w, &HTTPError{Code: http.StatusInternalServerError, Msg: "internal error"})
			resp = w.response(req.ID)
		}
	}()
	r, err := req.httpRequest(ctx, remote)
	if err != nil {
		writeError(w, err)
		return w.response(req.ID)
	}
	f.handler.ServeHTTP(w, r)
	if w.overflow {
		w = &fwdResponseWriter{header: http.Header{}}
		f.api.setMeta(w)
		writeError(w, &HTTPError{Code: http.StatusInternalServerError,
			Msg: fmt.Sprintf("the answer is over the forwarding limit of %d bytes; the request may have been applied", fwdMaxAnswer)})
	}
	return w.response(req.ID)
}

// httpRequest builds the request the handler serves, as the HTTP server
// would have read it: a bad method, URI or header is refused as it refuses
// them, and headers over maxHeaderBytes (keys and values) with a 431.
func (req *fwdRequest) httpRequest(ctx context.Context, remote net.Addr) (*http.Request, error) {
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
	body := io.ReadCloser(http.NoBody)
	if len(req.Body) > 0 {
		body = io.NopCloser(bytes.NewReader(req.Body))
	}
	r := &http.Request{
		Method: req.Method, URL: u, RequestURI: req.URI,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: req.Header, Body: body, ContentLength: int64(len(req.Body)),
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
// sniffs the Content-Type of a body that has none.
type fwdResponseWriter struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool
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
	if w.body.Len()+len(p) > fwdMaxAnswer {
		w.overflow = true
		return 0, fmt.Errorf("forwarded answer over %d bytes", fwdMaxAnswer)
	}
	return w.body.Write(p)
}

func (w *fwdResponseWriter) response(id uint64) *fwdResponse {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if _, ok := w.header["Content-Type"]; !ok && w.body.Len() > 0 {
		w.header.Set("Content-Type", http.DetectContentType(w.body.Bytes()))
	}
	return &fwdResponse{ID: id, Status: w.status, Header: w.header, Body: w.body.Bytes()}
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

// errFwdUnsupported is a leader that does not speak the forwarding
// protocol: it closed the connection instead of answering its version.
var errFwdUnsupported = errors.New("the leader does not speak the forwarding protocol")

// fwdClient forwards writes to one leader over up to fwdPoolSize
// connections. Calls share a connection: each waits for the answer of its
// ID, which the connection's reader hands over.
type fwdClient struct {
	addr   string
	dial   func(ctx context.Context) (net.Conn, error)
	handle *codec.MsgpackHandle
	logger hclog.Logger
	// reuse is how long after its last request a connection may still
	// take a call: half the leader's idle timeout, which the leader counts
	// from the last frame it read, so that it never closes for idleness a
	// connection a frame is on its way to.
	reuse time.Duration

	mu          sync.Mutex
	conns       [fwdPoolSize]*fwdConn
	next        int
	retired     bool
	unsupported time.Time
}

func newFwdClient(s *Server, addr string, logger hclog.Logger) *fwdClient {
	return &fwdClient{
		addr: addr,
		dial: func(ctx context.Context) (net.Conn, error) {
			return s.mux.dial(ctx, addr, rpcForward)
		},
		handle: structs.NewMsgpackHandle(),
		logger: logger,
		reuse:  orDefault(s.config.HTTPIdleTimeout, config.DefaultHTTPIdleTimeout) / 2,
	}
}

// supported reports whether the leader is worth a try: it did not refuse
// the protocol in the last fwdUnsupportedRetry.
func (c *fwdClient) supported() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unsupported.IsZero() || time.Since(c.unsupported) > fwdUnsupportedRetry
}

// call sends one request and waits for its answer. sent reports whether
// the leader may have received it: an error after that must not be
// retried. A connection that retires between conn and its call refuses
// the call unsent, and the call takes another.
func (c *fwdClient) call(ctx context.Context, req *fwdRequest) (resp *fwdResponse, sent bool, err error) {
	for try := 0; ; try++ {
		conn, err := c.conn(ctx)
		if err != nil {
			return nil, false, err
		}
		resp, sent, err = conn.call(ctx, req)
		if !errors.Is(err, errConnRetiring) || try == fwdPoolSize {
			return resp, sent, err
		}
	}
}

// conn returns a connection to call on, dialing one when its slot is
// empty, broken or idle too long. The dial and the version byte (up to
// fwdDialTimeout) run without c.mu, so a leader that does not answer holds
// up only the calls that wait for that dial.
func (c *fwdClient) conn(ctx context.Context) (*fwdConn, error) {
	c.mu.Lock()
	if c.retired {
		c.mu.Unlock()
		return nil, fmt.Errorf("forward to %s: %w", c.addr, net.ErrClosed)
	}
	i := c.next
	c.next = (c.next + 1) % fwdPoolSize
	old := c.conns[i]
	if old != nil {
		if old.usable(c.reuse) {
			c.mu.Unlock()
			return old, nil
		}
		c.conns[i] = nil
	}
	c.mu.Unlock()
	if old != nil {
		old.retire()
	}

	dctx, cancel := context.WithTimeout(ctx, fwdDialTimeout)
	defer cancel()
	nc, err := c.dial(dctx)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", c.addr, err)
	}
	if err := readVersion(dctx, nc); err != nil {
		nc.Close()
		if errors.Is(err, errFwdUnsupported) {
			c.mu.Lock()
			c.unsupported = time.Now()
			c.mu.Unlock()
		}
		return nil, fmt.Errorf("open forwarding to %s: %w", c.addr, err)
	}

	c.mu.Lock()
	c.unsupported = time.Time{}
	if c.retired {
		c.mu.Unlock()
		nc.Close()
		return nil, fmt.Errorf("forward to %s: %w", c.addr, net.ErrClosed)
	}
	// Another call may have filled the slot while this one dialed: use
	// its connection and close this one.
	if cur := c.conns[i]; cur != nil {
		if cur.usable(c.reuse) {
			c.mu.Unlock()
			nc.Close()
			return cur, nil
		}
		defer cur.retire()
	}
	fc := newFwdConn(c, nc)
	c.conns[i] = fc
	c.mu.Unlock()
	go fc.readLoop()
	return fc, nil
}

// readVersion reads the leader's version byte.
func readVersion(ctx context.Context, conn net.Conn) error {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(d)
	}
	defer conn.SetReadDeadline(time.Time{})
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return errFwdUnsupported
		}
		return err
	}
	if b[0] != rpcForwardVersion {
		return fmt.Errorf("%w: version %d", errFwdUnsupported, b[0])
	}
	return nil
}

// retire closes the client: its connections close once their calls are
// answered.
func (c *fwdClient) retire() {
	c.mu.Lock()
	c.retired = true
	conns := c.conns
	c.conns = [fwdPoolSize]*fwdConn{}
	c.mu.Unlock()
	for _, fc := range conns {
		if fc != nil {
			fc.retire()
		}
	}
}

// fwdResult is what a waiting call gets: an answer, or the connection's
// error.
type fwdResult struct {
	resp *fwdResponse
	err  error
}

// errConnRetiring is a connection that takes no new call: the call was
// not sent, and takes another connection.
var errConnRetiring = errors.New("the forwarding connection is retiring")

// fwdConn is one connection of a fwdClient.
type fwdConn struct {
	c    *fwdClient
	conn net.Conn

	out *frameWriter

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]chan fwdResult
	err      error
	retiring bool
	// lastUsed is when the last request was sent.
	lastUsed time.Time

	// broken is closed with the connection; err says why.
	broken    chan struct{}
	closeOnce sync.Once
}

func newFwdConn(c *fwdClient, conn net.Conn) *fwdConn {
	return &fwdConn{
		c: c, conn: conn,
		out:      newFrameWriter(conn, c.handle),
		pending:  map[uint64]chan fwdResult{},
		lastUsed: time.Now(),
		broken:   make(chan struct{}),
	}
}

// usable reports whether the connection may take a new call.
func (fc *fwdConn) usable(reuse time.Duration) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.err != nil || fc.retiring {
		return false
	}
	return len(fc.pending) > 0 || time.Since(fc.lastUsed) < reuse
}

// retire closes the connection once no call waits on it.
func (fc *fwdConn) retire() {
	fc.mu.Lock()
	fc.retiring = true
	idle := len(fc.pending) == 0
	fc.mu.Unlock()
	if idle {
		fc.fail(net.ErrClosed)
	}
}

// fail closes the connection and fails every call waiting on it.
func (fc *fwdConn) fail(err error) {
	fc.closeOnce.Do(func() {
		fc.mu.Lock()
		fc.err = err
		fc.pending = map[uint64]chan fwdResult{}
		fc.mu.Unlock()
		fc.conn.Close()
		close(fc.broken)
	})
}

func (fc *fwdConn) call(ctx context.Context, req *fwdRequest) (*fwdResponse, bool, error) {
	ch := make(chan fwdResult, 1)
	fc.mu.Lock()
	if fc.err != nil {
		err := fc.err
		fc.mu.Unlock()
		return nil, false, err
	}
	if fc.retiring {
		// retire may close the connection as soon as its last call ends:
		// a call registered now could be cut after its frame went out.
		fc.mu.Unlock()
		return nil, false, errConnRetiring
	}
	fc.nextID++
	id := fc.nextID
	fc.pending[id] = ch
	fc.lastUsed = time.Now()
	fc.mu.Unlock()
	req.ID = id

	deadline, _ := ctx.Deadline()
	n, err := fc.out.write(ctx, req, fwdMaxFrame, deadline)
	if err != nil {
		err = fmt.Errorf("forward to %s: %w", fc.c.addr, err)
		fc.forget(id)
		if errors.Is(err, errWriteFailed) {
			// The stream may be cut mid-frame, and a TLS connection keeps
			// the error of a timed-out write: no later frame can go out.
			fc.fail(err)
		}
		return nil, n > 0, err
	}
	select {
	case res := <-ch:
		return res.resp, true, res.err
	case <-fc.broken:
		// An answer may have come just before the connection broke.
		select {
		case res := <-ch:
			return res.resp, true, res.err
		default:
		}
		fc.mu.Lock()
		err := fc.err
		fc.mu.Unlock()
		return nil, true, err
	case <-ctx.Done():
		// The answer, when it comes, is dropped; the leader is told to
		// stop the handler.
		fc.forget(id)
		go fc.cancel(id)
		return nil, true, fmt.Errorf("forward to %s: %w", fc.c.addr, context.Cause(ctx))
	}
}

// cancel sends the cancel frame of a call that gave up: the leader cancels
// that request's context, as an HTTP forward's closed connection did. A
// failed write breaks the connection, as for a request.
func (fc *fwdConn) cancel(id uint64) {
	_, err := fc.out.write(context.Background(), &fwdRequest{ID: id, Cancel: true}, fwdMaxFrame, time.Now().Add(fwdCancelTimeout))
	if err != nil && errors.Is(err, errWriteFailed) {
		fc.fail(fmt.Errorf("forward to %s: %w", fc.c.addr, err))
	}
}

// forget drops a call nobody waits for any more; a retired connection
// closes with its last call.
func (fc *fwdConn) forget(id uint64) {
	fc.mu.Lock()
	delete(fc.pending, id)
	closeNow := fc.retiring && len(fc.pending) == 0
	fc.mu.Unlock()
	if closeNow {
		fc.fail(net.ErrClosed)
	}
}

// readLoop hands each answer to the call of its ID. An answer for an ID no
// call waits for (the call gave up, or the peer lies) is dropped; a frame
// that is too large or does not decode breaks the connection.
func (fc *fwdConn) readLoop() {
	br := bufio.NewReaderSize(fc.conn, 32<<10)
	dec := codec.NewDecoderBytes(nil, fc.c.handle)
	for {
		// Each frame has its own buffer: the answer's body may point into
		// it.
		buf, err := readFrame(br, fwdMaxAnswerFrame)
		if err == nil {
			resp := &fwdResponse{}
			dec.ResetBytes(buf)
			if err = dec.Decode(resp); err == nil {
				fc.deliver(resp)
				continue
			}
			fc.c.logger.Warn("closed a forwarding connection: bad answer", "leader", fc.c.addr, "error", err)
		}
		fc.fail(fmt.Errorf("connection to %s: %w", fc.c.addr, err))
		return
	}
}

func (fc *fwdConn) deliver(resp *fwdResponse) {
	fc.mu.Lock()
	ch, ok := fc.pending[resp.ID]
	delete(fc.pending, resp.ID)
	closeNow := fc.retiring && len(fc.pending) == 0
	fc.mu.Unlock()
	if !ok {
		fc.c.logger.Debug("dropped an answer no call waits for", "leader", fc.c.addr, "id", resp.ID)
	} else {
		ch <- fwdResult{resp: resp}
	}
	if closeNow {
		fc.fail(net.ErrClosed)
	}
}

// errAborted is an answer the leader's handler cut short.
var errAborted = errors.New("the leader cut its answer short")

// sendFrame forwards one write over the forwarding protocol and returns
// the answer as an HTTP forward returns it. ok is false when the leader
// does not speak the protocol: the caller forwards over HTTP instead.
func (a *httpAPI) sendFrame(r *http.Request, leader string, body []byte) (resp *http.Response, sent, ok bool, err error) {
	client := a.fwdClient(leader)
	if !client.supported() {
		return nil, false, false, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), fwdCallLimit)
	defer cancel()
	header := r.Header.Clone()
	header.Set(headerForwarded, a.s.nodeID)
	fr, sent, err := client.call(ctx, &fwdRequest{
		Method: r.Method, URI: r.URL.RequestURI(), Host: leader, Header: header, Body: body,
	})
	if err != nil {
		if !sent && (errors.Is(err, errFwdUnsupported) || errors.Is(err, errFrameTooLarge)) {
			return nil, false, false, nil
		}
		return nil, sent, true, err
	}
	a.framed.Add(1)
	if fr.Abort {
		return nil, true, true, errAborted
	}
	if fr.Header == nil {
		fr.Header = http.Header{}
	}
	return &http.Response{
		StatusCode: fr.Status, Status: strconv.Itoa(fr.Status) + " " + http.StatusText(fr.Status),
		Header: fr.Header, Body: io.NopCloser(bytes.NewReader(fr.Body)), ContentLength: int64(len(fr.Body)),
	}, true, true, nil
}

// fwdClient returns the client of the leader at addr, and retires the
// client of a previous leader. It holds a.mu only to swap the clients.
func (a *httpAPI) fwdClient(addr string) *fwdClient {
	a.mu.Lock()
	if a.fwd != nil && a.fwd.addr == addr {
		defer a.mu.Unlock()
		return a.fwd
	}
	old := a.fwd
	a.fwd = newFwdClient(a.s, addr, a.s.logger.Named("forward"))
	c := a.fwd
	a.mu.Unlock()
	// Retired without a.mu, which every forward over HTTP takes.
	if old != nil {
		old.retire()
	}
	return c
}
