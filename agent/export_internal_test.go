package agent

// SetEstablishHook makes each establishLeadership of s call fn first, and
// fail with fn's error; nil removes the hook. Set
// from an Options.Build, it is in place before the server first acts on its
// leadership.
func SetEstablishHook(s *Server, fn func() error) {
	if fn == nil {
		s.establishHook.Store(nil)
		return
	}
	s.establishHook.Store(&fn)
}
