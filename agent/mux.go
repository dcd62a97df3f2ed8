package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Connections to the RPC port open with one byte that names their protocol.
const (
	rpcRaft byte = 0x01
	// rpcHTTP is the internal HTTP API, for a server's calls to one peer
	// on its own behalf (status, Raft stats, a monitor stream).
	rpcHTTP byte = 0x02
	// rpcForward is the forwarding protocol: every request a follower
	// forwards to the leader (package rpc/forward).
	rpcForward byte = 0x03
)

// rpcMux accepts connections on the RPC port and hands each to the Raft
// transport, to the internal HTTP server or to the forwarding server by its
// first byte. With RPC TLS
// every connection is mutual TLS from its first byte on: the protocol byte
// is read inside the TLS stream, so a peer without a valid server
// certificate never reaches Raft or the forwarding API. It tracks
// every connection it accepted or dialed, so that Close cuts them all, as
// the death of the process would: peers see the server gone at once, and
// no goroutine stays blocked reading from a dead connection.
type rpcMux struct {
	ln        net.Listener
	advertise net.Addr
	// tls is nil when the RPC port is plain TCP.
	tls    *tlsConfigurator
	logger hclog.Logger
	raftCh chan net.Conn
	httpCh chan net.Conn
	fwdCh  chan net.Conn
	// pending bounds the connections still in their TLS handshake or
	// before their protocol byte: a peer that opens connections and sends
	// nothing holds a slot for rpcHandshakeTimeout at most, and no more
	// than maxPendingRPC of them at once.
	pending   chan struct{}
	closeOnce sync.Once
	closed    chan struct{}

	connsMu sync.Mutex
	conns   map[*trackedConn]struct{}
}

func newRPCMux(ln net.Listener, advertise net.Addr, tlsConf *tlsConfigurator, logger hclog.Logger) *rpcMux {
	return &rpcMux{
		ln: ln, advertise: advertise, tls: tlsConf, logger: logger,
		raftCh: make(chan net.Conn, 16), httpCh: make(chan net.Conn, 16),
		fwdCh:   make(chan net.Conn, 16),
		pending: make(chan struct{}, maxPendingRPC),
		closed:  make(chan struct{}),
		conns:   map[*trackedConn]struct{}{},
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
		select {
		case m.pending <- struct{}{}:
		default:
			m.logger.Debug("refused an RPC connection: too many connections in their handshake", "remote", conn.RemoteAddr())
			conn.Close()
			continue
		}
		tc, err := m.track(conn)
		if err != nil {
			return
		}
		go m.route(tc)
	}
}

// rpcHandshakeTimeout bounds the TLS handshake and the protocol byte of a
// new connection on the RPC port; maxPendingRPC bounds how many
// connections may be at that stage at once.
const (
	rpcHandshakeTimeout = 10 * time.Second
	maxPendingRPC       = 256
)

func (m *rpcMux) route(conn net.Conn) {
	release := sync.OnceFunc(func() { <-m.pending })
	defer release()
	_ = conn.SetDeadline(time.Now().Add(rpcHandshakeTimeout))
	if m.tls != nil {
		tc := tls.Server(conn, m.tls.rpcServerConfig())
		if err := tc.Handshake(); err != nil {
			log := m.logger.Warn
			if errors.Is(err, io.EOF) {
				// A port check that connects and hangs up sent nothing
				// to refuse.
				log = m.logger.Debug
			}
			log("refused an RPC connection: TLS handshake failed", "remote", conn.RemoteAddr(), "error", err)
			conn.Close()
			return
		}
		conn = tc
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	release()
	var ch chan net.Conn
	switch b[0] {
	case rpcRaft:
		ch = m.raftCh
	case rpcHTTP:
		ch = m.httpCh
	case rpcForward:
		ch = m.fwdCh
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
	var tc *tls.Config
	if m.tls != nil {
		tc = m.tls.rpcClientConfig()
	}
	conn, err := dialRPC(ctx, addr, proto, tc)
	if err != nil {
		return nil, err
	}
	return m.track(conn)
}

// dialRPC opens a connection to a server's RPC port for one protocol, over
// mutual TLS when tc is not nil.
func dialRPC(ctx context.Context, addr string, proto byte, tc *tls.Config) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		tconn := tls.Client(conn, tc)
		hctx, cancel := context.WithTimeout(ctx, rpcHandshakeTimeout)
		err := tconn.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("rpc TLS handshake with %s: %w", addr, err)
		}
		conn = tconn
	}
	if _, err := conn.Write([]byte{proto}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("rpc handshake with %s: %w", addr, err)
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
