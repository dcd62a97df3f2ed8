package forward

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/structs"
)

// fakeLeader accepts forwarding connections and answers each request
// with what answer returns: frames to send (any value), or nil to cut the
// connection.
func fakeLeader(t *testing.T, answer func(req *Request) []any) *Client {
	t.Helper()
	h := structs.NewMsgpackHandle()
	return testLeader(t, func(conn net.Conn) {
		defer conn.Close()
		_, _ = conn.Write([]byte{Version})
		br := bufio.NewReader(conn)
		out := newFrameWriter(conn, h)
		for {
			buf, err := readFrame(br, MaxFrame)
			if err != nil {
				return
			}
			req := &Request{}
			if err := codec.NewDecoderBytes(buf, h).Decode(req); err != nil {
				return
			}
			if req.Keepalive && req.Method == "" {
				// The frame that asks for keepalives starts no
				// request; this leader sends none.
				continue
			}
			frames := answer(req)
			if frames == nil {
				return
			}
			for _, f := range frames {
				if raw, ok := f.([]byte); ok {
					_, _ = conn.Write(raw)
					continue
				}
				if _, err := out.write(context.Background(), f, MaxAnswerFrame, time.Time{}); err != nil {
					return
				}
			}
		}
	})
}

// testLeader listens on a local port as a leader that runs serve on each
// connection it accepts, in a goroutine of its own, and closes the
// connections when the test ends. It returns a client of that leader.
func testLeader(t *testing.T, serve func(net.Conn)) *Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		defer func() {
			for _, conn := range held {
				conn.Close()
			}
		}()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
			go serve(conn)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	addr := ln.Addr().String()
	return NewClient(addr, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}, hclog.NewNullLogger(), time.Minute)
}

func testCall(t *testing.T, c *Client) (*Response, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Call(ctx, &Request{Method: "POST", URI: "/v1/pause", Host: c.addr, Header: http.Header{}, Body: []byte("{}")})
}

// TestForwardClient_LyingLeader: answers for IDs no call waits for are
// dropped, never handed to another call; an answer that does not decode
// breaks the connection, fails its call as possibly applied, and the next
// call dials again.
func TestForwardClient_LyingLeader(t *testing.T) {
	var calls atomic.Int32
	c := fakeLeader(t, func(req *Request) []any {
		switch calls.Add(1) {
		case 1:
			return []any{
				&Response{ID: req.ID + 1000, Status: 500},
				&Response{ID: 0, Status: 500},
				&Response{ID: req.ID, Status: 201, Body: []byte("mine")},
				&Response{ID: req.ID, Status: 500},
			}
		case 2:
			return []any{[]byte{0, 0, 0, 3, 0xc1, 0xc1, 0xc1}}
		case 3:
			return []any{[]byte{0xff, 0xff, 0xff, 0xff}}
		case 4:
			return nil
		}
		return []any{&Response{ID: req.ID, Status: 202}}
	})
	resp, sent, err := testCall(t, c)
	if err != nil || !sent || resp.Status != 201 || string(resp.Body) != "mine" {
		t.Fatalf("first call: %+v, %v, %v", resp, sent, err)
	}
	// The second call's answer must not be the duplicate of the first's.
	for i := 0; i < 3; i++ {
		if resp, sent, err := testCall(t, c); err == nil || !sent {
			t.Fatalf("call %d to a leader that answers garbage or hangs up: %+v, %v, %v", i+2, resp, sent, err)
		}
	}
	resp, sent, err = testCall(t, c)
	if err != nil || !sent || resp.Status != 202 {
		t.Fatalf("call after the broken connections: %+v, %v, %v", resp, sent, err)
	}
}

// TestForwardClient_AbandonedAndFailedDial: a call that times out leaves
// its answer to be dropped and sends the leader a cancel frame, and a
// failed dial is reported as not sent.
func TestForwardClient_AbandonedAndFailedDial(t *testing.T) {
	release := make(chan struct{})
	cancels := make(chan uint64, 8)
	var slowID atomic.Uint64
	c := fakeLeader(t, func(req *Request) []any {
		if req.Cancel {
			cancels <- req.ID
			return []any{}
		}
		if req.Header.Get("Slow") != "" {
			slowID.Store(req.ID)
			<-release
		}
		return []any{&Response{ID: req.ID, Status: 200, Body: []byte(req.Header.Get("Slow") + req.Header.Get("Fast"))}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, sent, err := c.Call(ctx, &Request{Method: "POST", URI: "/", Host: c.addr, Header: http.Header{"Slow": {"slow"}}})
	cancel()
	if err == nil || !sent || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned call: %v, %v", sent, err)
	}
	close(release)
	// The leader is told to cancel the abandoned request.
	select {
	case id := <-cancels:
		if id != slowID.Load() {
			t.Fatalf("cancel frame for ID %d, the abandoned call was %d", id, slowID.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no cancel frame for the abandoned call")
	}
	for i := 0; i < 4; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, _, err := c.Call(ctx, &Request{Method: "POST", URI: "/", Host: c.addr, Header: http.Header{"Fast": {"fast"}}})
		cancel()
		if err != nil || string(resp.Body) != "fast" {
			t.Fatalf("call after an abandoned one: %+v, %v", resp, err)
		}
	}

	dead := NewClient("127.0.0.1:1", func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", "127.0.0.1:1")
	}, hclog.NewNullLogger(), 0)
	if _, sent, err := testCall(t, dead); err == nil || sent {
		t.Fatalf("failed dial: %v, %v", sent, err)
	}
}

// TestReadChunk_CutBodyIsNoEnd: a client's body cut mid-way (the HTTP
// server's io.ErrUnexpectedEOF) fails the upload instead of ending it, so
// the leader never restores a truncated archive as if it were whole.
func TestReadChunk_CutBodyIsNoEnd(t *testing.T) {
	buf := make([]byte, 8)
	cut := io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(io.ErrUnexpectedEOF))
	if n, end, err := ReadChunk(cut, buf); !errors.Is(err, io.ErrUnexpectedEOF) || end || n != 3 {
		t.Fatalf("cut body: %d bytes, end %v, %v", n, end, err)
	}
	if n, end, err := ReadChunk(strings.NewReader("abc"), buf); err != nil || !end || n != 3 {
		t.Fatalf("short body: %d bytes, end %v, %v", n, end, err)
	}
	if n, end, err := ReadChunk(strings.NewReader("0123456789"), buf); err != nil || end || n != 8 {
		t.Fatalf("long body: %d bytes, end %v, %v", n, end, err)
	}
}
