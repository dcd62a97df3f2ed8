// Package agenthttp is the HTTP API of a Nops server: the route table with
// each route's ACL rule and answer, the handlers, the middleware that
// guards them, the dashboard's in-process calls, and the forwarder that
// carries a follower's writes to the leader over the forwarding protocol
// (package rpc/forward). It is named
// agenthttp, not http, so that it never shadows net/http in the files that
// use both.
//
// It depends on the server only through the Server interface it declares,
// which package agent implements; agent imports this package, never the
// reverse.
//
// Guarantees:
//   - Every route is in one table (routes.go), the reconcilers' too
//     (reconcile_endpoints.go): decoding, limits, tokens and status codes
//     are this package's alone. Every route declares its answer
//     (answers.go), a type of package structs.
//   - With ACLs on, no handler runs for a request whose token lacks the
//     route's capability: a read is checked by the server asked, a write by
//     the leader that applies it.
//   - A write (or a consistent read, or a snapshot) sent to a follower is
//     forwarded to the leader before any middleware and answered with the
//     leader's status, headers and body; it is retried only when it cannot
//     have been applied (forwarder.go).
//   - Read-your-writes: a read through a follower waits for the writes that
//     follower forwarded, and any read for the index X-Nops-Min-Index asks
//     (readyourwrites.go).
//   - No panic of a handler reaches a client: it answers 500.
package agenthttp

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
)

// Server is what the API needs of the server it serves.
type Server interface {
	// Identity and addresses.
	NodeID() string
	NodeName() string
	Version() string
	RPCAddr() string
	HTTPAddr() string
	SerfAddr() string

	// Configuration: Config the one the server started with, LiveConfig
	// the one in force after reloads.
	Config() *config.Config
	LiveConfig() *config.Config
	Logger() hclog.Logger
	// RootLogger is the logger the server was given; log monitors
	// register on it when it is an hclog.InterceptLogger.
	RootLogger() hclog.Logger
	Metrics() *prometheus.Registry
	WebhookSecret() string

	// State and Raft.
	State() *fsm.StateStore
	Apply(t structs.MessageType, req any) (uint64, error)
	Raft() *raft.Raft
	RaftStats() *structs.RaftStats
	WaitFuture(f raft.Future, timeout time.Duration) error
	IsLeader() bool
	Leader() (addr, id string)
	LeaderLoopsRunning() bool
	AutopilotConfig() *structs.AutopilotConfig
	AutopilotState() *autopilot.State
	GC(ctx context.Context, actor string) (structs.GCResult, error)
	Kick(k structs.Kick)
	Notifier() *notify.Deliverer
	Reconciler() Reconciler

	// Membership.
	Members() []serf.Member
	Keyring(op, key string) (*structs.KeyringResponse, error)
	Refusals() map[string]string
	PeerName(id raft.ServerID, addr raft.ServerAddress) string
	// ServerRPCAddr is the RPC address of the server named (by name or
	// ID) target, or "" when no server has that name.
	ServerRPCAddr(target string) string

	// Transport to the other servers: RPCHTTPClient sends HTTP requests
	// to a server's RPC port, DialForward opens a forwarding connection.
	RPCHTTPClient(rpcAddr string) *http.Client
	DialForward(ctx context.Context, addr string) (net.Conn, error)
	// HTTPHandler is the handler of the HTTP port, the dashboard's
	// in-process calls go through.
	HTTPHandler() http.Handler

	// Lifetime: RequestContext is the parent of every request's context,
	// cancelled on shutdown; ShutdownCh closes when shutdown starts;
	// Goroutines counts the goroutines the server waits for.
	RequestContext() context.Context
	ShutdownCh() <-chan struct{}
	ShuttingDown() bool
	Goroutines() *sync.WaitGroup
}

// leaderWait is how long a request that needs the leader waits for one.
const leaderWait = 5 * time.Second
