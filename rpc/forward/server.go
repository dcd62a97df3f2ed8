package forward

import (
	"bufio"
	"bytes"
	"context"
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

	"github.com/nops-dev/nops/structs"
)

// Options configure a Server.
type Options struct {
	// Handler runs the requests: the handler of the leader's HTTP API.
	Handler http.Handler
	// Logger names the lines of the server; nil logs nothing.
	Logger hclog.Logger
	// IdleTimeout is how long a connection may wait for its next frame
	// with no request running; ReadTimeout how long a frame may take to
	// arrive once it started; WriteTimeout how long an answer's frame may
	// take to go out. All three must be positive.
	IdleTimeout, ReadTimeout, WriteTimeout time.Duration
	// StreamTimeout bounds a streamed request (a snapshot save or
	// restore); any other runs for at most CallLimit.
	StreamTimeout time.Duration
	// Goroutines counts every goroutine the server starts, Serve's own
	// included (its caller adds it).
	Goroutines *sync.WaitGroup
	// BaseContext is the parent of the context of every connection's
	// requests; nil is context.Background.
	BaseContext func() context.Context
	// WriteError writes an answer of the server's own: a request refused
	// before the handler (400, 431), a handler that panicked or an answer
	// over MaxAnswer (500); nil is http.Error.
	WriteError func(w http.ResponseWriter, code int, msg string)
	// SetMeta, when set, writes the headers every answer of the API
	// carries on the error that replaces an answer over MaxAnswer.
	SetMeta func(w http.ResponseWriter)
}

// Server serves the forwarding protocol on the leader (and on any other
// server, whose handler answers not-leader).
type Server struct {
	opts   Options
	logger hclog.Logger
	handle *codec.MsgpackHandle
	// running counts the requests being answered, peak its high-water
	// mark (for tests).
	running, peak atomic.Int64
	// keepalive is how often a keepalive frame goes out.
	keepalive time.Duration

	// mu guards conns, the connections being served, and quit, closed
	// when Shutdown starts the drain; readers counts the read loops that
	// still run.
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	quit     chan struct{}
	quitOnce sync.Once
	readers  atomic.Int64
}

// NewServer returns a server that runs requests with opts.Handler.
func NewServer(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if opts.Goroutines == nil {
		opts.Goroutines = &sync.WaitGroup{}
	}
	if opts.BaseContext == nil {
		opts.BaseContext = context.Background
	}
	if opts.WriteError == nil {
		opts.WriteError = func(w http.ResponseWriter, code int, msg string) { http.Error(w, msg, code) }
	}
	return &Server{
		opts: opts, logger: logger,
		handle:    structs.NewMsgpackHandle(),
		keepalive: KeepaliveInterval,
		conns:     map[net.Conn]struct{}{},
		quit:      make(chan struct{}),
	}
}

// Peak is the most requests the server ran at once.
func (f *Server) Peak() int64 { return f.peak.Load() }

// errDraining ends the read of a connection when Shutdown starts.
var errDraining = errors.New("the forwarding server is shutting down")

// Serve accepts the forwarding connections of ln until it closes. Its
// caller counts it in opts.Goroutines beforehand; every goroutine it
// starts is counted there too.
func (f *Server) Serve(ln net.Listener) {
	defer f.opts.Goroutines.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		f.opts.Goroutines.Add(1)
		go f.serveConn(conn)
	}
}

// Shutdown drains the forwarding connections, as http.Server.Shutdown
// drains HTTP ones: every connection stops reading frames (a frame cut
// mid-way is not run), the requests already read run and their answers go
// out, then the connections close. Past ctx's deadline the connections
// close at once, and the error is ctx's. It is safe to call more than
// once, and on a nil Server.
func (f *Server) Shutdown(ctx context.Context) error {
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
func (f *Server) draining() bool {
	select {
	case <-f.quit:
		return true
	default:
		return false
	}
}

// inflight holds the running requests of a connection, by ID.
type inflight struct {
	mu      sync.Mutex
	entries map[uint64]*entry
}

// entry is one running request: its cancel, and its body while more of it
// is to come.
type entry struct {
	cancel context.CancelFunc
	body   *streamBody
}

// connState is what the read loop of one connection shares with the
// requests it started.
type connState struct {
	conn    net.Conn
	remote  net.Addr
	ctx     context.Context
	out     *frameWriter
	slots   chan struct{}
	reqs    *inflight
	running sync.WaitGroup
	// watched is set once the peer asked for keepalives: their sender
	// starts then, so a connection of a peer that never asks costs no
	// timer.
	watched atomic.Bool
	// answered is closed once the connection's last request answered;
	// the keepalives go on until then.
	answered chan struct{}
	// readEnded is closed when the read loop returns: a body waiting for
	// its next chunk ends with an error.
	readEnded chan struct{}
}

// serveConn runs the requests of one connection: it reads a frame only
// when fewer than MaxInFlight of them run, so a peer that sends faster
// than the leader answers is held back by TCP. Each request runs for at
// most CallLimit, and a cancel frame of its ID ends it sooner. When the
// drain starts, it stops reading and closes the connection once its
// requests are answered; when the peer goes, it cancels them.
func (f *Server) serveConn(conn net.Conn) {
	defer f.opts.Goroutines.Done()
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
	ctx, cancel := context.WithCancel(f.opts.BaseContext())
	c := &connState{
		conn: conn, remote: conn.RemoteAddr(), ctx: ctx,
		out:       newFrameWriter(conn, f.handle),
		slots:     make(chan struct{}, MaxInFlight),
		reqs:      &inflight{entries: map[uint64]*entry{}},
		readEnded: make(chan struct{}),
		answered:  make(chan struct{}),
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
		close(c.answered)
		f.mu.Lock()
		delete(f.conns, conn)
		f.mu.Unlock()
	}()
	if _, err := conn.Write([]byte{Version}); err != nil {
		f.logger.Debug("forwarding connection lost before its first frame", "remote", c.remote, "error", err)
		return
	}
	drained = f.readLoop(c)
}

// sendKeepalives sends a keepalive frame every f.keepalive, from the
// peer's first request for them until the connection's last request
// answered. A failed write cuts the connection, as a failed answer does.
func (f *Server) sendKeepalives(c *connState) {
	defer f.opts.Goroutines.Done()
	tick := time.NewTicker(f.keepalive)
	defer tick.Stop()
	for {
		select {
		case <-c.answered:
			return
		case <-tick.C:
		}
		_, err := c.out.write(context.Background(), &Response{Keepalive: true}, MaxAnswerFrame, time.Now().Add(f.opts.WriteTimeout))
		if err != nil {
			f.logger.Debug("closed a forwarding connection: keepalive not sent", "remote", c.remote, "error", err)
			c.conn.Close()
			return
		}
	}
}

// readLoop reads the frames of a connection and starts their requests
// until the connection fails or the drain starts; it reports the latter.
func (f *Server) readLoop(c *connState) (drained bool) {
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
		if req.Keepalive && c.watched.CompareAndSwap(false, true) {
			f.opts.Goroutines.Add(1)
			go f.sendKeepalives(c)
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
func (f *Server) nextFrame(c *connState, br *bufio.Reader, dec *codec.Decoder) (*Request, error) {
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(f.opts.IdleTimeout))
		if f.draining() {
			return nil, errDraining
		}
		_, err := br.Peek(1)
		if err == nil {
			break
		}
		if f.draining() {
			return nil, errDraining
		}
		if isTimeout(err) && len(c.slots) > 1 {
			continue
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
			f.logger.Debug("forwarding connection lost", "remote", c.remote, "error", err)
		}
		return nil, err
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(f.opts.ReadTimeout))
	// Each frame has its own buffer: the request's body may point into it
	// while the next frame is read.
	buf, err := readFrame(br, MaxFrame)
	if err != nil {
		if !f.draining() {
			// A frame cut by the drain is not run: its caller sees a
			// connection lost after sending.
			f.logger.Warn("closed a forwarding connection: bad frame", "remote", c.remote, "error", err)
		}
		return nil, err
	}
	req := &Request{}
	dec.ResetBytes(buf)
	if err := dec.Decode(req); err != nil {
		f.logger.Warn("closed a forwarding connection: bad frame", "remote", c.remote, "error", err)
		return nil, err
	}
	return req, nil
}

// start runs one request in its own goroutine, which sends its answer and
// frees its slot.
func (f *Server) start(c *connState, req *Request) {
	limit := CallLimit
	if req.Stream {
		limit = f.opts.StreamTimeout
	}
	rctx, rcancel := context.WithTimeout(c.ctx, limit)
	// A peer that reuses the ID of a running request can cancel (or feed)
	// only the last one; each still ends within its limit.
	mine := &entry{cancel: rcancel}
	var body *streamBody
	if req.More {
		body = &streamBody{chunks: make(chan []byte, bodyQueue), ended: c.readEnded, ctx: rctx, done: make(chan struct{})}
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
		send := func(resp *Response) error {
			_, err := c.out.write(context.Background(), resp, MaxAnswerFrame, time.Now().Add(f.opts.WriteTimeout))
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

func (r *inflight) add(id uint64, e *entry) {
	r.mu.Lock()
	r.entries[id] = e
	r.mu.Unlock()
}

// remove drops a finished request's entry, unless a later request of the
// same ID took it: the map holds at most MaxInFlight entries.
func (r *inflight) remove(id uint64, e *entry) {
	r.mu.Lock()
	if r.entries[id] == e {
		delete(r.entries, id)
	}
	r.mu.Unlock()
}

// cancel cancels the context of the running request of an ID.
func (r *inflight) cancel(id uint64) {
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
func (r *inflight) feed(req *Request, quit <-chan struct{}) bool {
	r.mu.Lock()
	var b *streamBody
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

// streamBody is the body of a request that arrives in several frames: the
// read loop pushes each chunk, the route reads them. The queue holds
// bodyQueue chunks; past that the read loop waits for the route, which
// holds back the peer (a streamed request is alone on its connection).
type streamBody struct {
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

func (b *streamBody) Read(p []byte) (int, error) {
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
func (b *streamBody) push(chunk []byte, more bool, quit <-chan struct{}) bool {
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

// statusError is an answer the server gives itself, before the handler.
type statusError struct {
	code int
	msg  string
}

func badRequest(msg string) *statusError { return &statusError{code: http.StatusBadRequest, msg: msg} }

// run answers one request with the handler and sends the answer through
// send: in one frame, or, for a streamed request, in chunks as the route
// writes them. An error is send's: the connection is unusable.
func (f *Server) run(ctx context.Context, remote net.Addr, req *Request, body io.Reader, send func(*Response) error) (err error) {
	w := &responseWriter{id: req.ID, header: http.Header{}, send: send, stream: req.Stream}
	defer func() {
		if p := recover(); p != nil {
			err = send(f.recovered(w, req, p))
		}
	}()
	r, refused := req.httpRequest(ctx, remote, body)
	if refused != nil {
		f.opts.WriteError(w, refused.code, refused.msg)
		return w.finish()
	}
	f.opts.Handler.ServeHTTP(w, r)
	if w.overflow {
		w = &responseWriter{id: req.ID, header: http.Header{}, send: send}
		if f.opts.SetMeta != nil {
			f.opts.SetMeta(w)
		}
		f.opts.WriteError(w, http.StatusInternalServerError,
			fmt.Sprintf("the answer is over the forwarding limit of %d bytes; the request may have been applied", MaxAnswer))
	}
	return w.finish()
}

// recovered is the answer of a request whose handler panicked: cut short
// when the handler aborted or part of the answer went out, else a 500.
func (f *Server) recovered(w *responseWriter, req *Request, p any) *Response {
	if p != http.ErrAbortHandler {
		f.logger.Error("panic in a forwarded request", "path", req.URI, "panic", p)
	}
	if err, ok := p.(error); (ok && errors.Is(err, http.ErrAbortHandler)) || w.started {
		return &Response{ID: req.ID, Abort: true}
	}
	w = &responseWriter{id: req.ID, header: http.Header{}}
	f.opts.WriteError(w, http.StatusInternalServerError, "internal error")
	return w.response()
}

// httpRequest builds the request the handler serves, as the HTTP server
// would have read it: a bad method, URI or header is refused as it refuses
// them, and headers over MaxHeaderBytes (keys and values) with a 431.
// stream, when set, reads the chunks of a body that has More to come.
func (req *Request) httpRequest(ctx context.Context, remote net.Addr, stream io.Reader) (*http.Request, *statusError) {
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
	if size > MaxHeaderBytes {
		return nil, &statusError{code: http.StatusRequestHeaderFieldsTooLarge,
			msg: fmt.Sprintf("request headers over %d bytes", MaxHeaderBytes)}
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

// responseWriter buffers an answer: the status and headers as the handler
// set them, and a body of at most MaxAnswer bytes. Like the HTTP server,
// it answers 200 when the handler writes no status, and sniffs the
// Content-Type of a body that has none. A streamed answer's body has no
// bound: each Chunk of it goes out in a frame through send as soon as it
// is written.
type responseWriter struct {
	id       uint64
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool

	send   func(*Response) error
	stream bool
	// started is set once a frame of a streamed answer went out; err is
	// the error of its send.
	started bool
	err     error
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	if w.status != 0 || code < 100 || code > 999 {
		return
	}
	w.status = code
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if !w.stream {
		if w.body.Len()+len(p) > MaxAnswer {
			w.overflow = true
			return 0, fmt.Errorf("forwarded answer over %d bytes", MaxAnswer)
		}
		return w.body.Write(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	w.body.Write(p)
	for w.body.Len() >= Chunk && w.err == nil {
		w.flush(w.body.Next(Chunk), true)
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// flush sends one frame of a streamed answer; the first carries the status
// and headers.
func (w *responseWriter) flush(chunk []byte, more bool) {
	resp := &Response{ID: w.id, Body: chunk, More: more}
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
func (w *responseWriter) head(body []byte) *Response {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if _, ok := w.header["Content-Type"]; !ok && len(body) > 0 {
		w.header.Set("Content-Type", http.DetectContentType(body))
	}
	return &Response{ID: w.id, Status: w.status, Header: w.header, Body: body}
}

// response is the whole answer of a request that is not streamed.
func (w *responseWriter) response() *Response { return w.head(w.body.Bytes()) }

// finish sends the answer, or the last frame of a streamed one.
func (w *responseWriter) finish() error {
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
