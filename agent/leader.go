package agent

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// barrierTimeout bounds the barrier a new leader issues before it acts.
const barrierTimeout = 30 * time.Second

// monitorLeadership follows Raft's leadership notifications: on gaining
// leadership it issues a barrier, so that the state holds every committed
// entry, then starts the leader loops; on losing it, it stops them and waits
// for them to exit before anything else happens.
func (s *Server) monitorLeadership() {
	defer s.wg.Done()
	for {
		select {
		case <-s.shutdownCh:
			return
		case isLeader := <-s.leaderNotify:
			if isLeader {
				if err := s.establishLeadership(); err != nil {
					s.logger.Error("failed to establish leadership; handing it over", "error", err)
					s.revokeLeadership()
					if err := s.raft.LeadershipTransfer().Error(); err != nil {
						s.logger.Error("leadership transfer failed", "error", err)
					}
				}
			} else {
				s.revokeLeadership()
			}
		}
	}
}

func (s *Server) establishLeadership() error {
	s.logger.Info("cluster leadership acquired")
	if err := s.raft.Barrier(barrierTimeout).Error(); err != nil {
		return err
	}
	if s.raft.State() != raft.Leader {
		return nil
	}
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	if s.leaderCancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.leaderCancel, s.leaderDone = cancel, done
	s.leaderSince = time.Now()
	go func() {
		defer close(done)
		if s.membership != nil {
			s.membership.runLeader(ctx)
		}
	}()
	if s.leaderFn != nil {
		fnDone := make(chan struct{})
		go func() {
			defer close(fnDone)
			s.leaderFn(ctx, s)
		}()
		// The done channel closes only when both have exited.
		inner := done
		done2 := make(chan struct{})
		go func() {
			<-inner
			<-fnDone
			close(done2)
		}()
		s.leaderDone = done2
	}
	return nil
}

// revokeLeadership cancels the leader loops and waits for them to exit, so
// that no loop calls Nomad once this server is no longer the leader.
func (s *Server) revokeLeadership() {
	s.leaderMu.Lock()
	cancel, done := s.leaderCancel, s.leaderDone
	s.leaderCancel, s.leaderDone = nil, nil
	s.leaderMu.Unlock()
	if cancel == nil {
		return
	}
	s.logger.Info("cluster leadership lost; stopping leader loops")
	cancel()
	<-done
}

// LeaderLoopsRunning reports whether this server runs the leader loops.
func (s *Server) LeaderLoopsRunning() bool {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	return s.leaderCancel != nil
}
