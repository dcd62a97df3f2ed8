package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
	"github.com/nops-dev/nops/structs/meta"
)

// core is what the leader's loops share: the server and the clients they
// act through, the clock, each loop's wake-ups, the state of Nomad's event
// stream and the refusals of Nomad calls. The Detector, the Applier and the
// Manager embed the same core; its mutex guards the fields below it and
// those of the Detector.
type core struct {
	// cluster is the name of the Nomad cluster this core detects and
	// applies (SPEC section 16): every job key, state read and write of
	// its loops is of this cluster.
	cluster string
	cfg     Config
	srv     Server
	nomad   *nomadx.Client
	git     *gitwatch.Watcher
	logger  hclog.Logger
	metrics *metrics
	// requiredBy wakes the detection of each cluster that requires this
	// one (the promotion order, SPEC section 16) when one of its
	// deployments ends; set by NewFleet before the loops run.
	requiredBy []func()

	detectCh chan struct{}
	applyCh  chan struct{}
	// healthCh wakes the health pass (health.go), versionCh the check of
	// Nomad's version (version.go).
	healthCh, versionCh chan struct{}
	// asked says a detection cycle was asked for since the last one began.
	asked atomic.Bool

	mu sync.Mutex
	// termStart is when this server's current leadership began; git
	// snapshots fetched before it are not trusted.
	termStart time.Time
	// streamUp says, by namespace, whether Nomad's job event stream is
	// up; liveIndex is the index of the last live change it reported.
	streamUp  map[string]bool
	liveIndex uint64
	// streamEpoch counts the stream's ups and downs and the job changes it
	// reported; liveList is the list of live jobs kept between cycles
	// while it is up (livecache.go).
	streamEpoch uint64
	liveList    *liveList
	// liveDirty are the jobs the stream reported changed since liveList
	// was made, by job key, to read again before it is used.
	liveDirty map[string]jobRef
	// refusals are the calls Nomad refused, by job key and step
	// (callerrors.go).
	refusals map[string]map[string]string
	// applyAll and woken say what the apply loop was woken for: every
	// active deployment, or those listed (wake.go).
	applyAll bool
	woken    map[string]struct{}
	// book holds the allocations of the managed jobs; healthAll,
	// healthDirty and healthRead say whose the health pass counts (every
	// job's, those marked) and whose it reads from Nomad first; healthList
	// that it lists every allocation first (health.go).
	book        allocBook
	healthAll   bool
	healthList  bool
	healthDirty map[string]struct{}
	healthRead  map[string]struct{}

	// defaults, when set, replaces cfg.Defaults (a configuration reload);
	// repoClusters, cfg.RepoClusters.
	defaults     atomic.Pointer[meta.Defaults]
	repoClusters atomic.Pointer[map[string]string]
	// settings, when set, replaces the cluster settings of cfg (Requires,
	// Bake, UIURL): a configuration reload.
	settings atomic.Pointer[ClusterSettings]
}

func (m *core) now() time.Time { return m.cfg.Clock().UTC() }

// key returns the job key of a job of the core's cluster.
func (m *core) key(namespace, jobID string) string {
	return structs.JobKey(m.cluster, namespace, jobID)
}

// ofCluster keeps the objects of the core's cluster.
func ofCluster[T any](m *core, list []*T, cluster func(*T) string) []*T {
	out := list[:0:0]
	for _, o := range list {
		if structs.ClusterName(cluster(o)) == m.cluster {
			out = append(out, o)
		}
	}
	return out
}

// activeDeployments returns the active deployments of the core's cluster.
func (m *core) activeDeployments() ([]*structs.Deployment, error) {
	list, err := m.srv.State().ActiveDeployments()
	if err != nil {
		return nil, err
	}
	return ofCluster(m, list, func(d *structs.Deployment) string { return d.Cluster }), nil
}

// jobStatuses returns the observed statuses of the jobs of the core's
// cluster.
func (m *core) jobStatuses() ([]*structs.JobStatus, error) {
	list, err := m.srv.State().JobStatuses()
	if err != nil {
		return nil, err
	}
	return ofCluster(m, list, func(s *structs.JobStatus) string { return s.Cluster }), nil
}

// TriggerDetection asks for a detection cycle as soon as possible.
func (m *core) TriggerDetection() {
	m.asked.Store(true)
	select {
	case m.detectCh <- struct{}{}:
	default:
	}
}

// wakeDetection runs a detection cycle as soon as possible without asking
// for it: the paced re-plan does not yield to that cycle (replan.go).
func (m *core) wakeDetection() {
	select {
	case m.detectCh <- struct{}{}:
	default:
	}
}

// TriggerApply asks for an apply pass as soon as possible.
func (m *core) TriggerApply() {
	m.mu.Lock()
	m.applyAll = true
	m.mu.Unlock()
	m.signalApply()
}

// signalApply wakes the apply loop, unless a wake is pending already.
func (m *core) signalApply() {
	select {
	case m.applyCh <- struct{}{}:
	default:
	}
}

// Trigger wakes both loops: something that can move a job changed.
func (m *core) Trigger() {
	m.TriggerDetection()
	m.TriggerApply()
}

func (m *core) meta() structs.WriteMeta {
	return structs.WriteMeta{Time: m.now(), Actor: "nops"}
}

func (m *core) managesNamespace(n string) bool {
	for _, want := range m.cfg.Namespaces {
		if want == "*" || want == n {
			return true
		}
	}
	return false
}

// nextWindowBoundary returns when the next sync window opens or closes.
func (m *core) nextWindowBoundary() time.Time {
	windows, err := m.srv.State().Windows()
	if err != nil {
		// Look again after the engine interval rather than never.
		m.logger.Warn("read sync windows", "error", err)
		return m.now().Add(m.cfg.EngineInterval)
	}
	if len(windows) == 0 {
		return time.Time{}
	}
	return holds.NextBoundary(windows, m.now())
}

// transition proposes a move of a deployment from the state it was read in.
func (m *core) transition(d *structs.Deployment, to structs.DeploymentState, msg, errMsg string) error {
	return m.transitionWith(d, to, msg, errMsg, nil)
}

func (m *core) transitionWith(d *structs.Deployment, to structs.DeploymentState, msg, errMsg string, patch *structs.DeploymentPatch) error {
	_, err := m.srv.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: m.meta(), ID: d.ID, From: d.State, To: to, Message: msg, Error: errMsg, Update: patch,
	})
	if err != nil {
		return fmt.Errorf("deployment %s %s -> %s: %w", d.ID, d.State, to, err)
	}
	m.logger.Info("deployment moved", "deployment", d.ID, "job", d.Key(), "from", d.State, "to", to, "message", firstOf(msg, errMsg))
	if to == structs.StateFailed {
		m.metrics.failed.Inc()
	}
	d.State = to
	return nil
}

// update records bookkeeping on a deployment in its current state.
func (m *core) update(d *structs.Deployment, patch *structs.DeploymentPatch) error {
	_, err := m.srv.Apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{
		WriteMeta: m.meta(), ID: d.ID, State: d.State, Update: patch,
	})
	if err != nil {
		return fmt.Errorf("update deployment %s: %w", d.ID, err)
	}
	return nil
}

func (m *core) fail(d *structs.Deployment, errMsg string) error {
	return m.transition(d, structs.StateFailed, "", errMsg)
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// liveJob reads a job from Nomad; nil when it does not exist.
func (m *core) liveJob(ctx context.Context, namespace, jobID string) (*api.Job, error) {
	live, err := m.nomad.Job(ctx, namespace, jobID)
	if errors.Is(err, nomadx.ErrJobNotFound) {
		return nil, nil
	}
	return live, err
}

// clusterNames returns the names of the server's clusters.
func (m *core) clusterNames() []string {
	if len(m.cfg.Clusters) == 0 {
		return []string{structs.DefaultCluster}
	}
	return m.cfg.Clusters
}
