package agent

import agenthttp "github.com/nops-dev/nops/agent/http"

// SetEstablishHook makes each leadership.establish of s call fn first, and
// fail with fn's error; nil removes the hook. Set
// from an Options.Build, it is in place before the server first acts on its
// leadership.
func SetEstablishHook(s *Server, fn func() error) {
	if fn == nil {
		s.leader.establishHook.Store(nil)
		return
	}
	s.leader.establishHook.Store(&fn)
}

// SetApplyHook makes s call fn before Raft applies each batch of entries to
// its FSM (fn may sleep, to slow them); nil removes the hook. Set from an
// Options.Build, it is in place before the server applies its log.
func SetApplyHook(s *Server, fn func()) {
	if fn == nil {
		s.applyHook.Store(nil)
		return
	}
	s.applyHook.Store(&fn)
}

// FramedForwards counts the requests s forwarded with the forwarding
// protocol and had an answer for.
func FramedForwards(s *Server) uint64 { return s.api.FramedForwards() }

// ForwardPeak is the most forwarded requests s ran at once for one or more
// forwarding connections.
func ForwardPeak(s *Server) int64 { return s.api.ForwardPeak() }

// Forwarding protocol constants for the attack tests.
const (
	RPCForwardByte     = rpcForward
	ForwardMaxFrame    = agenthttp.ForwardMaxFrame
	ForwardChunk       = agenthttp.ForwardChunk
	ForwardMaxInFlight = agenthttp.ForwardMaxInFlight
	ForwardVersionByte = agenthttp.ForwardVersion
	// ShutdownGrace bounds Server.Shutdown's drain.
	ShutdownGrace = shutdownGrace
)
