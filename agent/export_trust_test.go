package agent

import "github.com/hashicorp/raft"

// ReconcilePeersNow runs the leader's reconcile of Raft peers with serf
// members once, synchronously, so a test can check what it decided.
func (s *Server) ReconcilePeersNow() { s.membership.reconcilePeers() }

// MaxPendingRPC is how many connections may be in their handshake on the
// RPC port at once.
const MaxPendingRPC = maxPendingRPC

// BindPeersNow runs one round of the peer bindings, synchronously, and
// returns how many identity probes of peers this server has made in all.
func (s *Server) BindPeersNow() uint64 {
	s.membership.learnPeers()
	return s.membership.probes.Load()
}

// CheckFailedPeer says why autopilot's dead-server cleanup must not remove
// the peer id bound to member name, or nil.
func (s *Server) CheckFailedPeer(id, name string) error {
	return s.membership.checkFailedPeer(raft.ServerID(id), name)
}
