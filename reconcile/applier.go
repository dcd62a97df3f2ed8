package reconcile

import (
	"context"
	"time"
)

// Applier runs the apply loop (SPEC section 5): it advances each active
// deployment through its hooks, register and health, recording every step
// through Raft before it acts on Nomad. It runs on the leader only.
type Applier struct {
	*core
	// detector learns of the registers (ownregister.go).
	detector *Detector
}

func (m *Applier) applyLoop(ctx context.Context) {
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
			// A deployment ending can unblock detection, here and in
			// the clusters that require this one.
			m.TriggerDetection()
			for _, wake := range m.requiredBy {
				wake()
			}
		}
		if all || err != nil {
			// Since Go 1.23 a reset timer never delivers a stale tick.
			timer.Reset(m.nextApplyPass(err != nil))
		}
	}
}
