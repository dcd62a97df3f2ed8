package forward

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/structs"
)

// The follower's side of the protocol: a pool of connections to the
// leader that calls share, and a connection of its own for each streamed
// call.

// errUnsupported is a peer that does not speak the forwarding protocol:
// it closed the connection instead of answering its version. Nothing was
// sent; the call fails as a failed dial does.
var errUnsupported = errors.New("the leader does not speak the forwarding protocol")

// ErrAborted is an answer the leader's handler cut short.
var ErrAborted = errors.New("the leader cut its answer short")

// errSilent is a connection on which calls waited while nothing arrived,
// not even a keepalive, for the silence limit: the leader is gone or cut
// off.
var errSilent = errors.New("the leader sent nothing, not even a keepalive")

// Client forwards requests to one leader over up to poolSize connections.
// Calls share a connection: each waits for the answer of its ID, which the
// connection's reader hands over.
type Client struct {
	addr   string
	dial   func(ctx context.Context) (net.Conn, error)
	handle *codec.MsgpackHandle
	logger hclog.Logger
	// reuse is how long after its last request a connection may still
	// take a call: half the leader's idle timeout, which the leader counts
	// from the last frame it read, so that it never closes for idleness a
	// connection a frame is on its way to.
	reuse time.Duration
	// silence is how long a connection may send nothing while calls wait
	// on it (SilenceLimit), check how often a reader looks.
	silence, check time.Duration

	mu      sync.Mutex
	conns   [poolSize]*clientConn
	next    int
	retired bool
}

// NewClient returns a client of the leader at addr: dial opens a
// connection to it (the protocol byte sent), and a connection last used
// reuse ago is not used again.
func NewClient(addr string, dial func(ctx context.Context) (net.Conn, error), logger hclog.Logger, reuse time.Duration) *Client {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Client{
		addr: addr, dial: dial,
		handle: structs.NewMsgpackHandle(),
		logger: logger, reuse: reuse,
		silence: SilenceLimit, check: SilenceLimit / 8,
	}
}

// Addr is the leader's address.
func (c *Client) Addr() string { return c.addr }

// Call sends one request and waits for the first frame of its answer.
// sent reports whether the leader may have received it: an error after
// that must not be retried. A connection that retires between conn and
// its call refuses the call unsent, and the call takes another.
func (c *Client) Call(ctx context.Context, req *Request) (resp *Response, sent bool, err error) {
	for try := 0; ; try++ {
		conn, err := c.conn(ctx)
		if err != nil {
			return nil, false, err
		}
		resp, sent, err = conn.call(ctx, req)
		if !errors.Is(err, errConnRetiring) || try == poolSize {
			return resp, sent, err
		}
	}
}

// CallStream sends a streamed request on a connection of its own, which
// closes with its answer: the body's first chunk is in req, the rest (when
// req.More) is read from req.Rest as the leader takes it. The answer's
// body, when it has More, is read from resp.BodyStream.
func (c *Client) CallStream(ctx context.Context, req *Request) (resp *Response, sent bool, err error) {
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
	fc := newClientConn(c, nc)
	fc.oneShot = true
	go fc.readLoop()
	return fc.call(ctx, req)
}

// open dials the leader, reads its version byte and asks it for
// keepalives (a frame that starts no request), within DialTimeout.
func (c *Client) open(ctx context.Context) (net.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	nc, err := c.dial(dctx)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", c.addr, err)
	}
	err = readVersion(dctx, nc)
	if err == nil {
		deadline, _ := dctx.Deadline()
		_, err = newFrameWriter(nc, c.handle).write(dctx, &Request{Keepalive: true}, MaxFrame, deadline)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open forwarding to %s: %w", c.addr, err)
	}
	return nc, nil
}

// conn returns a connection to call on, dialing one when its slot is
// empty, broken or idle too long. The dial and the version byte (up to
// DialTimeout) run without c.mu, so a leader that does not answer holds
// up only the calls that wait for that dial.
func (c *Client) conn(ctx context.Context) (*clientConn, error) {
	c.mu.Lock()
	if c.retired {
		c.mu.Unlock()
		return nil, fmt.Errorf("forward to %s: %w", c.addr, net.ErrClosed)
	}
	i := c.next
	c.next = (c.next + 1) % poolSize
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
	fc := newClientConn(c, nc)
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
			return errUnsupported
		}
		return err
	}
	if b[0] != Version {
		return fmt.Errorf("%w: version %d", errUnsupported, b[0])
	}
	return nil
}

// Retire closes the client: its connections close once their calls are
// answered.
func (c *Client) Retire() {
	c.mu.Lock()
	c.retired = true
	conns := c.conns
	c.conns = [poolSize]*clientConn{}
	c.mu.Unlock()
	for _, fc := range conns {
		if fc != nil {
			fc.retire()
		}
	}
}

// result is what a waiting call gets: the first frame of an answer, or
// the connection's error.
type result struct {
	resp *Response
	err  error
}

// waiter is a call waiting on a connection: ch gets the first frame of its
// answer; pw, once that frame had More, takes the rest of the body.
type waiter struct {
	ch chan result
	pw *io.PipeWriter
}

// errConnRetiring is a connection that takes no new call: the call was
// not sent, and takes another connection.
var errConnRetiring = errors.New("the forwarding connection is retiring")

// clientConn is one connection of a Client.
type clientConn struct {
	c    *Client
	conn net.Conn

	out *frameWriter
	// oneShot is a connection of one streamed call: it retires with it.
	oneShot bool

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]*waiter
	err      error
	retiring bool
	// lastUsed is when the last request was sent; busySince when a call
	// began to wait on a connection none waited on.
	lastUsed, busySince time.Time

	// broken is closed with the connection; err says why.
	broken    chan struct{}
	closeOnce sync.Once
}

func newClientConn(c *Client, conn net.Conn) *clientConn {
	return &clientConn{
		c: c, conn: conn,
		out:      newFrameWriter(conn, c.handle),
		pending:  map[uint64]*waiter{},
		lastUsed: time.Now(),
		broken:   make(chan struct{}),
	}
}

// usable reports whether the connection may take a new call.
func (fc *clientConn) usable(reuse time.Duration) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.err != nil || fc.retiring {
		return false
	}
	return len(fc.pending) > 0 || time.Since(fc.lastUsed) < reuse
}

// retire closes the connection once no call waits on it.
func (fc *clientConn) retire() {
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
func (fc *clientConn) fail(err error) {
	fc.closeOnce.Do(func() {
		fc.mu.Lock()
		fc.err = err
		pending := fc.pending
		fc.pending = map[uint64]*waiter{}
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
func (fc *clientConn) register() (uint64, *waiter, error) {
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
	wt := &waiter{ch: make(chan result, 1)}
	if len(fc.pending) == 0 {
		fc.busySince = time.Now()
	}
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
func (fc *clientConn) call(ctx context.Context, req *Request) (*Response, bool, error) {
	id, wt, err := fc.register()
	if err != nil {
		return nil, false, err
	}
	req.ID = id
	deadline, _ := ctx.Deadline()
	n, err := fc.out.write(ctx, req, MaxFrame, deadline)
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
	if req.More && req.Rest != nil {
		stop, sending := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(sending)
			fc.sendBody(ctx, id, req.Rest, stop)
		}()
		defer func() {
			close(stop)
			select {
			case <-sending:
			default:
				if req.Interrupt != nil {
					req.Interrupt()
				}
				<-sending
			}
		}()
	}
	return fc.await(ctx, id, wt)
}

// await waits for the first frame of a call's answer.
func (fc *clientConn) await(ctx context.Context, id uint64, wt *waiter) (*Response, bool, error) {
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

// sendBody sends the rest of a streamed body in chunks of Chunk, until
// its end, until the answer came (stop), or until a write fails, which
// breaks the connection. A body that fails to read cancels the request.
func (fc *clientConn) sendBody(ctx context.Context, id uint64, rest io.Reader, stop <-chan struct{}) {
	buf := make([]byte, Chunk)
	deadline, _ := ctx.Deadline()
	for {
		n, last, err := ReadChunk(rest, buf)
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
		_, err = fc.out.write(ctx, &Request{ID: id, Body: buf[:n], More: !last}, MaxFrame, deadline)
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

// cancel sends the cancel frame of a call that gave up: the leader cancels
// that request's context. A failed write breaks the connection, as for a
// request.
func (fc *clientConn) cancel(id uint64) {
	_, err := fc.out.write(context.Background(), &Request{ID: id, Cancel: true}, MaxFrame, time.Now().Add(cancelTimeout))
	if err != nil && errors.Is(err, errWriteFailed) {
		fc.fail(fmt.Errorf("forward to %s: %w", fc.c.addr, err))
	}
}

// forget drops a call nobody waits for any more; a retired connection
// closes with its last call.
func (fc *clientConn) forget(id uint64) {
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
// call waits for (the call gave up, or the peer lies) is dropped, and so
// is a keepalive; a frame that is too large or does not decode breaks the
// connection, and so does a leader silent for the silence limit while
// calls wait (liveReader).
func (fc *clientConn) readLoop() {
	br := bufio.NewReaderSize(liveReader{fc}, 32<<10)
	dec := codec.NewDecoderBytes(nil, fc.c.handle)
	for {
		// Each frame has its own buffer: the answer's body may point into
		// it.
		buf, err := readFrame(br, MaxAnswerFrame)
		if err == nil {
			resp := &Response{}
			dec.ResetBytes(buf)
			if err = dec.Decode(resp); err == nil {
				if !resp.Keepalive {
					fc.deliver(resp)
				}
				continue
			}
			fc.c.logger.Warn("closed a forwarding connection: bad answer", "leader", fc.c.addr, "error", err)
		}
		fc.fail(fmt.Errorf("connection to %s: %w", fc.c.addr, err))
		return
	}
}

// liveReader reads a connection's answers, and fails with errSilent once
// calls waited on it for the silence limit while nothing arrived. The
// silence counts from when this read began, or from when the first of the
// calls waiting began to wait if that is later: time the reader spent
// handing a streamed answer to a slow reader is not the leader's.
type liveReader struct{ fc *clientConn }

func (r liveReader) Read(p []byte) (int, error) {
	fc := r.fc
	begin := time.Now()
	for {
		// The deadline wakes the reader to look; a read that times out
		// loses nothing, in TLS too.
		_ = fc.conn.SetReadDeadline(time.Now().Add(fc.c.check))
		n, err := fc.conn.Read(p)
		if n > 0 || err == nil {
			if isTimeout(err) {
				err = nil
			}
			return n, err
		}
		if !isTimeout(err) {
			return 0, err
		}
		if d := fc.silentFor(begin); d >= fc.c.silence {
			return 0, fmt.Errorf("%w, for %s while calls waited", errSilent, d.Round(time.Millisecond))
		}
	}
}

// silentFor is how long calls have waited on the connection since begin;
// zero when none waits.
func (fc *clientConn) silentFor(begin time.Time) time.Duration {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.pending) == 0 {
		return 0
	}
	if fc.busySince.After(begin) {
		begin = fc.busySince
	}
	return time.Since(begin)
}

// deliver hands a frame to its call: the first frame of an answer to the
// waiting call, the next ones of a streamed answer to its body. A body
// nobody reads any more breaks the connection, which cancels the request
// on the leader.
func (fc *clientConn) deliver(resp *Response) {
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
			resp.BodyStream = readCloser{io.MultiReader(bytes.NewReader(resp.Body), pr), pr}
		}
		wt.ch <- result{resp: resp}
	default:
		fc.feed(wt.pw, resp)
	}
	if closeNow {
		fc.fail(net.ErrClosed)
	}
}

// feed writes the next chunk of a streamed answer to its body.
func (fc *clientConn) feed(pw *io.PipeWriter, resp *Response) {
	if resp.Abort {
		pw.CloseWithError(ErrAborted)
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
