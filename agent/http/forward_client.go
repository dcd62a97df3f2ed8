package agenthttp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
)

// The follower's side of the forwarding protocol (forward.go): a pool of
// connections to the leader that calls share, and a connection of its own
// for each streamed call.

// errFwdUnsupported is a peer that does not speak the forwarding protocol:
// it closed the connection instead of answering its version. Nothing was
// sent; the call fails as a failed dial does.
var errFwdUnsupported = errors.New("the leader does not speak the forwarding protocol")

// fwdClient forwards requests to one leader over up to fwdPoolSize
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

	mu      sync.Mutex
	conns   [fwdPoolSize]*fwdConn
	next    int
	retired bool
}

func newFwdClient(s Server, addr string, logger hclog.Logger) *fwdClient {
	return &fwdClient{
		addr: addr,
		dial: func(ctx context.Context) (net.Conn, error) {
			return s.DialForward(ctx, addr)
		},
		handle: structs.NewMsgpackHandle(),
		logger: logger,
		reuse:  orDefault(s.Config().HTTPIdleTimeout, config.DefaultHTTPIdleTimeout) / 2,
	}
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

// callStream sends a streamed request on a connection of its own, which
// closes with its answer: the body's first chunk is in req, the rest (when
// req.More) is read from req.rest as the leader takes it. The answer's
// body, when it has More, is read from resp.stream.
func (c *fwdClient) callStream(ctx context.Context, req *fwdRequest) (resp *fwdResponse, sent bool, err error) {
	c.mu.Lock()
	retired := c.retired
	c.mu.Unlock()
	if retired {
		return nil, false, fmt.Errorf("forward to %s: %w", c.addr, net.ErrClosed)
	}
	nc, err := c.open(ctx)
	if err != nil {
		return nil, false, err
	}
	fc := newFwdConn(c, nc)
	fc.oneShot = true
	go fc.readLoop()
	return fc.call(ctx, req)
}

// open dials the leader and reads its version byte, within
// fwdDialTimeout.
func (c *fwdClient) open(ctx context.Context) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, fwdDialTimeout)
	defer cancel()
	nc, err := c.dial(dctx)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", c.addr, err)
	}
	if err := readVersion(dctx, nc); err != nil {
		nc.Close()
		return nil, fmt.Errorf("open forwarding to %s: %w", c.addr, err)
	}
	return nc, nil
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

	nc, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
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

// fwdResult is what a waiting call gets: the first frame of an answer,
// or the connection's error.
type fwdResult struct {
	resp *fwdResponse
	err  error
}

// fwdWaiter is a call waiting on a connection: ch gets the first frame of
// its answer; pw, once that frame had More, takes the rest of the body.
type fwdWaiter struct {
	ch chan fwdResult
	pw *io.PipeWriter
}

// errConnRetiring is a connection that takes no new call: the call was
// not sent, and takes another connection.
var errConnRetiring = errors.New("the forwarding connection is retiring")

// fwdConn is one connection of a fwdClient.
type fwdConn struct {
	c    *fwdClient
	conn net.Conn

	out *frameWriter
	// oneShot is a connection of one streamed call: it retires with it.
	oneShot bool

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]*fwdWaiter
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
		pending:  map[uint64]*fwdWaiter{},
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

// fail closes the connection and fails every call waiting on it, and the
// body of every streamed answer.
func (fc *fwdConn) fail(err error) {
	fc.closeOnce.Do(func() {
		fc.mu.Lock()
		fc.err = err
		pending := fc.pending
		fc.pending = map[uint64]*fwdWaiter{}
		fc.mu.Unlock()
		fc.conn.Close()
		close(fc.broken)
		for _, wt := range pending {
			if wt.pw != nil {
				wt.pw.CloseWithError(err)
			}
		}
	})
}

// register takes an ID for a call and the waiter of its answer.
func (fc *fwdConn) register() (uint64, *fwdWaiter, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.err != nil {
		return 0, nil, fc.err
	}
	if fc.retiring {
		// retire may close the connection as soon as its last call ends:
		// a call registered now could be cut after its frame went out.
		return 0, nil, errConnRetiring
	}
	fc.nextID++
	wt := &fwdWaiter{ch: make(chan fwdResult, 1)}
	fc.pending[fc.nextID] = wt
	fc.lastUsed = time.Now()
	if fc.oneShot {
		fc.retiring = true
	}
	return fc.nextID, wt, nil
}

// call sends a request, and the rest of its body when it has More, and
// waits for the first frame of its answer. The rest is sent until the
// answer comes: then a read of it that blocks is interrupted, and call
// returns once nothing reads it any more (the HTTP server reads what is
// left of a body after its handler, which must not race a read).
func (fc *fwdConn) call(ctx context.Context, req *fwdRequest) (*fwdResponse, bool, error) {
	id, wt, err := fc.register()
	if err != nil {
		return nil, false, err
	}
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
	if req.More && req.rest != nil {
		stop, sending := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sending)
			fc.sendBody(ctx, id, req.rest, stop)
		}()
		defer func() {
			close(stop)
			select {
			case <-sending:
			default:
				if req.interrupt != nil {
					req.interrupt()
				}
				<-sending
			}
		}()
	}
	return fc.await(ctx, id, wt)
}

// await waits for the first frame of a call's answer.
func (fc *fwdConn) await(ctx context.Context, id uint64, wt *fwdWaiter) (*fwdResponse, bool, error) {
	select {
	case res := <-wt.ch:
		return res.resp, true, res.err
	case <-fc.broken:
		// An answer may have come just before the connection broke.
		select {
		case res := <-wt.ch:
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

// sendBody sends the rest of a streamed body in chunks of fwdChunk, until
// its end, until the answer came (stop), or until a write fails, which
// breaks the connection. A body that fails to read cancels the request.
func (fc *fwdConn) sendBody(ctx context.Context, id uint64, rest io.Reader, stop <-chan struct{}) {
	buf := make([]byte, fwdChunk)
	deadline, _ := ctx.Deadline()
	for {
		n, last, err := readChunk(rest, buf)
		if err != nil {
			fc.c.logger.Debug("forwarded body cut short", "leader", fc.c.addr, "error", err)
			fc.cancel(id)
			return
		}
		select {
		case <-stop:
			return
		default:
		}
		_, err = fc.out.write(ctx, &fwdRequest{ID: id, Body: buf[:n], More: !last}, fwdMaxFrame, deadline)
		if err != nil {
			if errors.Is(err, errWriteFailed) {
				fc.fail(fmt.Errorf("forward to %s: %w", fc.c.addr, err))
			}
			return
		}
		if last {
			return
		}
	}
}

// readChunk fills buf from r. end reports that r ended (io.EOF); any other
// error, io.ErrUnexpectedEOF of a client cut mid-body included, is the
// body's failure, never its end.
func readChunk(r io.Reader, buf []byte) (n int, end bool, err error) {
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

// cancel sends the cancel frame of a call that gave up: the leader cancels
// that request's context. A failed write breaks the connection, as for a
// request.
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
	wt := fc.pending[id]
	delete(fc.pending, id)
	closeNow := fc.retiring && len(fc.pending) == 0
	fc.mu.Unlock()
	if wt != nil && wt.pw != nil {
		wt.pw.CloseWithError(net.ErrClosed)
	}
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

// deliver hands a frame to its call: the first frame of an answer to the
// waiting call, the next ones of a streamed answer to its body. A body
// nobody reads any more breaks the connection, which cancels the request
// on the leader.
func (fc *fwdConn) deliver(resp *fwdResponse) {
	fc.mu.Lock()
	wt, ok := fc.pending[resp.ID]
	first := ok && wt.pw == nil
	var pr *io.PipeReader
	if first && resp.More && !resp.Abort {
		pr, wt.pw = io.Pipe()
	}
	more := ok && resp.More && !resp.Abort
	if ok && !more {
		delete(fc.pending, resp.ID)
	}
	closeNow := fc.retiring && len(fc.pending) == 0
	fc.mu.Unlock()
	switch {
	case !ok:
		fc.c.logger.Debug("dropped an answer no call waits for", "leader", fc.c.addr, "id", resp.ID)
	case first:
		if pr != nil {
			resp.stream = readCloser{io.MultiReader(bytes.NewReader(resp.Body), pr), pr}
		}
		wt.ch <- fwdResult{resp: resp}
	default:
		fc.feed(wt.pw, resp)
	}
	if closeNow {
		fc.fail(net.ErrClosed)
	}
}

// feed writes the next chunk of a streamed answer to its body.
func (fc *fwdConn) feed(pw *io.PipeWriter, resp *fwdResponse) {
	if resp.Abort {
		pw.CloseWithError(errAborted)
		return
	}
	if _, err := pw.Write(resp.Body); err != nil {
		fc.fail(fmt.Errorf("streamed answer of %s: %w", fc.c.addr, err))
		return
	}
	if !resp.More {
		pw.Close()
	}
}

// readCloser reads r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// errAborted is an answer the leader's handler cut short.
var errAborted = errors.New("the leader cut its answer short")

// forwarder sends a follower's requests that need the leader over the
// forwarding protocol and copies the answers back. Its guarantees are the
// protocol's (forward.go).
type forwarder struct {
	s      Server
	api    *apiBase
	logger hclog.Logger

	mu sync.Mutex
	// client forwards to the current leader.
	client *fwdClient
	// framed counts the answers the leader gave.
	framed atomic.Uint64
}

func newForwarder(api *apiBase, logger hclog.Logger) *forwarder {
	return &forwarder{s: api.s, api: api, logger: logger}
}

// serveOnLeader runs a request that needs the leader: through here, once
// this server leads, else on the leader, forwarded. It is a loop, not a
// handler that calls itself: it waits up to leaderWait for a leader,
// retrying only what the leader cannot have applied, then forwards or
// serves, once.
func (f *forwarder) serveOnLeader(w http.ResponseWriter, r *http.Request, here http.Handler) {
	req, err := f.outbound(w, r)
	if err != nil {
		f.api.setMeta(w)
		writeError(w, err)
		return
	}
	deadline := time.Now().Add(leaderWait)
	var lastErr error
	for {
		if f.s.IsLeader() {
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(req.Body), orEmpty(req.rest)))
			here.ServeHTTP(w, r)
			return
		}
		pause := 50 * time.Millisecond
		if leader, _ := f.s.Leader(); leader != "" && leader != f.s.RPCAddr() {
			done, err := f.forwardTo(w, r, leader, req)
			if done {
				return
			}
			lastErr, pause = err, 100*time.Millisecond
		}
		if time.Now().After(deadline) {
			f.noLeader(w, lastErr)
			return
		}
		select {
		case <-r.Context().Done():
			f.abandon(w, r)
			return
		case <-time.After(pause):
		}
	}
}

func orEmpty(r io.Reader) io.Reader {
	if r == nil {
		return http.NoBody
	}
	return r
}

// outbound is the request as it is forwarded: its body read whole (at most
// maxBody), or, for a snapshot, streamed: its first chunk read, the rest
// left in req.rest, a blocked read of which req.interrupt ends.
func (f *forwarder) outbound(w http.ResponseWriter, r *http.Request) (*fwdRequest, error) {
	header := r.Header.Clone()
	header.Set(headerForwarded, f.s.NodeID())
	req := &fwdRequest{Method: r.Method, URI: r.URL.RequestURI(), Host: r.Host, Header: header, Stream: isSnapshotPath(r.URL.Path)}
	if !req.Stream {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			return nil, decodeError(err)
		}
		req.Body = body
		return req, nil
	}
	head := make([]byte, fwdChunk)
	n, end, err := readChunk(r.Body, head)
	if err != nil {
		return nil, decodeError(err)
	}
	req.Body = head[:n]
	if !end {
		req.More, req.rest = true, r.Body
		rc := http.NewResponseController(w)
		req.interrupt = func() { _ = rc.SetReadDeadline(time.Now()) }
	}
	return req, nil
}

// forwardTo sends the request to the leader once. done reports that w has
// its answer: the leader's, or a 502 when the leader was lost after the
// request went out; else err says why it may be sent again.
func (f *forwarder) forwardTo(w http.ResponseWriter, r *http.Request, leader string, req *fwdRequest) (done bool, err error) {
	limit := fwdCallLimit
	if req.Stream {
		limit = snapshotTransferTimeout
	}
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	client := f.leaderClient(leader)
	var resp *fwdResponse
	var sent bool
	if req.Stream {
		resp, sent, err = client.callStream(ctx, req)
	} else {
		resp, sent, err = client.call(ctx, req)
	}
	switch {
	case err == nil && resp.Abort:
		err = errAborted
	case err == nil && resp.Header.Get(headerNotLeader) != "":
		if resp.stream != nil {
			resp.stream.Close()
		}
		if req.More {
			// The rest of the upload went to a server that refused it:
			// nothing was applied, but the body cannot be sent again.
			f.noLeader(w, fmt.Errorf("%s answered %w while the upload was sent", leader, structs.ErrNotLeader))
			return true, nil
		}
		return false, fmt.Errorf("%s: %w", leader, structs.ErrNotLeader)
	}
	if err != nil && !sent {
		return false, err
	}
	if err != nil {
		f.api.setMeta(w)
		writeError(w, &HTTPError{Code: http.StatusBadGateway,
			Msg: fmt.Sprintf("lost the leader %s while forwarding; the request may or may not have been applied: %v", leader, err)})
		return true, nil
	}
	f.framed.Add(1)
	f.copyAnswer(w, r, resp)
	return true, nil
}

// copyAnswer writes the leader's answer, headers included, in place of
// this server's.
func (f *forwarder) copyAnswer(w http.ResponseWriter, r *http.Request, resp *fwdResponse) {
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.Status)
	if resp.stream == nil {
		_, _ = w.Write(resp.Body)
		return
	}
	defer resp.stream.Close()
	if _, err := io.Copy(w, resp.stream); err != nil {
		// The status is sent: abort the connection so the client sees a
		// broken answer rather than a short one.
		f.logger.Warn("forwarded answer cut short", "path", r.URL.Path, "error", err)
		panic(http.ErrAbortHandler)
	}
}

// noLeader answers 503: no leader took the request, nothing was applied.
func (f *forwarder) noLeader(w http.ResponseWriter, cause error) {
	f.api.setMeta(w)
	msg := structs.ErrNoLeader.Error()
	if cause != nil {
		msg += ": " + cause.Error()
	}
	writeError(w, &HTTPError{Code: http.StatusServiceUnavailable, Msg: msg})
}

// abandon answers a request whose wait for a leader ended early: the
// server shuts down, or the client went away. Nothing was applied; a
// handler that returned without writing would have answered 200.
func (f *forwarder) abandon(w http.ResponseWriter, r *http.Request) {
	cause := errClosed
	if !f.s.ShuttingDown() {
		cause = fmt.Errorf("request cancelled: %w", context.Cause(r.Context()))
	}
	f.noLeader(w, cause)
}

// leaderClient returns the client of the leader at addr, and retires the
// client of a previous leader.
func (f *forwarder) leaderClient(addr string) *fwdClient {
	f.mu.Lock()
	if f.client != nil && f.client.addr == addr {
		defer f.mu.Unlock()
		return f.client
	}
	old := f.client
	f.client = newFwdClient(f.s, addr, f.logger)
	c := f.client
	f.mu.Unlock()
	if old != nil {
		old.retire()
	}
	return c
}
