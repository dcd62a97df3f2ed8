package forward

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/structs"
)

// testServer serves the forwarding protocol with handler on a local
// listener, without a cluster, with the HTTP port's default timeouts,
// after each of tune changed the server; it returns the server and a way
// to open a raw connection to it.
func testServer(t *testing.T, handler http.HandlerFunc, tune ...func(*Server)) (*Server, func() *testPeer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	f := NewServer(Options{
		Handler: handler, Logger: hclog.NewNullLogger(),
		IdleTimeout: 90 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute,
		StreamTimeout: 30 * time.Minute,
		Goroutines:    &wg,
		BaseContext:   func() context.Context { return ctx },
		WriteError: func(w http.ResponseWriter, code int, msg string) {
			w.WriteHeader(code)
			_, _ = io.WriteString(w, msg)
		},
	})
	for _, fn := range tune {
		fn(f)
	}
	wg.Add(1)
	go f.Serve(ln)
	t.Cleanup(func() {
		ln.Close()
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		defer scancel()
		_ = f.Shutdown(sctx)
		wg.Wait()
	})
	return f, func() *testPeer {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		p := &testPeer{t: t, conn: conn, br: bufio.NewReader(conn), h: structs.NewMsgpackHandle()}
		p.out = newFrameWriter(conn, p.h)
		if v, err := p.br.ReadByte(); err != nil || v != Version {
			t.Fatalf("version byte: %#x, %v", v, err)
		}
		return p
	}
}

// testPeer is a follower's raw forwarding connection.
type testPeer struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	h    *codec.MsgpackHandle
	out  *frameWriter
}

func (p *testPeer) send(req *Request) {
	p.t.Helper()
	if req.Method == "" && !req.Cancel {
		req.Method, req.URI, req.Host = "POST", "/v1/pause", "leader:4647"
	}
	if _, err := p.out.write(context.Background(), req, MaxFrame, time.Time{}); err != nil {
		p.t.Fatal(err)
	}
}

func (p *testPeer) receive() (*Response, error) {
	buf, err := readFrame(p.br, MaxAnswerFrame)
	if err != nil {
		return nil, err
	}
	resp := &Response{}
	return resp, codec.NewDecoderBytes(buf, p.h).Decode(resp)
}

// TestForwardServer_ShutdownDrains: Shutdown stops reading frames, lets the
// running request answer, then closes the connection; past its deadline
// it closes the connections at once.
func TestForwardServer_ShutdownDrains(t *testing.T) {
	var runs atomic.Int32
	started := make(chan struct{}, 8)
	f, open := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		started <- struct{}{}
		// A write that goes on after the server's requests are cancelled,
		// as a raft apply does.
		time.Sleep(500 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	})
	p := open()
	p.send(&Request{ID: 7})
	<-started
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Shutdown(ctx) }()
	resp, err := p.receive()
	if err != nil || resp.ID != 7 || resp.Status != http.StatusCreated {
		t.Fatalf("the running request's answer: %+v, %v", resp, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("Shutdown took %s", d)
	}
	if _, err := p.receive(); err == nil {
		t.Fatal("the connection stays open after the drain")
	}
	// A frame sent during the drain is not run.
	_, _ = p.out.write(context.Background(), &Request{ID: 8, Method: "POST", URI: "/v1/pause", Host: "leader:4647"}, MaxFrame, time.Now().Add(time.Second))
	time.Sleep(100 * time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d requests ran", n)
	}
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	var nilServer *Server
	if err := nilServer.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of no server: %v", err)
	}
}

// TestForwardServer_ShutdownDeadline: a request still running at
// Shutdown's deadline loses its connection, and Shutdown returns then.
func TestForwardServer_ShutdownDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 1)
	f, open := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	})
	p := open()
	p.send(&Request{ID: 1})
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	if err := f.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline: %v", err)
	}
	if d := time.Since(begin); d > time.Second {
		t.Fatalf("Shutdown took %s", d)
	}
	if _, err := p.receive(); err == nil {
		t.Fatal("the connection stays open past the deadline")
	}
}

// TestForwardServer_CancelFrame: a cancel frame cancels its request's
// context on the leader; an unknown ID is ignored.
func TestForwardServer_CancelFrame(t *testing.T) {
	_, open := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Deadline(); !ok {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		select {
		case <-r.Context().Done():
			w.WriteHeader(http.StatusServiceUnavailable)
		case <-time.After(10 * time.Second):
			w.WriteHeader(http.StatusOK)
		}
	})
	p := open()
	p.send(&Request{ID: 1})
	p.send(&Request{ID: 99, Cancel: true})
	p.send(&Request{ID: 1, Cancel: true})
	begin := time.Now()
	resp, err := p.receive()
	if err != nil || resp.ID != 1 || resp.Status != http.StatusServiceUnavailable {
		t.Fatalf("cancelled request: %+v, %v", resp, err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("the cancelled request answered after %s", d)
	}
}

// TestForwardServer_HeaderLimit: a frame whose headers are over the HTTP
// server's limit is answered 431, and the connection keeps serving.
func TestForwardServer_HeaderLimit(t *testing.T) {
	_, open := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	p := open()
	p.send(&Request{ID: 1, Header: http.Header{"X-Big": {strings.Repeat("a", MaxHeaderBytes)}}})
	resp, err := p.receive()
	if err != nil || resp.ID != 1 || resp.Status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("headers over the limit: %+v, %v", resp, err)
	}
	p.send(&Request{ID: 2, Header: http.Header{"X-Small": {"a"}}})
	resp, err = p.receive()
	if err != nil || resp.ID != 2 || resp.Status != http.StatusCreated {
		t.Fatalf("request after the refused one: %+v, %v", resp, err)
	}
}

// TestForwardServer_StreamedBodyAndAnswer: a body sent in chunks reaches
// the route whole, and a streamed answer comes back in frames of at most
// Chunk, the first with the status; the chunks of a request the route
// answered without reading them are dropped, and the connection keeps
// serving.
func TestForwardServer_StreamedBodyAndAnswer(t *testing.T) {
	_, open := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.Copy(w, r.Body)
	})
	p := open()
	chunk := func(id uint64, b []byte, more bool) {
		t.Helper()
		if _, err := p.out.write(context.Background(), &Request{ID: id, Body: b, More: more}, MaxFrame, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]byte, 5*Chunk+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	p.send(&Request{ID: 1, Method: "PUT", URI: "/echo", Host: "leader", Stream: true, More: true, Body: want[:Chunk]})
	for off := Chunk; off < len(want); off += Chunk {
		end := min(off+Chunk, len(want))
		chunk(1, want[off:end], end < len(want))
	}
	var got []byte
	for frames := 0; ; frames++ {
		resp, err := p.receive()
		if err != nil || resp.ID != 1 || len(resp.Body) > Chunk {
			t.Fatalf("frame %d: %d bytes, %v", frames, len(resp.Body), err)
		}
		if frames == 0 && resp.Status != http.StatusAccepted {
			t.Fatalf("first frame: status %d", resp.Status)
		}
		got = append(got, resp.Body...)
		if !resp.More {
			break
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echoed %d bytes, sent %d, or they differ", len(got), len(want))
	}

	p.send(&Request{ID: 2, Method: "PUT", URI: "/refuse", Host: "leader", Stream: true, More: true, Body: want[:Chunk]})
	if resp, err := p.receive(); err != nil || resp.ID != 2 || resp.Status != http.StatusForbidden || resp.More {
		t.Fatalf("refused upload: %v, %v", resp != nil && resp.Status == http.StatusForbidden, err)
	}
	for i := 0; i < 2*bodyQueue; i++ {
		chunk(2, want[:Chunk], true)
	}
	chunk(2, nil, false)
	p.send(&Request{ID: 3, Method: "PUT", URI: "/echo", Host: "leader", Body: []byte("after")})
	resp, err := p.receive()
	if err != nil {
		t.Fatalf("request after the dropped chunks: %v", err)
	}
	if resp.ID != 3 || string(resp.Body) != "after" {
		t.Fatalf("request after the dropped chunks: answer of ID %d, %d bytes", resp.ID, len(resp.Body))
	}
}

// TestForwardServer_KeepalivesHoldLongRequest: a request that runs longer
// than the follower's silence limit is not cut: the leader sends the
// keepalives the client asked for while it runs, and the answer arrives. A
// peer that did not ask for keepalives gets none: its next frame is its
// answer.
func TestForwardServer_KeepalivesHoldLongRequest(t *testing.T) {
	f, open := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Second)
		w.WriteHeader(http.StatusCreated)
	}, func(f *Server) { f.keepalive = 50 * time.Millisecond })
	addr := open().conn.RemoteAddr().String()
	c := NewClient(addr, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}, hclog.NewNullLogger(), time.Minute)
	defer c.Retire()
	c.silence, c.check = 300*time.Millisecond, 50*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	begin := time.Now()
	resp, sent, err := c.Call(ctx, &Request{Method: "POST", URI: "/v1/pause", Host: "leader"})
	if err != nil || !sent || resp.Status != http.StatusCreated {
		t.Fatalf("a request longer than the silence limit: %+v, %v, %v after %s", resp, sent, err, time.Since(begin))
	}
	if f.Peak() != 1 {
		t.Fatalf("peak %d, want 1", f.Peak())
	}

	p := open()
	p.send(&Request{ID: 5})
	resp, err = p.receive()
	if err != nil || resp.Keepalive || resp.ID != 5 || resp.Status != http.StatusCreated {
		t.Fatalf("a peer that asked for no keepalive: %+v, %v", resp, err)
	}
}
