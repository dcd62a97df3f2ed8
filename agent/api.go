package agent

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/nops-dev/nops/agent/config"
	agenthttp "github.com/nops-dev/nops/agent/http"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
)

// HTTPBackend is the server as the HTTP API sees it (agenthttp.Server):
// the server's own methods, and the accessors below that only the API
// needs. It keeps the server's method set to what the server does; a test
// that drives a part of the API alone builds its API on one.
type HTTPBackend struct{ *Server }

var _ agenthttp.Server = HTTPBackend{}

// Reconciler is the leader's reconcilers, as the API calls them.
type Reconciler = agenthttp.Reconciler

// RouteInfo describes one API route (agenthttp.RouteInfo).
type RouteInfo = agenthttp.RouteInfo

// RouteTable lists every API route the server serves, with its rule and
// its answer.
func (s *Server) RouteTable() []RouteInfo { return agenthttp.RouteTable(HTTPBackend{s}) }

// NodeName returns the server's node name.
func (s HTTPBackend) NodeName() string { return s.name }

// Version returns the version the server runs.
func (s HTTPBackend) Version() string { return Version }

// LiveConfig returns the configuration in force, reloads applied.
func (s HTTPBackend) LiveConfig() *config.Config { return s.liveConfig() }

// RootLogger returns the logger the server was given.
func (s HTTPBackend) RootLogger() hclog.Logger { return s.rootLogger }

// WebhookSecret returns the secret git pushes are verified with; empty
// disables the webhook.
func (s HTTPBackend) WebhookSecret() string { return s.webhookSecret }

// RaftStats returns this server's Raft statistics.
func (s HTTPBackend) RaftStats() *structs.RaftStats { return localRaftStats(s.raft) }

// WaitFuture waits up to timeout for a Raft future.
func (s HTTPBackend) WaitFuture(f raft.Future, timeout time.Duration) error {
	return s.waitFuture(f, timeout)
}

// AutopilotState returns autopilot's view of the servers' health.
func (s HTTPBackend) AutopilotState() *autopilot.State { return s.autopilot.GetState() }

// Notifier returns the notification deliverer; nil when the server does
// not lead.
func (s HTTPBackend) Notifier() *notify.Deliverer { return s.notifier }

// Reconciler returns the leader's reconcilers; nil when the server runs
// none.
func (s HTTPBackend) Reconciler() Reconciler { return s.reconciler }

// Refusals returns the peers membership refused, by name, with the reason.
func (s HTTPBackend) Refusals() map[string]string { return s.membership.refusals() }

// PeerName returns the node name of a Raft peer.
func (s HTTPBackend) PeerName(id raft.ServerID, addr raft.ServerAddress) string {
	return s.membership.peerName(id, addr)
}

// ServerRPCAddr returns the RPC address of the server named (by name or
// ID) target, or "" when no server has that name.
func (s HTTPBackend) ServerRPCAddr(target string) string {
	for _, si := range s.membership.servers() {
		if si.Name == target || si.ID == target {
			return si.RPCAddr
		}
	}
	return ""
}

// RPCHTTPClient returns an HTTP client to a server's RPC port.
func (s HTTPBackend) RPCHTTPClient(rpcAddr string) *http.Client { return s.rpcHTTPClient(rpcAddr) }

// DialForward opens a forwarding-protocol connection to a server's RPC
// port.
func (s HTTPBackend) DialForward(ctx context.Context, addr string) (net.Conn, error) {
	return s.mux.dial(ctx, addr, rpcForward)
}

// HTTPHandler returns the handler of the HTTP port.
func (s HTTPBackend) HTTPHandler() http.Handler { return s.httpServer.Handler }

// RequestContext returns the parent of every request's context, cancelled
// on shutdown.
func (s HTTPBackend) RequestContext() context.Context { return s.requestCtx }

// ShutdownCh closes when shutdown starts.
func (s HTTPBackend) ShutdownCh() <-chan struct{} { return s.shutdownCh }

// ShuttingDown reports whether shutdown has started.
func (s HTTPBackend) ShuttingDown() bool { return s.shuttingDown() }

// Goroutines counts the goroutines Shutdown waits for.
func (s HTTPBackend) Goroutines() *sync.WaitGroup { return &s.wg }
