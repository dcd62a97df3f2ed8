package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Connections to the RPC port open with one byte that names their protocol.
const (
	rpcRaft byte = 0x01
	rpcHTTP byte = 0x02
)

// rpcMux accepts connections on the RPC port and hands each to the Raft
// transport or to the internal HTTP server by its first byte.
type rpcMux struct {
	ln        net.Listener
	advertise net.Addr
	raftCh    chan net.Conn
	httpCh    chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func newRPCMux(ln net.Listener, advertise net.Addr) *rpcMux {
	return &rpcMux{
		ln: ln, advertise: advertise,
		raftCh: make(chan net.Conn, 16), httpCh: make(chan net.Conn, 16),
		closed: make(chan struct{}),
	}
}

func (m *rpcMux) serve() {
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closed:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		go m.route(conn)
	}
}

func (m *rpcMux) route(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var ch chan net.Conn
	switch b[0] {
	case rpcRaft:
		ch = m.raftCh
	case rpcHTTP:
		ch = m.httpCh
	default:
		conn.Close()
		return
	}
	select {
	case ch <- conn:
	case <-m.closed:
		conn.Close()
	}
}

func (m *rpcMux) Close() error {
	m.closeOnce.Do(func() { close(m.closed) })
	return m.ln.Close()
}

// dial opens a connection to a server's RPC port for one protocol.
func dialRPC(ctx context.Context, addr string, proto byte, tlsWrap func(net.Conn) (net.Conn, error)) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte{proto}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc handshake with %s: %w", addr, err)
	}
	if tlsWrap != nil {
		return tlsWrap(conn)
	}
	return conn, nil
}

// chanListener is a net.Listener fed by the mux.
type chanListener struct {
	m         *rpcMux
	ch        chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func newChanListener(m *rpcMux, ch chan net.Conn) *chanListener {
	return &chanListener{m: m, ch: ch, closed: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.m.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}
func (l *chanListener) Addr() net.Addr { return l.m.advertise }

// raftLayer is the raft.StreamLayer over the mux.
type raftLayer struct {
	*chanListener
}

var _ raft.StreamLayer = (*raftLayer)(nil)

func (l *raftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return dialRPC(ctx, string(address), rpcRaft, nil)
}

var errClosed = errors.New("server is shutting down")
