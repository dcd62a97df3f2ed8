package reconcile

import (
	"sync"

	"github.com/nops-dev/nops/structs"
)

// maxPendingKicks bounds the kicks a KickQueue holds; past it they collapse
// into one that wakes everything, which is never wrong, only slower.
const maxPendingKicks = 1024

// KickQueue carries the server's wake-ups (structs.Kick) to the leader's
// loops. Push never blocks and never loses a kick: kicks not yet taken
// wait, and too many collapse into one that wakes everything.
type KickQueue struct {
	mu      sync.Mutex
	pending []structs.Kick
	all     bool
	ready   chan struct{}
}

// NewKickQueue returns an empty queue.
func NewKickQueue() *KickQueue {
	return &KickQueue{ready: make(chan struct{}, 1)}
}

// Push adds a kick and signals Ready.
func (q *KickQueue) Push(k structs.Kick) {
	q.mu.Lock()
	switch {
	case k.All || len(q.pending) >= maxPendingKicks:
		q.all, q.pending = true, nil
	case !q.all:
		q.pending = append(q.pending, k)
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled when kicks wait to be taken.
func (q *KickQueue) Ready() <-chan struct{} { return q.ready }

// Take returns and clears the waiting kicks: one that wakes everything
// when any did.
func (q *KickQueue) Take() []structs.Kick {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.all {
		q.all, q.pending = false, nil
		return []structs.Kick{{All: true}}
	}
	out := q.pending
	q.pending = nil
	return out
}

// kicked wakes the loops for what the kicks name: a decided deployment in
// the apply loop alone; a job whose holds changed in detection and, for its
// active deployment, the apply loop; anything else both loops whole.
func (m *Manager) kicked(kicks []structs.Kick) {
	for _, k := range kicks {
		switch {
		case k.All:
			m.Trigger()
			return
		case k.Deployment != "":
			m.wakeDeployments(k.Deployment)
		case k.Cluster != "" && structs.ClusterName(k.Cluster) != m.cluster:
			// A job or a pause of another cluster.
		case k.JobID == "" && k.Cluster != "":
			// The pause of this whole cluster.
			m.Trigger()
		case k.JobID != "":
			m.TriggerDetection()
			m.wakeJob(k.Namespace, k.JobID)
		}
	}
}

// wakeJob wakes the active deployment of a job, if it has one; when the
// state cannot be read, the whole apply loop.
func (m *Manager) wakeJob(namespace, jobID string) {
	d, err := m.srv.State().ActiveDeployment(m.cluster, namespace, jobID)
	if err != nil {
		m.logger.Warn("read the active deployment of a kicked job", "job", m.key(namespace, jobID), "error", err)
		m.TriggerApply()
		return
	}
	if d != nil {
		m.wakeDeployments(d.ID)
	}
}
