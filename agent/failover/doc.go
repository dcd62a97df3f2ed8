// Package failover holds the process-level failover tests of Nops: a
// cluster of three `nops serve` processes of the built binary, a real Nomad
// agent and a real git repository, whose leader is killed with SIGKILL in
// the middle of a deployment.
//
// The tests show the guarantees of SPEC sections 5, 7 and 8 at the level
// of whole processes: a new leader resumes every unfinished deployment from
// the replicated state and brings it to its end; a job is registered at
// most once per deployment and a hook run is dispatched at most once per
// (deployment, phase, position), as Nomad itself shows; an acknowledged
// approval survives the loss of the leader; a new leader's detection sees
// every job in git from its first cycle, so no job looks removed during a
// failover; and a killed server that starts again on its data directory
// rejoins the cluster. The benchmark measures
// the time from the SIGKILL of the leader to the first detection cycle
// completed by its successor.
//
// The partition tests route each server's Raft, forwarding and gossip
// traffic through a testutil/faultnet.Network and its calls to Nomad
// through a recording proxy of its own, so that a test can cut, block one
// way or delay any link between two servers and attribute every Nomad write
// to the server that made it. They show that a leader cut off from its
// followers makes no Nomad write once its lease is over while it can still
// reach Nomad; that one-way links and partitions during an approval, a
// pre-hook run and a register lose no acknowledged write and register a
// job once per deployment; and that the servers converge after each heal.
// TestPartition_Chaos mixes random partitions and kills over
// NOPS_CHAOS_ROUNDS rounds (5 by default, 50 with make chaos; the seed is
// printed and NOPS_CHAOS_SEED replays it), checks the recorded history of
// the clients' operations for linearizability with porcupine, and reports
// acknowledged writes lost, double registers and the time to converge
// after a heal.
//
// The package has no code of its own; its tests need bin/nops (make build)
// and bin/nomad (make nomad).
package failover
