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
// The package has no code of its own; its tests need bin/nops (make build)
// and bin/nomad (make nomad).
package failover
