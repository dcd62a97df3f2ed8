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
// transport or to the internal HTTP server by its first byte. It tracks
// every connection it accepted or dialed, so that Close cuts them all, as
// the death of the process would: peers see the server gone at once, and
// no goroutine stays blocked reading from a dead connection.
type rpcMux struct {
	ln        net.Listener
	advertise net.Addr
	raftCh    chan net.Conn
	httpCh    chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}

	connsMu sync.Mutex
	conns   map[*trackedConn]struct{}
}

func newRPCMux(ln net.Listener, advertise net.Addr) *rpcMux {
	return &rpcMux{
		ln: ln, advertise: advertise,
		raftCh: make(chan net.Conn, 16), httpCh: make(chan net.Conn, 16),
		closed: make(chan struct{}),
		conns:  map[*trackedConn]struct{}{},
	}
}

// trackedConn is a connection the mux closes when it closes.
type trackedConn struct {
	net.Conn
	m    *rpcMux
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.m.connsMu.Lock()
		delete(c.m.conns, c)
		c.m.connsMu.Unlock()
	})
	return c.Conn.Close()
}

// track registers conn, or closes it and fails when the mux is closed.
func (m *rpcMux) track(conn net.Conn) (net.Conn, error) {
	m.connsMu.Lock()
	defer m.connsMu.Unlock()
	select {
	case <-m.closed:
		conn.Close()
		return nil, net.ErrClosed
	default:
	}
	tc := &trackedConn{Conn: conn, m: m}
	m.conns[tc] = struct{}{}
	return tc, nil
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
		tc, err := m.track(conn)
		if err != nil {
			return
		}
		go m.route(tc)
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

// Close stops accepting and closes every connection the mux accepted or
// dialed.
func (m *rpcMux) Close() error {
	m.connsMu.Lock()
	m.closeOnce.Do(func() { close(m.closed) })
	conns := make([]*trackedConn, 0, len(m.conns))
	for c := range m.conns {
		conns = append(conns, c)
	}
	m.connsMu.Unlock()
	err := m.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	return err
}

// dial opens a connection to a server's RPC port for one protocol. The
// connection is closed with the mux.
func (m *rpcMux) dial(ctx context.Context, addr string, proto byte) (net.Conn, error) {
	conn, err := dialRPC(ctx, addr, proto, nil)
	if err != nil {
		return nil, err
	}
	return m.track(conn)
}

// dialRPC opens a connection to a server's RPC port for one protocol.
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
	return l.m.dial(ctx, string(address), rpcRaft)
}

var errClosed = errors.New("server is shutting down")
