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

// The server as the HTTP API sees it (agenthttp.Server).
var _ agenthttp.Server = (*Server)(nil)

// Reconciler is the leader's reconcilers, as the API calls them.
type Reconciler = agenthttp.Reconciler

// RouteInfo describes one API route (agenthttp.RouteInfo).
type RouteInfo = agenthttp.RouteInfo

// RouteTable lists every API route the server serves, with its rule and
// its answer.
func (s *Server) RouteTable() []RouteInfo { return agenthttp.RouteTable(s) }

// NodeName returns the server's node name.
func (s *Server) NodeName() string { return s.nodeName() }

// Version returns the version the server runs.
func (s *Server) Version() string { return Version }

// LiveConfig returns the configuration in force, reloads applied.
func (s *Server) LiveConfig() *config.Config { return s.liveConfig() }

// RootLogger returns the logger the server was given.
func (s *Server) RootLogger() hclog.Logger { return s.rootLogger }

// WebhookSecret returns the secret git pushes are verified with; empty
// disables the webhook.
func (s *Server) WebhookSecret() string { return s.webhookSecret }

// RaftStats returns this server's Raft statistics.
func (s *Server) RaftStats() *structs.RaftStats { return localRaftStats(s.raft) }

// WaitFuture waits up to timeout for a Raft future.
func (s *Server) WaitFuture(f raft.Future, timeout time.Duration) error {
	return s.waitFuture(f, timeout)
}

// AutopilotState returns autopilot's view of the servers' health.
func (s *Server) AutopilotState() *autopilot.State { return s.autopilot.GetState() }

// Notifier returns the notification deliverer; nil when the server does
// not lead.
func (s *Server) Notifier() *notify.Deliverer { return s.notifier }

// Reconciler returns the leader's reconcilers; nil when the server runs
// none.
func (s *Server) Reconciler() Reconciler { return s.reconciler }

// Refusals returns the peers membership refused, by name, with the reason.
func (s *Server) Refusals() map[string]string { return s.membership.refusals() }

// PeerName returns the node name of a Raft peer.
func (s *Server) PeerName(id raft.ServerID, addr raft.ServerAddress) string {
	return s.membership.peerName(id, addr)
}

// ServerRPCAddr returns the RPC address of the server named (by name or
// ID) target, or "" when no server has that name.
func (s *Server) ServerRPCAddr(target string) string {
	for _, si := range s.membership.servers() {
		if si.Name == target || si.ID == target {
			return si.RPCAddr
		}
	}
	return ""
}

// RPCHTTPClient returns an HTTP client to a server's RPC port.
func (s *Server) RPCHTTPClient(rpcAddr string) *http.Client { return s.rpcHTTPClient(rpcAddr) }

// DialForward opens a forwarding-protocol connection to a server's RPC
// port.
func (s *Server) DialForward(ctx context.Context, addr string) (net.Conn, error) {
	return s.mux.dial(ctx, addr, rpcForward)
}

// HTTPHandler returns the handler of the HTTP port.
func (s *Server) HTTPHandler() http.Handler { return s.httpServer.Handler }

// RequestContext returns the parent of every request's context, cancelled
// on shutdown.
func (s *Server) RequestContext() context.Context { return s.requestCtx }

// ShutdownCh closes when shutdown starts.
func (s *Server) ShutdownCh() <-chan struct{} { return s.shutdownCh }

// ShuttingDown reports whether shutdown has started.
func (s *Server) ShuttingDown() bool { return s.shuttingDown() }

// Goroutines counts the goroutines Shutdown waits for.
func (s *Server) Goroutines() *sync.WaitGroup { return &s.wg }
