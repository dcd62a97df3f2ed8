package agenthttp

import (
	"context"
	"net"
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/rpc/forward"
)

// API is the HTTP API of one server: the handler of its HTTP port, the
// internal handler of its RPC port, and the forwarding protocol's server.
type API struct {
	api      *httpAPI
	external http.Handler
	internal http.Handler
	fwd      *forward.Server
}

// New builds the API of s. logger names the forwarding server's lines.
func New(s Server, logger hclog.Logger) *API {
	api := newHTTPAPI(s)
	internal := api.handler(true)
	return &API{
		api: api, external: api.handler(false), internal: internal,
		fwd: newForwardServer(api, internal, logger),
	}
}

// Handler serves the HTTP port: the API, the dashboard and /metrics; a
// follower forwards to the leader the requests that need it.
func (a *API) Handler() http.Handler { return a.external }

// Internal serves the RPC port's HTTP traffic: requests forwarded by
// followers and the calls of peers.
func (a *API) Internal() http.Handler { return a.internal }

// ServeForwarding answers the forwarding connections of ln until it
// closes. The caller counts it in the server's Goroutines beforehand.
func (a *API) ServeForwarding(ln net.Listener) { a.fwd.Serve(ln) }

// ShutdownForwarding drains the forwarding connections (forward.Server.Shutdown).
// It is safe on a nil API: a server that failed before serving has none.
func (a *API) ShutdownForwarding(ctx context.Context) error {
	if a == nil {
		return nil
	}
	return a.fwd.Shutdown(ctx)
}

// The forwarding protocol's limits (package rpc/forward), for the peers
// that speak it.
const (
	// ForwardVersion is the byte the leader opens a connection with.
	ForwardVersion = forward.Version
	// ForwardMaxFrame bounds a request frame.
	ForwardMaxFrame = forward.MaxFrame
	// ForwardChunk bounds a chunk of a streamed body.
	ForwardChunk = forward.Chunk
	// ForwardMaxInFlight bounds the requests of one connection run at once.
	ForwardMaxInFlight = forward.MaxInFlight
)

// FramedForwards counts the requests this server forwarded with the
// forwarding protocol and had an answer for.
func (a *API) FramedForwards() uint64 { return a.api.fwd.framed.Load() }

// ForwardPeak is the most forwarded requests this server ran at once.
func (a *API) ForwardPeak() int64 { return a.fwd.Peak() }
