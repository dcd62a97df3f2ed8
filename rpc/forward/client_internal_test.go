package forward

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/structs"
)

// TestForwardClient_BlackholedLeader: a dial waiting for a leader that
// never answers its version byte holds neither the client's lock nor the
// retire of the client.
func TestForwardClient_BlackholedLeader(t *testing.T) {
	// The leader accepts and never answers.
	c := testLeader(t, func(net.Conn) {})
	called := make(chan struct{})
	go func() {
		defer close(called)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _, _ = c.Call(ctx, &Request{Method: "POST", URI: "/", Host: c.addr})
	}()
	time.Sleep(200 * time.Millisecond)
	begin := time.Now()
	c.Retire()
	if d := time.Since(begin); d > 500*time.Millisecond {
		t.Fatalf("retire waited %s for a dial", d)
	}
	<-called
}

// fakeConn is a connection whose writes do what write says, and whose
// reads block until it closes.
type fakeConn struct {
	net.Conn
	write  func(p []byte) (int, error)
	wrote  atomic.Int64
	closed chan struct{}
	once   sync.Once
}

func newFakeConn(write func(p []byte) (int, error)) *fakeConn {
	a, _ := net.Pipe()
	return &fakeConn{Conn: a, write: write, closed: make(chan struct{})}
}

func (c *fakeConn) Write(p []byte) (int, error) {
	n, err := c.write(p)
	c.wrote.Add(int64(n))
	return n, err
}
func (c *fakeConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return c.Conn.Close() }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

func fakeFwdConn(nc net.Conn) *clientConn {
	c := NewClient("leader:4647", nil, hclog.NewNullLogger(), time.Minute)
	return newClientConn(c, nc)
}

// TestForwardConn_WriteFailureBreaks: a write error, even with no byte
// out (a TLS write timeout stays on the connection), breaks the
// connection; the error names the leader and still matches what it wraps.
func TestForwardConn_WriteFailureBreaks(t *testing.T) {
	nc := newFakeConn(func(p []byte) (int, error) { return 0, os.ErrDeadlineExceeded })
	fc := fakeFwdConn(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, sent, err := fc.call(ctx, &Request{Method: "POST", URI: "/", Host: "leader:4647"})
	if sent || !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "forward to leader:4647") {
		t.Fatalf("failed write: %v, %v", sent, err)
	}
	if fc.usable(time.Minute) {
		t.Fatal("the connection stays usable after a failed write")
	}
	select {
	case <-nc.closed:
	default:
		t.Fatal("the connection is not closed")
	}
}

// TestForwardConn_DeadlineBeforeWrite: a call whose deadline passes while
// it waits for the frame writer writes nothing and reports not sent.
func TestForwardConn_DeadlineBeforeWrite(t *testing.T) {
	nc := newFakeConn(func(p []byte) (int, error) { return len(p), nil })
	fc := fakeFwdConn(nc)
	fc.out.mu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	go func() {
		time.Sleep(200 * time.Millisecond)
		fc.out.mu.Unlock()
	}()
	_, sent, err := fc.call(ctx, &Request{Method: "POST", URI: "/", Host: "leader:4647"})
	if sent || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "forward to leader:4647") {
		t.Fatalf("call past its deadline: %v, %v", sent, err)
	}
	if n := nc.wrote.Load(); n != 0 {
		t.Fatalf("%d bytes written", n)
	}
	if !fc.usable(time.Minute) {
		t.Fatal("a call that wrote nothing broke the connection")
	}
}

// TestForwardConn_RetiringRefuses: a retiring connection refuses a call
// unsent, so that the caller takes another connection.
func TestForwardConn_RetiringRefuses(t *testing.T) {
	nc := newFakeConn(func(p []byte) (int, error) { return len(p), nil })
	fc := fakeFwdConn(nc)
	fc.mu.Lock()
	fc.retiring = true
	fc.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, sent, err := fc.call(ctx, &Request{Method: "POST", URI: "/", Host: "leader:4647"})
	if sent || !errors.Is(err, errConnRetiring) || nc.wrote.Load() != 0 {
		t.Fatalf("call on a retiring connection: %v, %v, %d bytes", sent, err, nc.wrote.Load())
	}
}

// TestForwardClient_OlderLeader: a peer that does not know the protocol
// byte closes the connection (the mux's answer to an unknown byte) before
// a frame is sent. The call fails as not sent with errUnsupported, as a
// failed dial does, so that the follower retries it until its deadline;
// each try dials again.
func TestForwardClient_OlderLeader(t *testing.T) {
	var dials atomic.Int32
	c := testLeader(t, func(conn net.Conn) {
		dials.Add(1)
		conn.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 1; i <= 2; i++ {
		_, sent, err := c.Call(ctx, &Request{Method: "POST", URI: "/v1/pause", Host: c.addr})
		if !errors.Is(err, errUnsupported) || sent {
			t.Fatalf("call %d to an older leader: sent %v, err %v; want not sent, %v", i, sent, err, errUnsupported)
		}
		if n := dials.Load(); n != int32(i) {
			t.Fatalf("%d dials after %d calls", n, i)
		}
	}
	_, sent, err := c.CallStream(ctx, &Request{Method: "GET", URI: "/v1/operator/snapshot", Host: c.addr, Stream: true})
	if !errors.Is(err, errUnsupported) || sent {
		t.Fatalf("streamed call to an older leader: sent %v, err %v", sent, err)
	}
}

// TestForwardClient_SilentLeader: a leader cut off after it accepted the
// request (its packets dropped: the frame went out, nothing comes back,
// not even a keepalive) fails the call as sent within the silence limit,
// not at CallLimit; the connection is not used again.
func TestForwardClient_SilentLeader(t *testing.T) {
	got := make(chan *Request, 4)
	c := testLeader(t, func(conn net.Conn) {
		_, _ = conn.Write([]byte{Version})
		br := bufio.NewReader(conn)
		// The frame that asks for keepalives, then the request.
		for range 2 {
			buf, err := readFrame(br, MaxFrame)
			if err != nil {
				return
			}
			req := &Request{}
			if err := codec.NewDecoderBytes(buf, structs.NewMsgpackHandle()).Decode(req); err != nil {
				return
			}
			got <- req
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), CallLimit)
	defer cancel()
	begin := time.Now()
	_, sent, err := c.Call(ctx, &Request{Method: "POST", URI: "/v1/pause", Host: c.addr})
	took := time.Since(begin)
	if !sent || !errors.Is(err, errSilent) {
		t.Fatalf("call to a silent leader: sent %v, err %v; want sent, %v", sent, err, errSilent)
	}
	if took < SilenceLimit || took > SilenceLimit+2*time.Second {
		t.Fatalf("the call failed after %s, want about %s", took, SilenceLimit)
	}
	for i, want := range []string{"", "/v1/pause"} {
		select {
		case req := <-got:
			if req.Keepalive != (i == 0) || req.URI != want {
				t.Fatalf("frame %d the leader read: %+v", i, req)
			}
		default:
			t.Fatalf("the leader read %d frames, want 2", i)
		}
	}
	for _, fc := range c.conns {
		if fc != nil && fc.usable(time.Minute) {
			t.Fatal("the silent connection stays in the pool")
		}
	}
}
