package reconcile

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/meta"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// Server is what the reconcilers need of the server they run in.
type Server interface {
	State() *fsm.StateStore
	Apply(t structs.MessageType, req any) (uint64, error)
	IsLeader() bool
	NodeID() string
}

// Config tunes the reconcilers.
type Config struct {
	Namespaces     []string
	DriftInterval  time.Duration
	EngineInterval time.Duration
	Defaults       meta.Defaults
	// FullPlanInterval forces a plan of a job even when neither its git spec
	// nor its live job changed since it was last seen in sync.
	FullPlanInterval time.Duration
	// ReplanRate caps the Nomad requests a second of the periodic full
	// re-plan (replan.go); 0 means nomadx.DefaultReplanRate.
	ReplanRate int
	// DisableEventStream turns off the watch of Nomad's job event stream:
	// live changes are then seen every DriftInterval only.
	DisableEventStream bool
	// Clock returns the current time; nil means time.Now.
	Clock func() time.Time
	// Registerer receives the reconcilers' metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Manager owns the leader's loops. It exists on every server (its API
// routes read the replicated state), but Run runs only on the leader.
type Manager struct {
	cfg    Config
	srv    Server
	nomad  *nomadx.Client
	git    *gitwatch.Watcher
	logger hclog.Logger

	detectCh chan struct{}
	applyCh  chan struct{}
	metrics  *metrics
	// replan paces the periodic full re-plan (replan.go); asked says a
	// cycle was asked for since the last one began, prompt that the
	// running one was.
	replan        *nomadx.Budget
	asked, prompt atomic.Bool

	// mu guards the leader's in-memory caches, rebuilt on each leadership.
	mu     sync.Mutex
	parsed map[string]parseResult
	seen   map[string]observed
	// termStart is when this server's current leadership began; git
	// snapshots fetched before it are not trusted.
	termStart time.Time
	// replanDeferred counts the due re-plans deferred for lack of budget
	// or to yield, replanGranted the re-plans granted, since the detection
	// loop last looked.
	replanDeferred, replanGranted int
	// lastCycle is the result of the last detection cycle.
	lastCycle *cycleResult
	// streamUp says, by namespace, whether Nomad's job event stream is
	// up; liveIndex is the index of the last live change it reported.
	streamUp  map[string]bool
	liveIndex uint64
	// streamEpoch counts the stream's ups and downs and the job changes it
	// reported; liveList is the list of live jobs kept between cycles
	// while it is up (livecache.go).
	streamEpoch uint64
	liveList    *liveList
	// refusals are the calls Nomad refused, by job key and step
	// (callerrors.go).
	refusals map[string]map[string]string
	// applyAll and woken say what the apply loop was woken for: every
	// active deployment, or those listed (wake.go).
	applyAll bool
	woken    map[string]struct{}

	// defaults, when set, replaces cfg.Defaults (a configuration reload).
	defaults atomic.Pointer[meta.Defaults]
}

// New returns a manager.
func New(cfg Config, srv Server, nomad *nomadx.Client, git *gitwatch.Watcher, logger hclog.Logger) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.DriftInterval <= 0 {
		cfg.DriftInterval = time.Minute
	}
	if cfg.EngineInterval <= 0 {
		cfg.EngineInterval = 5 * time.Second
	}
	if cfg.FullPlanInterval <= 0 {
		cfg.FullPlanInterval = 10 * cfg.DriftInterval
	}
	if cfg.ReplanRate <= 0 {
		cfg.ReplanRate = nomadx.DefaultReplanRate
	}
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []string{"default"}
	}
	m := &Manager{
		cfg: cfg, srv: srv, nomad: nomad, git: git, logger: logger.Named("reconcile"),
		detectCh: make(chan struct{}, 1), applyCh: make(chan struct{}, 1),
		replan: nomadx.NewBudget(cfg.ReplanRate),
	}
	m.metrics = newMetrics(cfg.Registerer, m)
	return m
}

// Nomad returns the manager's Nomad client, whose Stats count every request
// the loops make.
func (m *Manager) Nomad() *nomadx.Client { return m.nomad }

func (m *Manager) now() time.Time { return m.cfg.Clock().UTC() }

// TriggerDetection asks for a detection cycle as soon as possible.
func (m *Manager) TriggerDetection() {
	m.asked.Store(true)
	select {
	case m.detectCh <- struct{}{}:
	default:
	}
}

// TriggerApply asks for an apply pass as soon as possible.
func (m *Manager) TriggerApply() {
	m.mu.Lock()
	m.applyAll = true
	m.mu.Unlock()
	select {
	case m.applyCh <- struct{}{}:
	default:
	}
}

// Trigger wakes both loops: something that can move a job changed.
func (m *Manager) Trigger() {
	m.TriggerDetection()
	m.TriggerApply()
}

// Run runs the leader's loops until ctx is cancelled, and returns once they
// have all stopped. kicked delivers the server's wake-ups (decisions,
// pauses, window changes).
func (m *Manager) Run(ctx context.Context, kicked <-chan struct{}) {
	m.mu.Lock()
	m.parsed = map[string]parseResult{}
	m.seen = map[string]observed{}
	m.refusals = map[string]map[string]string{}
	m.liveIndex = 0
	m.liveList = nil
	m.termStart = time.Now()
	m.mu.Unlock()
	// The watcher fetches every repository as soon as it runs; detection
	// waits for those fetches (waitFirstFetch), since what the watcher kept
	// from an earlier term may be older than what that term deployed.
	var wg sync.WaitGroup
	run := func(fn func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(ctx)
		}()
	}
	if m.git != nil {
		run(m.git.Run)
		run(func(ctx context.Context) {
			for {
				select {
				case <-ctx.Done():
					return
				case <-m.git.Notify():
					m.TriggerDetection()
				}
			}
		})
	}
	run(func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-kicked:
				m.Trigger()
			}
		}
	})
	run(m.detectLoop)
	run(m.applyLoop)
	if !m.cfg.DisableEventStream {
		m.mu.Lock()
		m.streamUp = map[string]bool{}
		for _, ns := range m.streamNamespaces() {
			m.streamUp[ns] = false
		}
		m.mu.Unlock()
		for _, ns := range m.streamNamespaces() {
			run(func(ctx context.Context) { m.watchLive(ctx, ns) })
		}
	}
	m.logger.Info("leader loops started")
	m.Trigger()
	wg.Wait()
	// A server that no longer leads has no re-plans pending; the count of
	// its last cycle would read as a re-plan stuck on a follower.
	m.metrics.replanPending.Set(0)
	m.logger.Info("leader loops stopped")
}

func (m *Manager) detectLoop(ctx context.Context) {
	m.waitFirstFetch(ctx)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.detectCh:
		case <-timer.C:
		}
		start, before := time.Now(), m.nomad.Stats()
		m.prompt.Store(m.asked.Swap(false))
		res, err := m.DetectOnce(ctx)
		m.metrics.observeDetection(start, err)
		if res != nil {
			m.metrics.created.Add(float64(res.created))
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.logger.Error("detection cycle failed", "error", err)
		} else if res.changed {
			// A cycle that changed deployments may enable the next step.
			m.TriggerApply()
		}
		m.logger.Debug("detection cycle", "duration", time.Since(start))
		next := m.cfg.DriftInterval
		if m.streaming() {
			// Live changes arrive on the stream; the periodic cycle is
			// only the safety net of full plans.
			next = m.cfg.FullPlanInterval
		}
		// Look again when a decision asked to (a window boundary of a
		// job, a waiting deployment that moved on); after a failed cycle,
		// at the next boundary of any window.
		var again time.Time
		if res != nil {
			again = res.lookAgainAt
		} else {
			again = m.nextWindowBoundary()
		}
		if !again.IsZero() {
			if d := again.Sub(m.now()); d < next {
				next = d + 10*time.Millisecond
			}
		}
		if d, ok := m.replanNext(before); ok {
			next = min(next, d)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// firstFetchWait bounds how long a new leader waits for the first fetch of
// every repository before its first detection cycle.
const firstFetchWait = 10 * time.Second

// waitFirstFetch waits until every repository has been fetched once (or
// failed to be), so that the first cycle of a new leader sees git whole.
func (m *Manager) waitFirstFetch(ctx context.Context) {
	if m.git == nil {
		return
	}
	deadline := time.NewTimer(firstFetchWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		since := m.termStart
		m.mu.Unlock()
		fetched := true
		for _, st := range m.git.Status() {
			if st.LastFetch.Before(since) {
				fetched = false
			}
		}
		if fetched {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			m.logger.Warn("first fetch of the repositories is slow; detecting with what is there")
			return
		case <-tick.C:
		}
	}
}

func (m *Manager) applyLoop(ctx context.Context) {
	timer := time.NewTimer(m.cfg.EngineInterval)
	defer timer.Stop()
	for {
		all := true
		var ids []string
		select {
		case <-ctx.Done():
			return
		case <-m.applyCh:
			all, ids = m.takeWakes()
		case <-timer.C:
		}
		applyStart := time.Now()
		var ended bool
		var err error
		if all {
			ended, err = m.ApplyOnce(ctx)
		} else {
			ended, err = m.ApplyDeployments(ctx, ids)
		}
		m.metrics.applyDuration.Observe(time.Since(applyStart).Seconds())
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.logger.Error("apply pass failed", "error", err)
		}
		if ended {
			// A deployment ending can unblock detection.
			m.TriggerDetection()
		}
		if all || err != nil {
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(m.nextApplyPass(err != nil))
		}
	}
}
