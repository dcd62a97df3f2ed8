// Package structs is the leaf package of Nops: the types that the Raft log,
// the state store, the reconcilers, the HTTP API and the CLI share.
//
// It imports nothing of the project. Its guarantees are:
//
//   - MessageType is append-only: a new type goes at the end, so an entry
//     written by one version is read the same by every later one. An entry
//     whose type carries IgnoreUnknownTypeFlag may be skipped by an older
//     server that does not know it.
//   - The deployment lifecycle (SPEC section 3) is data: Transitions lists
//     every allowed move, and CanTransition is the only place that answers
//     whether a move is allowed.
//   - Encode and Decode are the one wire format of the log and snapshots.
//   - The HTTP API's bodies and answers that are not stored objects are
//     declared here once (api.go), for the server, rpc/client and the
//     dashboard alike; the agent's route table names each route's answer.
package structs
