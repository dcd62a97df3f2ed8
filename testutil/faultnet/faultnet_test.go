package faultnet_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/faultnet"
)

// dialerEnv makes the test binary a dialer process: it connects to the
// address in the variable, copies its stdin to the connection and the
// connection to its stdout. A server of the Network is a process, so the
// tests dial from one.
const dialerEnv = "FAULTNET_TEST_DIAL"

// quiet is how long a test waits to be sure nothing arrives.
const quiet = 500 * time.Millisecond

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialerEnv); addr != "" {
		// The first line says go: the test knows this process's ID by then.
		in := bufio.NewReader(os.Stdin)
		if _, err := in.ReadString('\n'); err != nil {
			os.Exit(2)
		}
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			os.Exit(2)
		}
		go func() { _, _ = io.Copy(conn, in) }()
		_, _ = io.Copy(os.Stdout, conn)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// dialer is a child process connected through the Network.
type dialer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startDialer(t *testing.T, addr string) *dialer {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), dialerEnv+"="+addr)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &dialer{cmd: cmd, in: in, out: bufio.NewReader(out)}
}

// readLine reads one line within timeout, or reports that none came.
func readLine(r *bufio.Reader, timeout time.Duration) (string, bool) {
	ch := make(chan string, 1)
	go func() {
		s, err := r.ReadString('\n')
		if err != nil {
			close(ch)
			return
		}
		ch <- s
	}()
	select {
	case s, ok := <-ch:
		return s, ok
	case <-time.After(timeout):
		return "", false
	}
}

// network has server 0, a dialer process started by the test, and server
// 1, whose real RPC port the test listens on.
type network struct {
	net   *faultnet.Network
	real  net.Listener
	addr1 string // server 1's advertised RPC address
	pid0  atomic.Int64
}

func newNetwork(t *testing.T) *network {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("attributing connections to processes needs Linux's /proc")
	}
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Close() })
	ports := testutil.FreePorts(t, 3)
	n := &network{net: faultnet.New(hclog.NewNullLogger()), real: real}
	t.Cleanup(n.net.Close)
	rpc1 := real.Addr().(*net.TCPAddr).Port
	if err := n.net.AddNode(faultnet.Node{Index: 0, IP: faultnet.AdvertiseIP(0), RPCPort: ports[0], SerfPort: ports[1], PID: func() int { return int(n.pid0.Load()) }}); err != nil {
		t.Fatal(err)
	}
	if err := n.net.AddNode(faultnet.Node{Index: 1, IP: faultnet.AdvertiseIP(1), RPCPort: rpc1, SerfPort: ports[2]}); err != nil {
		t.Fatal(err)
	}
	n.addr1 = net.JoinHostPort(faultnet.AdvertiseIP(1), strconv.Itoa(rpc1))
	return n
}

// connect starts a dialer as server 0 and returns it with server 1's end.
func (n *network) connect(t *testing.T) (*dialer, net.Conn, *bufio.Reader) {
	t.Helper()
	// The dialer's PID is known to the Network before it dials.
	d := startDialer(t, n.addr1)
	n.pid0.Store(int64(d.cmd.Process.Pid))
	send(t, d.in, "go")
	up, err := n.real.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = up.Close() })
	return d, up, bufio.NewReader(up)
}

func send(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s+"\n"); err != nil {
		t.Fatal(err)
	}
}

func expect(t *testing.T, r *bufio.Reader, what, want string) {
	t.Helper()
	got, ok := readLine(r, 10*time.Second)
	if !ok || got != want+"\n" {
		t.Fatalf("%s: got %q (received %t), want %q", what, got, ok, want)
	}
}

func expectNothing(t *testing.T, r *bufio.Reader, what string) {
	t.Helper()
	if got, ok := readLine(r, quiet); ok {
		t.Fatalf("%s: got %q through a blocked link", what, got)
	}
}

// TestNetwork_OneWay blocks each direction of one connection in turn: the
// blocked direction drops the bytes and the other one still flows.
func TestNetwork_OneWay(t *testing.T) {
	n := newNetwork(t)
	d, up, upr := n.connect(t)
	send(t, d.in, "hello")
	expect(t, upr, "0 -> 1", "hello")
	send(t, up, "hi")
	expect(t, d.out, "1 -> 0", "hi")

	if err := n.net.Block(0, 1); err != nil {
		t.Fatal(err)
	}
	send(t, d.in, "lost")
	expectNothing(t, upr, "0 -> 1 blocked")
	send(t, up, "still")
	expect(t, d.out, "1 -> 0 while 0 -> 1 is blocked", "still")

	// Healing closes the connection that lost bytes, so no stream with a
	// hole in it goes on.
	n.net.Heal()
	if _, ok := readLine(upr, 10*time.Second); ok {
		t.Fatal("the connection that lost bytes delivered more after the heal")
	}

	d, up, upr = n.connect(t)
	if err := n.net.Block(1, 0); err != nil {
		t.Fatal(err)
	}
	send(t, d.in, "ask")
	expect(t, upr, "0 -> 1 while 1 -> 0 is blocked", "ask")
	send(t, up, "answer")
	expectNothing(t, d.out, "1 -> 0 blocked")
	if got := n.net.Unattributed(); got != 0 {
		t.Errorf("%d unattributed connections, want 0", got)
	}
}

// TestNetwork_CutClosesConnections cuts a pair: the open connection ends,
// and a new one carries nothing either way until the heal.
func TestNetwork_CutClosesConnections(t *testing.T) {
	n := newNetwork(t)
	d, _, upr := n.connect(t)
	send(t, d.in, "before")
	expect(t, upr, "before the cut", "before")
	if err := n.net.Cut(0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := upr.ReadString('\n'); !errors.Is(err, io.EOF) && err == nil {
		t.Fatal("the connection survived the cut")
	}
	d, up, upr := n.connect(t)
	send(t, d.in, "during")
	expectNothing(t, upr, "0 -> 1 cut")
	send(t, up, "during")
	expectNothing(t, d.out, "1 -> 0 cut")

	n.net.Heal()
	d, up, upr = n.connect(t)
	send(t, d.in, "after")
	expect(t, upr, "after the heal", "after")
	send(t, up, "back")
	expect(t, d.out, "after the heal", "back")
}

// TestNetwork_Unattributed relays a connection of no known server without
// faults and counts it.
func TestNetwork_Unattributed(t *testing.T) {
	n := newNetwork(t)
	if err := n.net.Isolate(1); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", n.addr1)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	up, err := n.real.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	send(t, conn, "anyone")
	expect(t, bufio.NewReader(up), "a connection of no server", "anyone")
	if got := n.net.Unattributed(); got != 1 {
		t.Errorf("%d unattributed connections, want 1", got)
	}
}

// TestNetwork_UDP relays serf packets: the receiver sees them come from
// the sender's advertised address, and a blocked link drops them.
func TestNetwork_UDP(t *testing.T) {
	ports := testutil.FreePorts(t, 4)
	n := faultnet.New(hclog.NewNullLogger())
	t.Cleanup(n.Close)
	socks := make([]*net.UDPConn, 2)
	for i := range socks {
		if err := n.AddNode(faultnet.Node{Index: i, IP: faultnet.AdvertiseIP(i), RPCPort: ports[2*i], SerfPort: ports[2*i+1]}); err != nil {
			t.Fatal(err)
		}
		s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ports[2*i+1]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		socks[i] = s
	}
	advertised := func(i int) *net.UDPAddr {
		return &net.UDPAddr{IP: net.ParseIP(faultnet.AdvertiseIP(i)), Port: ports[2*i+1]}
	}
	recv := func(s *net.UDPConn) (string, *net.UDPAddr, bool) {
		buf := make([]byte, 100)
		_ = s.SetReadDeadline(time.Now().Add(quiet))
		k, from, err := s.ReadFromUDP(buf)
		if err != nil {
			return "", nil, false
		}
		return string(buf[:k]), from, true
	}
	if _, err := socks[0].WriteToUDP([]byte("ping"), advertised(1)); err != nil {
		t.Fatal(err)
	}
	got, from, ok := recv(socks[1])
	if !ok || got != "ping" || !from.IP.Equal(advertised(0).IP) || from.Port != advertised(0).Port {
		t.Fatalf("server 1 got %q from %v (%t), want ping from %v", got, from, ok, advertised(0))
	}
	if _, err := socks[1].WriteToUDP([]byte("ack"), from); err != nil {
		t.Fatal(err)
	}
	if got, _, ok := recv(socks[0]); !ok || got != "ack" {
		t.Fatalf("server 0 got %q (%t), want ack", got, ok)
	}
	if err := n.Block(0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := socks[0].WriteToUDP([]byte("lost"), advertised(1)); err != nil {
		t.Fatal(err)
	}
	if got, _, ok := recv(socks[1]); ok {
		t.Fatalf("server 1 got %q through a blocked link", got)
	}
	if _, err := socks[1].WriteToUDP([]byte("still"), advertised(0)); err != nil {
		t.Fatal(err)
	}
	if got, _, ok := recv(socks[0]); !ok || got != "still" {
		t.Fatalf("server 0 got %q (%t) over the open direction, want still", got, ok)
	}
}

// TestNetwork_UnknownServer refuses a fault on a server it does not know.
func TestNetwork_UnknownServer(t *testing.T) {
	n := faultnet.New(hclog.NewNullLogger())
	if err := n.Block(0, 1); !errors.Is(err, faultnet.ErrUnknownNode) {
		t.Fatalf("Block of unknown servers: %v, want ErrUnknownNode", err)
	}
	if err := n.AddNode(faultnet.Node{Index: 0, IP: "not-an-ip"}); err == nil {
		t.Fatal("AddNode accepted an invalid IP")
	}
}
