package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
)

const (
	// barrierTimeout bounds the barrier a new leader issues before it acts:
	// it waits for the whole uncommitted tail of the log to apply.
	barrierTimeout = 30 * time.Second
)

// leadership runs the leader loops while this server leads: it follows
// Raft's notifications, establishes a won leadership (a barrier first) and
// revokes a lost one, waiting for the loops to exit.
type leadership struct {
	s *Server
	// notify carries Raft's leadership changes.
	notify chan bool
	// fn runs the leader loops the caller wired (Options.Leader).
	fn LeaderFunc
	// mu guards cancel and done, set while the loops run.
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	// ready is set once a new leader's barrier has passed, and cleared as
	// soon as its leadership is revoked.
	ready atomic.Bool
	// gained counts Raft's notifications that this server became the
	// leader.
	gained prometheus.Counter
	// establishHook is set by tests only (export_internal_test.go): it
	// runs first in each establish, and an error it returns fails it.
	establishHook atomic.Pointer[func() error]
}

// newLeadershipCounter makes the counter of the leaderships this server
// won.
func newLeadershipCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nops_raft_leadership_acquired_total",
		Help: "Times this server became the Raft leader; summed over the servers, the cluster's changes of leader.",
	})
}

// monitor follows Raft's leadership notifications: on gaining
// leadership it issues a barrier, so that the state holds every committed
// entry, then starts the leader loops; on losing it, it stops them and waits
// for them to exit before anything else happens. It stops the loops too
// when the server shuts down.
//
// When establishing fails, the server hands its leadership over. When that
// fails too (a single server, or no other voter can take it), it stays the
// Raft leader, so it tries again after a backoff, handing over again on each
// failure, until it leads, loses its leadership or shuts down: a leader that
// gave up would answer every write with 503 for as long as it stayed one.
func (l *leadership) monitor() {
	s := l.s
	defer s.wg.Done()
	defer l.revoke()
	// retry fires when a failed establishment is due to be tried again;
	// nil while none is.
	var retry <-chan time.Time
	var retryTimer *time.Timer
	backoff := structs.Backoff{Min: leaderRetryMin, Max: leaderRetryMax}
	stopRetry := func() {
		if retryTimer != nil {
			retryTimer.Stop()
		}
		retryTimer, retry = nil, nil
	}
	defer stopRetry()
	lead := func() {
		stopRetry()
		if l.try() {
			backoff.Reset()
			return
		}
		wait := backoff.Next()
		s.logger.Warn("will try to establish leadership again", "in", wait)
		retryTimer = time.NewTimer(wait)
		retry = retryTimer.C
	}
	for {
		select {
		case <-s.shutdownCh:
			return
		case isLeader := <-l.notify:
			if !isLeader {
				stopRetry()
				backoff.Reset()
				l.revoke()
				continue
			}
			l.gained.Inc()
			backoff.Reset()
			lead()
		case <-retry:
			retryTimer, retry = nil, nil
			if s.raft.State() != raft.Leader {
				// Deposed while waiting: the notification that says so
				// is next in line, or already handled.
				backoff.Reset()
				continue
			}
			lead()
		}
	}
}

// try establishes the leadership of a server that Raft made the
// leader. It reports false when the server is still the Raft leader
// without its loops, neither established nor handed over, so that the
// caller tries again; true otherwise (established, handed over, lost, or
// shutting down).
func (l *leadership) try() bool {
	s := l.s
	err := l.establish()
	if err == nil || s.shuttingDown() {
		return true
	}
	l.revoke()
	if s.raft.State() != raft.Leader {
		// Lost while establishing: the notification that says so is
		// next in line.
		s.logger.Warn("leadership lost while establishing it", "error", err)
		return true
	}
	s.logger.Error("failed to establish leadership; handing it over", "error", err)
	if err := s.waitFuture(s.raft.LeadershipTransfer(), config.LeadershipTransferTimeout); err != nil {
		if s.shuttingDown() {
			return true
		}
		s.logger.Error("leadership transfer failed", "error", err)
		return s.raft.State() != raft.Leader
	}
	return true
}

const (
	// leaderRetryMin and leaderRetryMax bound the wait before a leader
	// that failed to establish its leadership, and kept it, tries again.
	leaderRetryMin = time.Second
	leaderRetryMax = 30 * time.Second
)

// establish issues a barrier, so that the state holds every entry
// committed by earlier leaders, then marks the server ready to lead and
// starts the leader loops.
func (l *leadership) establish() error {
	s := l.s
	s.logger.Info("cluster leadership acquired")
	if hook := l.establishHook.Load(); hook != nil {
		if err := (*hook)(); err != nil {
			return fmt.Errorf("test hook: %w", err)
		}
	}
	if err := s.waitFuture(s.raft.Barrier(barrierTimeout), barrierTimeout); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if s.raft.State() != raft.Leader {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.shuttingDown() {
		// Shutdown has already revoked; it must not find loops running
		// after it.
		return structs.ErrShuttingDown
	}
	if l.cancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	l.ready.Store(true)
	var loops []func(context.Context)
	if s.membership != nil {
		loops = append(loops, s.membership.runLeader)
	}
	if s.notifier != nil {
		loops = append(loops, s.notifier.Run)
	}
	if l.fn != nil {
		loops = append(loops, func(ctx context.Context) { l.fn(ctx, s) })
	}
	loops = append(loops, s.retention.loop)
	if s.config.ACL.Enabled {
		loops = append(loops, s.retention.tokenLoop)
	}
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Go(func() { loop(ctx) })
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	s.logger.Info("leader loops started")
	return nil
}

// revoke cancels the leader loops and waits for them to exit, so
// that no loop calls Nomad once this server is no longer the leader.
func (l *leadership) revoke() {
	l.mu.Lock()
	l.ready.Store(false)
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	s := l.s
	s.logger.Info("cluster leadership lost; stopping leader loops")
	cancel()
	<-done
	s.logger.Info("leader loops stopped")
}

// LeaderLoopsRunning reports whether this server runs the leader loops.
func (s *Server) LeaderLoopsRunning() bool {
	s.leader.mu.Lock()
	defer s.leader.mu.Unlock()
	return s.leader.cancel != nil
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
			return structs.ErrShuttingDown
		}
	}
}

// hookedFSM is the FSM as Raft sees it: the state's FSM, with the test
// hook that slows its applies (applyHook) run before each.
type hookedFSM struct {
	*fsm.FSM
	hook *atomic.Pointer[func()]
}

func (h *hookedFSM) runHook() {
	if fn := h.hook.Load(); fn != nil {
		(*fn)()
	}
}

// Apply applies one entry, after the hook.
func (h *hookedFSM) Apply(l *raft.Log) any {
	h.runHook()
	return h.FSM.Apply(l)
}

// ApplyBatch applies a batch of entries, after the hook.
func (h *hookedFSM) ApplyBatch(logs []*raft.Log) []any {
	h.runHook()
	return h.FSM.ApplyBatch(logs)
}
