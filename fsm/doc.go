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
//   - A log entry that cannot be decoded, or is of an unknown type, is
//     refused with ErrBadEntry and changes nothing; a panic while applying
//     an entry is recovered and refuses it too. The decoder is
//     deterministic, so every server refuses the same entries and the
//     states stay equal, and no entry can stop a server at apply or again
//     at every restart.
//   - A snapshot is restored only when it is whole and its state keeps the
//     rules above (see Validate): a refused snapshot changes nothing.
//
// A snapshot is an 8-byte header, "NOPSSNP" and the format version (3),
// followed by one zstd stream (with its checksum) of type-tagged,
// length-prefixed msgpack records, one per stored object, and an end record
// that counts them, so that a snapshot cut short is refused rather than
// restored as a smaller state. Deployments and events, most of a snapshot,
// are msgpack arrays of their fields written and read by hand, without the
// codec's reflection (package fsm/snapcodec); the other kinds are msgpack
// maps written by the codec. Equal states give equal bytes.
//
// Snapshot takes a read transaction only; Persist encodes and compresses
// while the FSM goes on applying. Restore decompresses and decodes the
// records on one goroutine and inserts them into a fresh store, in one
// transaction, on another.
//
// Format 2, the records without compression and deployments as maps, is
// still read, so that a server restores the snapshots it holds across an
// upgrade; any other version is refused with an error that names it.
// FSM.Restore reads what Raft wrote or a leader sent, without a limit on
// its size; ReadOnlyLimited, which reads a state uploaded or inspected,
// refuses one that decompresses past its limit, and stops reading there.
// Its limit bounds the state as a whole: the records' bytes together, and
// their number (one per restoreRecordCost bytes, for what a record costs
// in the store's indexes beyond its bytes); a record that claims more than
// is left is refused from its header, before it is read.
package fsm
