package faultnet

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// unknown is the index of a sender the Network could not attribute.
	unknown = -1
	// ownerAttempts and ownerRetry pace the lookups of a connection's
	// process.
	ownerAttempts = 5
	ownerRetry    = 20 * time.Millisecond
)

// relay is one TCP connection from server from to server to, relayed
// between the accepted connection (down, the sender's side) and the
// connection to the receiver's real port (up).
type relay struct {
	from, to int
	down, up net.Conn
	// dropped is set, per direction, once a block dropped bytes: the
	// stream has a hole, so that direction drops everything after it too.
	dropped [2]atomic.Bool
	once    sync.Once
}

func (r *relay) lost() bool { return r.dropped[0].Load() || r.dropped[1].Load() }

func (r *relay) close() {
	r.once.Do(func() {
		_ = r.down.Close()
		_ = r.up.Close()
	})
}

// serveTCP accepts connections to server to and relays each.
func (n *Network) serveTCP(ln net.Listener, to int, target string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go n.relayTCP(conn, to, target)
	}
}

func (n *Network) relayTCP(down net.Conn, to int, target string) {
	from, alive := n.sourceOf(down)
	if !alive {
		_ = down.Close()
		return
	}
	up, err := net.DialTimeout("tcp", target, dialTimeout)
	if err != nil {
		n.logger.Debug("dial failed", "to", to, "target", target, "error", err)
		_ = down.Close()
		return
	}
	r := &relay{from: from, to: to, down: down, up: up}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		r.close()
		return
	}
	n.relays[r] = struct{}{}
	n.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); n.pump(r, 0, down, up, from, to) }()
	go func() { defer wg.Done(); n.pump(r, 1, up, down, to, from) }()
	wg.Wait()
	n.mu.Lock()
	delete(n.relays, r)
	n.mu.Unlock()
}

// pump copies one direction of a relay, applying the fault of the link
// from sender to receiver to each chunk. It closes the relay when either
// side ends.
func (n *Network) pump(r *relay, dir int, src, dst net.Conn, sender, receiver int) {
	defer r.close()
	buf := make([]byte, chunkSize)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			f := n.fault(sender, receiver)
			if f.Blocked || r.dropped[dir].Load() {
				r.dropped[dir].Store(true)
			} else {
				if f.Delay > 0 {
					time.Sleep(f.Delay)
				}
				if _, werr := dst.Write(buf[:k]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// sourceOf returns the index of the server whose process dialed conn, or
// unknown. A lookup can miss a socket that its process is still setting up
// or already closing, so it tries a few times; a connection whose dialer
// closed it meanwhile is closed.
func (n *Network) sourceOf(conn net.Conn) (int, bool) {
	addr, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		n.countUnattributed()
		return unknown, true
	}
	var err error
	for attempt := 0; attempt < ownerAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(ownerRetry)
		}
		var index int
		if index, err = n.lookupOwner(addr); err == nil {
			return index, true
		}
		if errors.Is(err, errNoSocket) {
			return unknown, false
		}
	}
	n.logger.Warn("connection of no known server: relayed without faults", "remote", addr, "to", conn.LocalAddr(), "error", err)
	n.countUnattributed()
	return unknown, true
}

func (n *Network) lookupOwner(addr *net.TCPAddr) (int, error) {
	n.mu.Lock()
	byPID := map[int]int{}
	var pids []int
	for i, nd := range n.nodes {
		if nd.PID == nil {
			continue
		}
		if pid := nd.PID(); pid > 0 {
			byPID[pid] = i
			pids = append(pids, pid)
		}
	}
	n.mu.Unlock()
	pid, err := socketOwner(addr, pids)
	if err != nil {
		return unknown, err
	}
	return byPID[pid], nil
}

// closeRelays closes the relays that match.
func (n *Network) closeRelays(match func(*relay) bool) {
	n.mu.Lock()
	var out []*relay
	for r := range n.relays {
		if match(r) {
			out = append(out, r)
		}
	}
	n.mu.Unlock()
	for _, r := range out {
		r.close()
	}
}

// serveUDP relays the packets sent to node to. A packet comes from a
// server's serf socket, 127.0.0.1:<its serf port>, which names the sender;
// it goes on from the sender's own proxy socket, so the receiver sees it
// come from the sender's advertised address and answers there.
func (n *Network) serveUDP(to *node) {
	buf := make([]byte, maxPacket)
	dst := &net.UDPAddr{IP: net.ParseIP(realHost), Port: to.SerfPort}
	for {
		k, src, err := to.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		from := n.udpSender(src)
		if from == nil {
			n.countUnattributed()
			continue
		}
		f := n.fault(from.Index, to.Index)
		if f.Blocked {
			continue
		}
		pkt := append([]byte(nil), buf[:k]...)
		send := func() { _, _ = from.udp.WriteToUDP(pkt, dst) }
		if f.Delay > 0 {
			time.AfterFunc(f.Delay, send)
		} else {
			send()
		}
	}
}

func (n *Network) udpSender(src *net.UDPAddr) *node {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, nd := range n.nodes {
		if nd.SerfPort == src.Port && src.IP.IsLoopback() {
			return nd
		}
	}
	return nil
}
