package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Peer bindings tie each Raft peer to the one serf member that speaks for
// it: the member with the peer's node ID, its RPC address as the Raft
// configuration has it, and the serf name the server at that address gives
// as its own. Gossip alone proves none of this: anyone with the gossip key
// can join a member that claims a real server's node ID and RPC address
// (the real server then answers the identity probe for it). So a Raft peer
// is added, kept and removed only on behalf of its bound member, and a
// member that claims a peer's node ID under another name or address is
// refused: ignored for every membership decision (join, update, leave,
// reap, failure, autopilot cleanup).
//
// The binding is derived, not replicated. Its two halves are the Raft
// configuration (the peer's ID and address, which every server agrees on)
// and the name the server at that address answers with, over mutual TLS
// with a server certificate of this region when RPC TLS is on. Every
// server, leader or not, asks each peer it has not bound yet, and each
// bound peer whose node ID a member claims under another name (a rename,
// or an impostor), on each member event and every peerReconcileInterval;
// a bound peer no member contests is not asked again, so a steady cluster
// makes no probes. A leader elected after a peer failed still knows who
// that peer was if it saw the peer answer before. Replicating the name would add a log entry
// type and would let a record outlive a rename; the server itself is the
// authority on its name, and asking it again follows a rename. A peer that
// has not answered since this server started is unbound: no member's
// leave or reap removes it, and autopilot does not remove it as failed
// (an operator can, with remove-peer), so gossip still cannot remove a
// server it cannot be proven to speak for.
type peerBinding struct {
	Name string
	Addr raft.ServerAddress
}

// claimKind is what a serf member is to the Raft configuration.
type claimKind int

const (
	// claimNew is a member whose node ID is no Raft peer: a candidate to
	// join, once its identity is verified.
	claimNew claimKind = iota
	// claimOwner is the member a Raft peer is bound to.
	claimOwner
	// claimUnproven is a member with a peer's node ID and address, while
	// the peer is not bound: nothing is removed on its behalf.
	claimUnproven
	// claimRefused is a member that claims a peer's node ID under another
	// name or RPC address.
	claimRefused
)

// peerAddrs returns the Raft configuration as node ID to address.
func (m *membership) peerAddrs() (map[raft.ServerID]raft.ServerAddress, error) {
	f := m.s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read raft configuration: %w", err)
	}
	out := map[raft.ServerID]raft.ServerAddress{}
	for _, srv := range f.Configuration().Servers {
		out[srv.ID] = srv.Address
	}
	return out, nil
}

// binding returns the binding of peer id at addr, if it is bound there.
func (m *membership) binding(id raft.ServerID, addr raft.ServerAddress) (peerBinding, bool) {
	if string(id) == m.s.nodeID {
		return peerBinding{Name: m.s.name, Addr: raft.ServerAddress(m.s.rpcAddr)}, raft.ServerAddress(m.s.rpcAddr) == addr
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.bindings[id]
	return b, ok && b.Addr == addr
}

// bind records that peer id at addr speaks through the member name.
func (m *membership) bind(id raft.ServerID, name string, addr raft.ServerAddress) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.bindings[id]; ok && old.Name != name && old.Addr == addr {
		m.logger.Info("Raft peer answers under a new name", "id", id, "old_name", old.Name, "name", name)
	}
	m.bindings[id] = peerBinding{Name: name, Addr: addr}
}

// classify tells what member si is to the Raft configuration peers, and
// for a refused member why.
func (m *membership) classify(si serverInfo, peers map[raft.ServerID]raft.ServerAddress) (claimKind, string) {
	id := raft.ServerID(si.ID)
	addr, ok := peers[id]
	if !ok {
		return claimNew, ""
	}
	if addr != raft.ServerAddress(si.RPCAddr) {
		return claimRefused, fmt.Sprintf("claims the node ID %s of the Raft peer at %s from RPC address %s; if that server really moved, remove the old peer first (nops operator raft remove-peer)",
			si.ID, addr, si.RPCAddr)
	}
	b, bound := m.binding(id, addr)
	switch {
	case !bound:
		return claimUnproven, ""
	case b.Name != si.Name:
		return claimRefused, fmt.Sprintf("claims the node ID %s of server %s (at %s)", si.ID, b.Name, addr)
	}
	return claimOwner, ""
}

// refusals returns, by member name, why each refused member is ignored.
func (m *membership) refusals() map[string]string {
	out := map[string]string{}
	peers, err := m.peerAddrs()
	if err != nil {
		return out
	}
	for _, si := range m.servers() {
		if kind, why := m.classify(si, peers); kind == claimRefused {
			out[si.Name] = why
		}
	}
	return out
}

// learnPeers binds the Raft peers: each one not bound yet, or bound but
// contested by a member that claims its node ID under another name, is
// asked at its Raft address which server it is (a renamed server then
// binds under its new name; an impostor stays refused). A peer that does
// not answer, or answers with another node ID, keeps the binding it had.
// Bindings of servers no longer in the configuration are dropped. It then
// logs the members newly refused.
func (m *membership) learnPeers() {
	peers, err := m.peerAddrs()
	if err != nil {
		m.logger.Warn("cannot bind Raft peers", "error", err)
		return
	}
	contested := m.contested(peers)
	for id, addr := range peers {
		if string(id) == m.s.nodeID {
			continue
		}
		if _, bound := m.binding(id, addr); bound && !contested[id] {
			continue
		}
		st, err := m.probeNode(string(addr))
		if err != nil || st.NodeID != string(id) || st.Name == "" {
			m.logger.Debug("Raft peer does not answer as itself; binding unchanged", "id", id, "addr", addr, "error", err)
			continue
		}
		m.bind(id, st.Name, addr)
	}
	m.mu.Lock()
	for id := range m.bindings {
		if _, ok := peers[id]; !ok {
			delete(m.bindings, id)
		}
	}
	m.mu.Unlock()
	m.logRefusals()
}

// contested returns the bound peers a member claims under another name
// than the bound one.
func (m *membership) contested(peers map[raft.ServerID]raft.ServerAddress) map[raft.ServerID]bool {
	out := map[raft.ServerID]bool{}
	for _, si := range m.servers() {
		id := raft.ServerID(si.ID)
		if b, bound := m.binding(id, peers[id]); bound && b.Name != si.Name {
			out[id] = true
		}
	}
	return out
}

// logRefusals logs each refused member once, when it is first refused or
// its reason changes, not on every serf event.
func (m *membership) logRefusals() {
	now := m.refusals()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, why := range now {
		if m.refused[name] != why {
			m.logger.Error("ignoring a member that claims another server's identity", "member", name, "reason", why)
		}
	}
	m.refused = now
}

// bindLoop keeps the peer bindings: at once on member events, and on a
// tick for a peer that did not answer before.
func (m *membership) bindLoop() {
	defer m.wg.Done()
	tick := time.NewTicker(peerReconcileInterval)
	defer tick.Stop()
	m.learnPeers()
	for {
		select {
		case <-m.stopCh:
			return
		case <-m.bindCh:
			m.learnPeers()
		case <-tick.C:
			m.learnPeers()
		}
	}
}

// wakeBind asks bindLoop for a round, without waiting.
func (m *membership) wakeBind() {
	select {
	case m.bindCh <- struct{}{}:
	default:
	}
}

// peerAnswers reports whether the server at a peer's Raft address still
// answers as that peer.
func (m *membership) peerAnswers(id raft.ServerID, addr raft.ServerAddress) bool {
	st, err := m.probeNode(string(addr))
	return err == nil && st.NodeID == string(id)
}

// checkFailedPeer says why the failed peer id must not be removed on
// behalf of the member name, or nil: the member must be the one the peer
// is bound to, and the peer must not answer at its Raft address.
func (m *membership) checkFailedPeer(id raft.ServerID, name string) error {
	peers, err := m.peerAddrs()
	if err != nil {
		return err
	}
	addr, ok := peers[id]
	if !ok {
		return fmt.Errorf("%s is no longer a Raft peer", id)
	}
	b, bound := m.binding(id, addr)
	if !bound {
		return fmt.Errorf("the peer at %s has not answered as itself since this server started, so no member is proven to be it; if it is gone, remove it with nops operator raft remove-peer", addr)
	}
	if b.Name != name {
		return fmt.Errorf("the peer is bound to member %s, not %s", b.Name, name)
	}
	if m.peerAnswers(id, addr) {
		return fmt.Errorf("the peer still answers at %s", addr)
	}
	return m.reachesQuorumWithout(id)
}

// reachesQuorumWithout says why this server must not remove peer id, or
// nil: it must reach, over the RPC port, a majority of the voters that
// remain. A leader cut off from the others sees every peer fail at once;
// removing one of them would leave the servers that can still elect a
// leader short of a quorum of the configuration they receive.
func (m *membership) reachesQuorumWithout(id raft.ServerID) error {
	f := m.s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read raft configuration: %w", err)
	}
	// The peers are probed at once: each probe may wait its whole timeout
	// for a peer that is gone, and several may be gone.
	type answer struct {
		addr raft.ServerAddress
		ok   bool
	}
	var probes []chan answer
	voters, reached := 0, 0
	for _, srv := range f.Configuration().Servers {
		if srv.ID == id || srv.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(srv.ID) == m.s.nodeID {
			reached++
			continue
		}
		c := make(chan answer, 1)
		probes = append(probes, c)
		go func() { c <- answer{srv.Address, m.peerAnswers(srv.ID, srv.Address)} }()
	}
	var silent []string
	for _, c := range probes {
		if a := <-c; a.ok {
			reached++
		} else {
			silent = append(silent, string(a.addr))
		}
	}
	if reached < voters/2+1 {
		return fmt.Errorf("this server reaches %d of the %d voters that would remain (%s do not answer): it may be the one cut off", reached, voters, strings.Join(silent, ", "))
	}
	return nil
}

// peerName names a Raft peer for the operator: the member it is bound to,
// else "(unproven)" when a member claims it, else "(unknown)".
func (m *membership) peerName(id raft.ServerID, addr raft.ServerAddress) string {
	if b, bound := m.binding(id, addr); bound {
		return b.Name
	}
	for _, si := range m.servers() {
		if raft.ServerID(si.ID) == id && raft.ServerAddress(si.RPCAddr) == addr {
			return "(unproven)"
		}
	}
	return "(unknown)"
}

// hasMember reports whether gossip knows a member of this name with node
// ID id.
func (m *membership) hasMember(name string, id raft.ServerID) bool {
	for _, si := range m.servers() {
		if si.Name == name && raft.ServerID(si.ID) == id {
			return true
		}
	}
	return false
}
