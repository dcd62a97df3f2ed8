package structs

import "errors"

// Sentinel errors shared by the state store, the API and the reconcilers.
// The FSM wraps them with the detail of the refused request; callers test
// them with errors.Is and the HTTP layer maps them to status codes.
var (
	// ErrNotFound: the object the request names does not exist (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request breaks an invariant or does not fit the
	// object's current state (409).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: the request itself is malformed (400).
	ErrInvalid = errors.New("invalid request")
	// ErrNotLeader: this server is not the leader; the write must be
	// forwarded.
	ErrNotLeader = errors.New("not the cluster leader")
	// ErrShuttingDown: the server is shutting down; a request waiting on
	// it ends (503).
	ErrShuttingDown = errors.New("server is shutting down")
	// ErrNoLeader: the cluster has no leader (503).
	ErrNoLeader = errors.New("no cluster leader")
	// ErrLeadershipLost: the leader lost its leadership after it sent the
	// entry to its followers and before the entry committed. The entry may
	// still commit under the next leader, or never: the outcome is unknown
	// (502), and the request must not be retried blindly. Errors of it
	// also wrap ErrNotLeader, for the loops that stop on either.
	ErrLeadershipLost = errors.New("leadership lost while the request was in flight; it may or may not have been applied")
	// ErrDuplicate: the request was already applied and changes nothing,
	// as a webhook delivery replayed (the webhook answers 200 with
	// "duplicate": true).
	ErrDuplicate = errors.New("already handled")
)

// Sentinel errors of requests the API refuses for who sent them or for a
// service behind it.
var (
	// ErrUnauthorized: the request does not prove who sent it, as a
	// webhook with a bad signature (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: who sent the request may not do it, by a rule of the
	// object rather than an ACL, as the author of a commit approving its
	// deployment under approval { forbid_self } (403).
	ErrForbidden = errors.New("forbidden")
	// ErrUpstream: a service the answer needs, such as Nomad, could not
	// be read (502).
	ErrUpstream = errors.New("upstream unavailable")
)
