package faultnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	// realHost is where the servers really listen.
	realHost = "127.0.0.1"
	// dialTimeout bounds the Network's connection to a server's real port.
	dialTimeout = 5 * time.Second
	// chunkSize is the most a relay reads and sends at once.
	chunkSize = 32 << 10
	// maxPacket is the largest UDP packet relayed (memberlist's limit is
	// far below it).
	maxPacket = 64 << 10
)

// ErrUnknownNode is returned for a server index the Network does not
// know.
var ErrUnknownNode = errors.New("unknown server")

// Node is one server whose traffic goes through the Network.
type Node struct {
	// Index names the server in faults (Cut, Block, Delay).
	Index int
	// IP is the address the server advertises, which the Network listens
	// on. AdvertiseIP gives one per index.
	IP string
	// RPCPort and SerfPort are the server's real ports on 127.0.0.1; the
	// Network listens on the same ports at IP.
	RPCPort, SerfPort int
	// PID returns the process ID of the running server, or 0: the Network
	// attributes a TCP connection to the server whose process dialed it.
	PID func() int
}

// Fault is the state of one link, from a sender to a receiver.
type Fault struct {
	// Blocked drops everything the sender sends the receiver.
	Blocked bool
	// Delay holds everything the sender sends the receiver this long.
	Delay time.Duration
}

// AdvertiseIP returns the loopback address server index advertises.
func AdvertiseIP(index int) string {
	return "127.0.77." + strconv.Itoa(index+1)
}

type link struct{ from, to int }

// Network relays the traffic of a set of servers and applies faults to it.
// Its methods are safe for concurrent use.
type Network struct {
	logger hclog.Logger

	mu           sync.Mutex
	nodes        map[int]*node
	faults       map[link]Fault
	relays       map[*relay]struct{}
	unattributed int
	closed       bool
}

type node struct {
	Node
	closers []io.Closer
	udp     *net.UDPConn
}

// New returns a Network with no server and no fault.
func New(logger hclog.Logger) *Network {
	return &Network{
		logger: logger,
		nodes:  map[int]*node{},
		faults: map[link]Fault{},
		relays: map[*relay]struct{}{},
	}
}

// AddNode starts listening at the node's advertised address and relaying
// to its real ports. Adding an index again replaces the node (a cluster
// started again on new ports).
func (n *Network) AddNode(spec Node) error {
	if net.ParseIP(spec.IP) == nil {
		return fmt.Errorf("faultnet: server %d: invalid IP %q", spec.Index, spec.IP)
	}
	nd := &node{Node: spec}
	rpc, err := net.Listen("tcp", net.JoinHostPort(spec.IP, strconv.Itoa(spec.RPCPort)))
	if err != nil {
		return fmt.Errorf("faultnet: server %d: RPC listener: %w", spec.Index, err)
	}
	nd.closers = append(nd.closers, rpc)
	serf, err := net.Listen("tcp", net.JoinHostPort(spec.IP, strconv.Itoa(spec.SerfPort)))
	if err != nil {
		closeAll(nd.closers)
		return fmt.Errorf("faultnet: server %d: serf TCP listener: %w", spec.Index, err)
	}
	nd.closers = append(nd.closers, serf)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(spec.IP), Port: spec.SerfPort})
	if err != nil {
		closeAll(nd.closers)
		return fmt.Errorf("faultnet: server %d: serf UDP socket: %w", spec.Index, err)
	}
	nd.closers = append(nd.closers, udp)
	nd.udp = udp

	n.mu.Lock()
	old := n.nodes[spec.Index]
	n.nodes[spec.Index] = nd
	n.mu.Unlock()
	if old != nil {
		closeAll(old.closers)
	}
	go n.serveTCP(rpc, spec.Index, net.JoinHostPort(realHost, strconv.Itoa(spec.RPCPort)))
	go n.serveTCP(serf, spec.Index, net.JoinHostPort(realHost, strconv.Itoa(spec.SerfPort)))
	go n.serveUDP(nd)
	return nil
}

// Block drops everything server from sends server to, and leaves the
// other direction as it is.
func (n *Network) Block(from, to int) error {
	return n.update(from, to, func(f *Fault) { f.Blocked = true })
}

// Delay holds everything server from sends server to for d.
func (n *Network) Delay(from, to int, d time.Duration) error {
	return n.update(from, to, func(f *Fault) { f.Delay = d })
}

// Cut blocks both directions between a and b and closes every connection
// open between them.
func (n *Network) Cut(a, b int) error {
	if err := n.Block(a, b); err != nil {
		return err
	}
	if err := n.Block(b, a); err != nil {
		return err
	}
	n.closeRelays(func(r *relay) bool {
		return (r.from == a && r.to == b) || (r.from == b && r.to == a)
	})
	return nil
}

// Isolate cuts server i from every other server.
func (n *Network) Isolate(i int) error {
	for _, j := range n.indexes() {
		if j == i {
			continue
		}
		if err := n.Cut(i, j); err != nil {
			return err
		}
	}
	return nil
}

// Heal removes every fault. Connections that lost bytes to a block are
// closed, as TCP gives up on a connection whose packets were lost, so no
// server reads a stream with a hole in it; the servers dial again.
func (n *Network) Heal() {
	n.mu.Lock()
	n.faults = map[link]Fault{}
	n.mu.Unlock()
	n.closeRelays(func(r *relay) bool { return r.lost() })
}

// Faults returns the links that have a fault.
func (n *Network) Faults() map[[2]int]Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[[2]int]Fault, len(n.faults))
	for l, f := range n.faults {
		out[[2]int{l.from, l.to}] = f
	}
	return out
}

// Unattributed returns how many connections and packets the Network could
// not attribute to a server: it relayed the connections without faults
// and dropped the packets.
func (n *Network) Unattributed() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.unattributed
}

// Close stops every listener and closes every relayed connection.
func (n *Network) Close() {
	n.mu.Lock()
	n.closed = true
	var closers []io.Closer
	for _, nd := range n.nodes {
		closers = append(closers, nd.closers...)
	}
	n.mu.Unlock()
	closeAll(closers)
	n.closeRelays(func(*relay) bool { return true })
}

func (n *Network) update(from, to int, change func(*Fault)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, i := range []int{from, to} {
		if _, ok := n.nodes[i]; !ok {
			return fmt.Errorf("faultnet: server %d: %w", i, ErrUnknownNode)
		}
	}
	l := link{from, to}
	f := n.faults[l]
	change(&f)
	if f == (Fault{}) {
		delete(n.faults, l)
	} else {
		n.faults[l] = f
	}
	return nil
}

// fault returns the fault of a link; a link with an unknown end has none.
func (n *Network) fault(from, to int) Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.faults[link{from, to}]
}

func (n *Network) indexes() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]int, 0, len(n.nodes))
	for i := range n.nodes {
		out = append(out, i)
	}
	return out
}

func (n *Network) countUnattributed() {
	n.mu.Lock()
	n.unattributed++
	n.mu.Unlock()
}

func closeAll(closers []io.Closer) {
	for _, c := range closers {
		_ = c.Close()
	}
}
