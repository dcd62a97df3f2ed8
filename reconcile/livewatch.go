package reconcile

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// Live changes are seen through Nomad's event stream (topic Job; topics
// Deployment and Allocation wake the deployments they concern, wake.go).
// While the stream is up, a change of the live job of a managed job triggers a
// detection cycle at once, and no cycle runs otherwise but the safety net's
// (FullPlanInterval, replan.go), so an idle cluster costs no polling: one
// request a drift interval, the check of Nomad's version (version.go). When the stream
// breaks, detection runs at once and then every DriftInterval again, while
// the watcher reconnects from the last index it saw. The stream lives under
// the leader's context: it stops with leadership, and a new leader starts
// its own from the highest live modify index the replicated job statuses
// record.

// streamBackoffMin and streamBackoffMax bound the wait before the watcher
// reconnects a broken stream: quick after a blip, and no more than one
// try every 30s against a Nomad that is down (detection polls meanwhile).
const (
	streamBackoffMin = time.Second
	streamBackoffMax = 30 * time.Second
)

// streaming reports whether the event stream of every watched namespace is
// up.
func (m *core) streaming() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.streamUp) == 0 {
		return false
	}
	for _, up := range m.streamUp {
		if !up {
			return false
		}
	}
	return true
}

func (m *core) setStreaming(ns string, up bool) {
	m.mu.Lock()
	if m.streamUp == nil {
		m.streamUp = map[string]bool{}
	}
	was, known := m.streamUp[ns]
	m.streamUp[ns] = up
	// A kept list of live jobs is only good while the stream stays up.
	m.streamEpoch++
	m.mu.Unlock()
	if known && was == up {
		return
	}
	m.metrics.setStreaming(m.streaming())
	if known && !up {
		// Fall back to the drift and engine intervals, starting with a
		// cycle and a pass now.
		m.Trigger()
	}
}

// streamNamespaces are the namespaces the leader watches, one stream each:
// the managed namespaces, or "*" (which needs read-job on every namespace).
func (m *core) streamNamespaces() []string {
	for _, n := range m.cfg.Namespaces {
		if n == "*" {
			return []string{"*"}
		}
	}
	return m.cfg.Namespaces
}

// resumeIndex is where a new leader's stream starts: just after the highest
// live modify index the replicated statuses record, so changes made during
// a failover are replayed (Nomad starts at its oldest event if that is
// older; the first cycle of the term covers anything before).
func (m *Manager) resumeIndex() uint64 {
	list, err := m.jobStatuses()
	if err != nil {
		return 0
	}
	var max uint64
	for _, s := range list {
		if s.LiveModifyIndex > max {
			max = s.LiveModifyIndex
		}
	}
	return max
}

// watchLive runs the event stream of namespace ns until ctx ends.
func (m *Manager) watchLive(ctx context.Context, ns string) {
	m.setStreaming(ns, false)
	defer m.setStreaming(ns, false)
	index := m.resumeIndex()
	backoff := structs.Backoff{Min: streamBackoffMin, Max: streamBackoffMax}
	first := true
	logger := m.logger.Named("events").With("namespace", ns)
	for ctx.Err() == nil {
		ch, err := m.nomad.WatchJobs(ctx, ns, index)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := backoff.Next()
			logger.Warn("cannot subscribe to Nomad's job events; detecting every drift interval", "error", err, "retry_in", wait)
			m.setStreaming(ns, false)
			if !structs.Sleep(ctx, wait) {
				return
			}
			continue
		}
		m.subscribed(ctx, ns, first, logger)
		first = false
		logger.Debug("watching Nomad's job events", "index", index)
		connected := time.Now()
		for batch := range ch {
			if batch.Err != nil {
				if ctx.Err() == nil {
					logger.Warn("Nomad's job event stream broke; detecting every drift interval until it is back", "error", batch.Err)
				}
				break
			}
			index = max(index, batch.Index)
			m.eventBatch(ns, batch, logger)
		}
		if ctx.Err() != nil {
			return
		}
		m.setStreaming(ns, false)
		if time.Since(connected) > streamBackoffMax {
			backoff.Reset()
		}
		if !structs.Sleep(ctx, backoff.Next()) {
			return
		}
	}
}

// subscribed starts the watch of a namespace whose event stream was just
// subscribed to: the allocation book listed, the stream marked up, and
// the loops woken for what the subscription may have missed.
func (m *Manager) subscribed(ctx context.Context, ns string, first bool, logger hclog.Logger) {
	// The allocations may have moved since the health counts were
	// recorded (before this term, or while the stream was down): list
	// them once; the stream's events move them from here on.
	if err := m.fillAllocations(ctx, ns); err != nil {
		if ctx.Err() == nil {
			logger.Warn("cannot list the allocations for the health counts; the health pass tries again", "error", err)
		}
		m.markHealthAll(true)
	} else {
		m.markHealthAll(false)
	}
	m.setStreaming(ns, true)
	// A Nomad that restarted may run another version.
	m.checkVersionSoon()
	if !first {
		// A gap: changes made while the stream was down may be older than
		// what Nomad's event buffer still holds, and Nomad resumes a
		// stream from the oldest event it has without saying so (the
		// first event of the topics asked for says nothing either). So
		// every resume is taken for a gap: a cycle lists the live jobs
		// once (the kept list went with the stream) and plans only the
		// jobs whose modify index changed.
		m.TriggerDetection()
	}
	// Once subscribed, the apply loop waits for events: a pass now settles
	// whatever finished between the term's first pass (or the break) and
	// the subscription, such as a hook run that completed while this
	// server was being elected.
	m.TriggerApply()
}

// eventBatch handles one batch of a namespace's events: the allocation
// book moves, the deployments the events concern wake, and a live change
// of a managed job starts a detection cycle.
func (m *Manager) eventBatch(ns string, batch nomadx.JobChanges, logger hclog.Logger) {
	if len(batch.Changes) > 0 {
		m.jobsChanged(batch.Index, batch.Changes)
	}
	m.allocationEvents(ns, batch.Activity)
	if ids := m.applier.routeActivity(batch.Activity); len(ids) > 0 {
		logger.Trace("Nomad deployment or allocation events wake deployments", "index", batch.Index, "deployments", ids)
	}
	if key := m.liveChangeOfManaged(batch.Index, batch.Changes); key != "" {
		logger.Debug("live change of a managed job", "job", key, "index", batch.Index)
		m.metrics.liveChanges.Inc()
		m.TriggerDetection()
	} else if len(batch.Changes) > 0 {
		logger.Trace("job events of no managed job changed", "index", batch.Index, "changes", len(batch.Changes))
	}
}

// liveChangeOfManaged returns the key of a job whose live job a batch (at
// index) changes, or "": a job the leader watches: one it planned, whose modify index is not the one it
// last saw, or that was removed. Nops's own registers count too (the next
// cycle records the new index); jobs it does not manage, such as hook runs,
// do not.
func (m *Manager) liveChangeOfManaged(index uint64, changes []nomadx.JobChange) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range changes {
		ns := c.Namespace
		if ns == "" {
			ns = "default"
		}
		key := m.key(ns, c.JobID)
		if m.detector.registering.hold(key, index, c) {
			continue
		}
		prev, ok := m.detector.seen[key]
		if !ok {
			continue
		}
		if c.Deleted || c.JobModifyIndex == 0 || c.JobModifyIndex != prev.liveMod {
			// Nomad sends an event before the change is visible to
			// reads: the cycle it triggers lists from this index on.
			m.liveIndex = max(m.liveIndex, index)
			return key
		}
	}
	return ""
}

// WatchingEvents reports whether the leader's watch of Nomad's job event
// stream is up.
func (m *Manager) WatchingEvents() bool { return m.streaming() }

// sinceIndex is the Nomad index the next job list must have reached: that
// of the last live change the stream reported (0 for none).
func (m *core) sinceIndex() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveIndex
}

// liveListWait bounds the wait of a job list for the index of a reported
// change; the change is normally visible within microseconds.
const liveListWait = 2 * time.Second
