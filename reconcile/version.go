package reconcile

import (
	"context"
	"time"
)

// A change of Nomad's version can change how Nomad canonicalizes or plans
// a job that neither git nor Nomad's events say changed. The leader reads
// the version of Nomad's servers (nomadx.ServerVersion: one request, the
// lowest build of the region's alive servers) when its loops start, every
// DriftInterval, and at once whenever the event stream subscribes (Nomad
// restarts break the stream). A version other than the one it last saw
// makes every job planned before the change due for a re-plan, once,
// paced by the re-plan budget (replan.go). The version is not recorded
// through Raft: a new leader's first cycle plans every job anyway, so the
// version it first reads is its baseline and a failover makes no re-plan
// of its own.

// checkVersionSoon asks the version watcher for a check now.
func (m *core) checkVersionSoon() {
	select {
	case m.versionCh <- struct{}{}:
	default:
	}
}

// watchVersion checks Nomad's version until ctx ends: at once, every
// DriftInterval, and when asked (checkVersionSoon).
func (m *Manager) watchVersion(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.versionCh:
		case <-timer.C:
		}
		err := m.checkVersion(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			m.logger.Warn("cannot read the Nomad servers' version (GET /v1/agent/members, which needs node:read); until it can, a Nomad upgrade is re-planned by full_replan_interval only", "error", err)
		case err == nil && failing:
			m.logger.Info("the Nomad servers' version can be read again")
		}
		failing = err != nil
		timer.Reset(m.cfg.DriftInterval)
	}
}

// checkVersion reads Nomad's version and, when it is not the one last
// seen in this term, makes every job planned before now due for a paced
// re-plan and wakes detection for it.
func (m *Manager) checkVersion(ctx context.Context) error {
	v, err := m.nomad.ServerVersion(ctx)
	if err != nil {
		return err
	}
	prev, changed := m.detector.rules.seeVersion(v, m.now())
	if changed {
		m.logger.Info("Nomad's version changed: every managed job is re-planned once, paced by nomad_replan_rate",
			"from", prev, "to", v)
		m.metrics.versionChanges.Inc()
		m.wakeDetection()
	}
	return nil
}

// NomadVersion returns the Nomad servers' version the leader last read
// ("" before the first read of its term).
func (m *Manager) NomadVersion() string { return m.detector.rules.seenVersion() }
