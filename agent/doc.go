// Package agent runs one Nops server: Raft with its log and snapshots under
// the data dir, serf gossip and Consul discovery, the leadership lifecycle
// and metrics. It mounts the HTTP API of package agenthttp (agent/http),
// with forwarding of writes to the leader, on its ports.
//
// It wires; it holds no business rules. The rules live in the FSM (what a
// change may do) and in the reconcilers (what the leader decides to do).
//
// Guarantees:
//   - A write answered 200 was committed by a quorum and applied: it is not
//     lost while a quorum lives.
//   - A write (or a consistent read, or a snapshot) sent to a follower is
//     forwarded to the leader over the RPC port with the forwarding
//     protocol (rpc/forward), before any middleware, and answered with the
//     leader's status, headers and body; it is retried only when it cannot
//     have been applied (no connection, no byte of it sent, or the peer
//     answered that it is not the leader). With no leader, it is held up to
//     5s, then refused with 503.
//   - A server counts as the leader (IsLeader, writes, consistent reads)
//     only once its barrier has passed, so it never acts on a state that
//     misses entries committed before it took over; and it stops counting
//     as soon as Raft deposes it.
//   - The leader loops run only between that barrier and the moment the
//     leadership is lost; leadership.revoke waits for them to exit before
//     the server does anything else.
//   - A Raft leader that fails to establish its leadership hands it over;
//     when no voter can take it, it tries again after a backoff (1s,
//     doubling to 30s) for as long as it is the Raft leader, so it never
//     stays a leader that refuses every write.
//   - -bootstrap-expect forms a new cluster only among servers that have no
//     Raft state; a server with Raft state never bootstraps again.
//   - With ACLs on, every route declares the capability it needs beside its
//     read/write kind, and no handler runs for a request whose token lacks
//     it: a read is checked by the server asked, a write by the leader that
//     applies it. The actor recorded is the token's name, never a header
//     the client chose. Servers that disagree on acl.enabled form no
//     cluster.
//   - Every route of the HTTP API is in one table (agent/http/routes.go), the
//     reconcilers' too (reconcile_endpoints.go, which asks a Reconciler of
//     typed methods): decoding, limits, tokens and status codes are the
//     API's alone. Every route declares its answer (answers.go), a type
//     of package structs that rpc/client decodes into too.
//   - Shutdown always returns: it stops the leader loops, cuts every
//     connection of the RPC port, ends requests still running and waits for
//     every goroutine it started. Raft waits are bounded.
//   - A new server joins Raft as a non-voter and becomes a voter only once
//     the leader's autopilot saw it healthy for the stabilization time;
//     autopilot removes failed servers, never below min_quorum voters and
//     never a majority at once (autopilot.go).
//   - A message type is proposed only when every server's version applies
//     it (upgrade.go); otherwise the write is refused with 409 naming the
//     servers too old.
//   - A log monitor never blocks the server: a slow client loses lines.
//     Monitors, debug items and the debug bundle redact the secrets the
//     server knows (agent/http/monitor.go, debug.go).
//   - SIGHUP applies the reloadable settings (reload.go) and names the
//     others; a setting that fails to reload keeps its old value.
package agent
