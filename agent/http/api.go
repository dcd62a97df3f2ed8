package agenthttp

import (
	"context"
	"net"
	"net/http"

	"github.com/hashicorp/go-hclog"
)

// API is the HTTP API of one server: the handler of its HTTP port, the
// internal handler of its RPC port, and the forwarding protocol's server.
type API struct {
	api      *httpAPI
	external http.Handler
	internal http.Handler
	fwd      *fwdServer
}

// New builds the API of s. logger names the forwarding server's lines.
func New(s Server, logger hclog.Logger) *API {
	api := newHTTPAPI(s)
	internal := api.handler(true)
	return &API{
		api: api, external: api.handler(false), internal: internal,
		fwd: newFwdServer(api, internal, logger),
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
func (a *API) ServeForwarding(ln net.Listener) { a.fwd.serve(ln) }

// ShutdownForwarding drains the forwarding connections (fwdServer.Shutdown).
// It is safe on a nil API: a server that failed before serving has none.
func (a *API) ShutdownForwarding(ctx context.Context) error {
	if a == nil {
		return nil
	}
	return a.fwd.Shutdown(ctx)
}

// The forwarding protocol's limits (forward.go), for the peers that
// speak it.
const (
	// ForwardVersion is the byte the leader opens a connection with.
	ForwardVersion = rpcForwardVersion
	// ForwardMaxFrame bounds a request frame.
	ForwardMaxFrame = fwdMaxFrame
	// ForwardChunk bounds a chunk of a streamed body.
	ForwardChunk = fwdChunk
	// ForwardMaxInFlight bounds the requests of one connection run at once.
	ForwardMaxInFlight = fwdMaxInFlight
)

// FramedForwards counts the requests this server forwarded with the
// forwarding protocol and had an answer for.
func (a *API) FramedForwards() uint64 { return a.api.fwd.framed.Load() }

// ForwardPeak is the most forwarded requests this server ran at once.
func (a *API) ForwardPeak() int64 { return a.fwd.peak.Load() }
