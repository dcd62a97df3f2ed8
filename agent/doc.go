// Package agent runs one Nops server: Raft with its log and snapshots under
// the data dir, serf gossip and Consul discovery, the leadership lifecycle,
// the HTTP API (with forwarding of writes to the leader) and metrics.
//
// It wires; it holds no business rules. The rules live in the FSM (what a
// change may do) and in the reconcilers (what the leader decides to do).
//
// Guarantees:
//   - A write answered 200 was committed by a quorum and applied: it is not
//     lost while a quorum lives.
//   - A write sent to a follower is forwarded to the leader over the RPC
//     port; it is retried only when it cannot have been applied (no
//     connection, or the peer answered that it is not the leader).
//   - The leader loops run only between a successful barrier after gaining
//     leadership and the moment it is lost; revokeLeadership waits for them
//     to exit before the server does anything else.
package agent
