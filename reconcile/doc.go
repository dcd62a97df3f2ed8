// Package reconcile holds the leader's loops: git watching, detection and
// apply (SPEC sections 4 to 7). They are level-based reconcilers in the
// controller-runtime style: each pass reads all the state it needs (git,
// the replicated state, Nomad), decides, proposes log entries, and acts on
// Nomad only after the entry that records the intent is committed. A pass
// never branches on which event woke it, so running it again (on the next
// tick, or on a new leader after a failover) is always safe.
//
// Three types divide the work, over one shared core (core.go): the Detector
// (detector.go, detect*.go) runs detection, the Applier (applier.go,
// apply.go, hooks.go, wake.go) advances deployments, and the Query
// (query.go) answers the API's reads on any server. The Manager wires them
// together, runs the leader's loops and takes the API's writes. A write
// wakes the loops with a structs.Kick that names what changed (kick.go): an
// approval wakes its deployment in the apply loop alone, with no detection
// cycle.
//
// Detection handles each managed job as observe, decide, act (detect_job.go,
// decide.go): observe gathers a view of the job (git's spec and hooks,
// Nomad's plan, the replicated state); decide, a pure function of that
// view, chooses what to settle, whether to create a deployment and the
// status to record; act proposes those entries. Whether a job is held is
// decided by package holds alone, for detection, the apply loop and the
// FSM's approve check.
//
// Guarantees:
//   - Every step records its state through Raft before it calls Nomad; a
//     deposed leader's proposal fails, so it cannot act twice.
//   - A register is a check-and-set on the job modify index read at
//     detection, made without planning again (the detection plan holds
//     while that index does); its answer tells detection that the job is
//     in sync at the new index, so its own event plans nothing
//     (ownregister.go). A hook dispatch carries an idempotency token unique to
//     (deployment, phase, position), and a dispatch whose outcome is unknown
//     and has no run in Nomad fails rather than run twice.
//   - The loops change state only by proposing entries; they never write the
//     state store directly.
//   - A change made in Nomad to a managed job wakes detection through
//     Nomad's event stream (livewatch.go); while the stream is down,
//     detection polls every drift interval.
//   - Deployments move on events (wake.go): a step that ends starts the next
//     in the same pass, and Nomad's deployment and allocation events, on
//     the same leader stream (one per managed namespace, whatever the number
//     of deployments), wake the deployment they concern. The engine interval
//     paces passes only while the stream is down or after a failed step;
//     with it up, a full pass runs at the nearest timeout or as a slow
//     safety net. No request to Nomad is made per deployment while it waits.
//   - A scale of a group left to an autoscaler neither supersedes nor fails
//     a deployment (autoscale.go); any other live change still does.
//   - A Nomad call refused for the token is named in the job's observed
//     status (callerrors.go).
package reconcile
