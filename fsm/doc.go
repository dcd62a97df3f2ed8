// Package fsm is the Raft finite state machine of Nops: it applies committed
// log entries to a go-memdb state store, and writes and restores snapshots.
//
// Guarantees:
//
//   - Deterministic: the FSM reads no clock, draws no random number and does
//     no I/O. Times, IDs and actors are stamped by the leader in the request
//     (structs.WriteMeta) before it is proposed, so every server applies the
//     same entry to the same state.
//   - The FSM enforces the invariants itself, whatever the caller checked:
//     at most one active deployment per job; only the moves listed in
//     structs.Transitions, each by its trigger; a terminal deployment never
//     changes; an approval is refused while the job is paused; the register
//     intent is recorded once per deployment and a hook run is dispatched at
//     most once per (deployment, phase, position). A request that breaks one
//     is answered with an error wrapping structs.ErrConflict,
//     structs.ErrNotFound or structs.ErrInvalid, and changes nothing.
//   - Every change appends its audit event in the same transaction: state
//     and event are committed together or not at all.
//   - A change that notifies writes its notification into the outbox in the
//     same transaction (fsm/outbox.go), with an ID derived from the entry's
//     index and its position in the entry: a committed change always has its
//     notification, on every server.
//   - A log entry that cannot be decoded panics: skipping it would let this
//     server's state drift from its peers'.
//
// A snapshot is a header followed by type-tagged, length-prefixed msgpack
// records, one per stored object, and an end record that counts them, so
// that a snapshot cut short is refused rather than restored as a smaller
// state. Restore decodes the records on one goroutine and inserts them into
// a fresh store, in one transaction, on another.
package fsm
