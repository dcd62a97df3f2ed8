package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// barrierTimeout bounds the barrier a new leader issues before it acts.
	barrierTimeout = 30 * time.Second
	// transferTimeout bounds a wait for a leadership transfer.
	transferTimeout = 10 * time.Second
)

// monitorLeadership follows Raft's leadership notifications: on gaining
// leadership it issues a barrier, so that the state holds every committed
// entry, then starts the leader loops; on losing it, it stops them and waits
// for them to exit before anything else happens. It stops the loops too
// when the server shuts down.
func (s *Server) monitorLeadership() {
	defer s.wg.Done()
	defer s.revokeLeadership()
	for {
		select {
		case <-s.shutdownCh:
			return
		case isLeader := <-s.leaderNotify:
			if !isLeader {
				s.revokeLeadership()
				continue
			}
			err := s.establishLeadership()
			if err == nil || s.shuttingDown() {
				continue
			}
			s.revokeLeadership()
			if s.raft.State() != raft.Leader {
				// Lost while establishing: the notification that says so
				// is next in line.
				s.logger.Warn("leadership lost while establishing it", "error", err)
				continue
			}
			s.logger.Error("failed to establish leadership; handing it over", "error", err)
			if err := s.waitFuture(s.raft.LeadershipTransfer(), transferTimeout); err != nil {
				s.logger.Error("leadership transfer failed", "error", err)
			}
		}
	}
}

// establishLeadership issues a barrier, so that the state holds every entry
// committed by earlier leaders, then marks the server ready to lead and
// starts the leader loops.
func (s *Server) establishLeadership() error {
	s.logger.Info("cluster leadership acquired")
	if err := s.waitFuture(s.raft.Barrier(barrierTimeout), barrierTimeout); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if s.raft.State() != raft.Leader {
		return nil
	}
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	if s.shuttingDown() {
		// Shutdown has already revoked; it must not find loops running
		// after it.
		return errClosed
	}
	if s.leaderCancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.leaderCancel, s.leaderDone = cancel, done
	s.leaderSince = time.Now()
	s.leaderReady.Store(true)
	loops := 1
	finished := make(chan struct{}, 3)
	go func() {
		defer func() { finished <- struct{}{} }()
		if s.membership != nil {
			s.membership.runLeader(ctx)
		}
	}()
	if s.notifier != nil {
		loops++
		go func() {
			defer func() { finished <- struct{}{} }()
			s.notifier.Run(ctx)
		}()
	}
	if s.leaderFn != nil {
		loops++
		go func() {
			defer func() { finished <- struct{}{} }()
			s.leaderFn(ctx, s)
		}()
	}
	loops++
	go func() {
		defer func() { finished <- struct{}{} }()
		s.retentionLoop(ctx)
	}()
	if s.config.ACL.Enabled {
		loops++
		go func() {
			defer func() { finished <- struct{}{} }()
			s.aclTokenGC(ctx)
		}()
	}
	go func() {
		for i := 0; i < loops; i++ {
			<-finished
		}
		close(done)
	}()
	s.logger.Info("leader loops started")
	return nil
}

// revokeLeadership cancels the leader loops and waits for them to exit, so
// that no loop calls Nomad once this server is no longer the leader.
func (s *Server) revokeLeadership() {
	s.leaderMu.Lock()
	s.leaderReady.Store(false)
	cancel, done := s.leaderCancel, s.leaderDone
	s.leaderCancel, s.leaderDone = nil, nil
	s.leaderMu.Unlock()
	if cancel == nil {
		return
	}
	s.logger.Info("cluster leadership lost; stopping leader loops")
	cancel()
	<-done
	s.logger.Info("leader loops stopped")
}

// LeaderLoopsRunning reports whether this server runs the leader loops.
func (s *Server) LeaderLoopsRunning() bool {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	return s.leaderCancel != nil
}

func (s *Server) shuttingDown() bool {
	select {
	case <-s.shutdownCh:
		return true
	default:
		return false
	}
}

// errFutureTimeout is returned when a Raft future did not answer in time.
var errFutureTimeout = errors.New("timed out waiting for raft")

// waitFuture waits for a Raft future, at most timeout and not past the
// server's shutdown. Some Raft futures (a leadership transfer queued while
// Raft shuts down) are never answered; a bare f.Error() would then block
// forever.
func (s *Server) waitFuture(f raft.Future, timeout time.Duration) error {
	errCh := make(chan error, 1)
	go func() { errCh <- f.Error() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-errCh:
		return err
	case <-timer.C:
		return errFutureTimeout
	case <-s.shutdownCh:
		// Raft answers most futures on its shutdown; give it a moment.
		select {
		case err := <-errCh:
			return err
		case <-time.After(time.Second):
			return errClosed
		}
	}
}
