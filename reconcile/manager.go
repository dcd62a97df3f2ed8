package reconcile

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
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
	// Clusters names every Nomad cluster of the server (SPEC section 16);
	// RepoClusters gives each repository's cluster (a repository it does
	// not name is of structs.DefaultCluster). A job's nops_cluster names
	// one of Clusters.
	Clusters     []string
	RepoClusters map[string]string
	// Region, Requires, Bake and UIURL describe the manager's cluster
	// (GET /v1/clusters); Requires and Bake are its promotion order.
	Region         string
	Requires       []string
	Bake           time.Duration
	UIURL          string
	Namespaces     []string
	DriftInterval  time.Duration
	EngineInterval time.Duration
	Defaults       meta.Defaults
	// FullPlanInterval forces a plan of a job even when neither its git spec
	// nor its live job changed since it was last seen in sync, paced by
	// ReplanRate (replan.go); 0 turns this safety net off.
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
	// SharedGit says the git watcher is shared by the managers of several
	// clusters (a Fleet): the fleet runs it, seeds its verified heads and
	// exports its metrics, and this manager's Run only reads it.
	SharedGit bool
}

// Manager wires the reconcilers together and owns their lifecycle: a
// Detector and an Applier, whose loops Run runs only on the leader, and a
// Query (embedded) for the API's reads, which any server answers. Its own
// methods are the API's writes and the configuration reloads.
type Manager struct {
	*core
	*Query
	detector *Detector
	applier  *Applier
	// preview bounds the previews this server runs (preview.go).
	preview previewLimits
}

// New returns a manager.
func New(cfg Config, srv Server, nomad *nomadx.Client, git *gitwatch.Watcher, logger hclog.Logger) *Manager {
	cfg = withDefaults(cfg)
	c := &core{
		cluster: nomad.Cluster(),
		cfg:     cfg, srv: srv, nomad: nomad, git: git, logger: logger.Named("reconcile"),
		detectCh: make(chan struct{}, 1), applyCh: make(chan struct{}, 1), healthCh: make(chan struct{}, 1),
		versionCh: make(chan struct{}, 1),
	}
	c.metrics = newMetrics(cfg.Registerer, c)
	d := &Detector{core: c, replan: nomadx.NewBudget(cfg.ReplanRate)}
	d.rules.every.Store(int64(cfg.FullPlanInterval))
	return &Manager{
		core: c, Query: &Query{server: srv, client: nomad, clusters: c.clusterNames()},
		detector: d,
		applier:  &Applier{core: c, detector: d},
	}
}

// withDefaults fills in the settings cfg leaves unset.
func withDefaults(cfg Config) Config {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.DriftInterval <= 0 {
		cfg.DriftInterval = time.Minute
	}
	if cfg.EngineInterval <= 0 {
		cfg.EngineInterval = 5 * time.Second
	}
	cfg.FullPlanInterval = max(cfg.FullPlanInterval, 0)
	if cfg.ReplanRate <= 0 {
		cfg.ReplanRate = nomadx.DefaultReplanRate
	}
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []string{"default"}
	}
	return cfg
}

// Detector returns the manager's detection loop.
func (m *Manager) Detector() *Detector { return m.detector }

// Applier returns the manager's apply loop.
func (m *Manager) Applier() *Applier { return m.applier }

// Nomad returns the manager's Nomad client, whose Stats count every request
// the loops make.
func (m *Manager) Nomad() *nomadx.Client { return m.nomad }

// Run runs the leader's loops until ctx is cancelled, and returns once they
// have all stopped. kicks delivers the server's wake-ups (decisions,
// pauses, window changes); those pushed before Run began are dropped, as
// its first cycle and pass cover them. A nil kicks delivers none.
func (m *Manager) Run(ctx context.Context, kicks *KickQueue) {
	m.detector.beginTerm()
	if !m.cfg.SharedGit {
		m.seedVerifiedHeads()
	}
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
	git := m.git
	if m.cfg.SharedGit {
		git = nil // the fleet runs it
	}
	runWakers(run, git, m.TriggerDetection, kicks, m.kicked)
	run(m.detector.detectLoop)
	run(m.applier.applyLoop)
	run(m.watchVersion)
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

// runWakers runs, with run, what wakes the leader's loops: the git
// watcher, whose new heads call detect, and the server's kicks, given to
// kicked. A nil git or kicks runs none of its part. The kicks pushed before
// it ran are dropped: the loops' first cycle and pass cover them.
func runWakers(run func(func(context.Context)), git *gitwatch.Watcher, detect func(), kicks *KickQueue, kicked func([]structs.Kick)) {
	if git != nil {
		run(git.Run)
		run(func(ctx context.Context) {
			for {
				select {
				case <-ctx.Done():
					return
				case <-git.Notify():
					detect()
				}
			}
		})
	}
	if kicks != nil {
		kicks.Take()
		run(func(ctx context.Context) {
			for {
				select {
				case <-ctx.Done():
					return
				case <-kicks.Ready():
					kicked(kicks.Take())
				}
			}
		})
	}
}

// seedVerifiedHeads tells the watcher the last verified head of every
// repository the replicated state records, so that a leader that comes in
// while a head is refused for its signature serves the last verified
// commit (gitwatch.Watcher.SetVerified) rather than nothing.
func (m *Manager) seedVerifiedHeads() {
	if m.git == nil {
		return
	}
	repos, err := m.srv.State().RepoStatuses()
	if err != nil {
		m.logger.Warn("repository statuses not read; a refused head will leave its repository without a snapshot", "error", err)
		return
	}
	for _, r := range repos {
		if r.Head != "" {
			m.git.SetVerified(r.Name, r.Head)
		}
	}
}
