package reconcile

import (
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// A register of Nops's own changes the live job like any other change:
// Nomad's event stream reports it, and detection would then list and plan
// the job to learn what the register's answer already says, that the live
// job is the deployment's spec at the modify index Nomad answered. So the
// applier tells detection: once Nomad has answered a register, the job is
// recorded as seen in sync at that index, as a plan showing no change
// would record it, and the register's own event wakes no cycle; the next
// cycle does not plan the job while neither its git spec nor its live job
// moves. The event can arrive before the answer: while a register is in
// flight, the events of its job are held, and once the answer is in, an
// event at another index (someone else's change, or a removal), or any
// event of a register that failed, wakes detection as it would have.
// A cycle can also run on a list of live jobs asked for before the answer
// (the cycle the completed deployment wakes, when Nomad's event of the
// register comes after it): that list still shows the job at its old
// index, or not at all, and says nothing the answer does not; the cycle
// takes the answer's index (listPredates).

// ownRegisters are the registers in flight, by job key, each with the
// job's events held meanwhile. Guarded by core.mu.
type ownRegisters map[string][]heldChange

// heldChange is a change of a job, and the index of its batch, held while
// the job's register was in flight.
type heldChange struct {
	change nomadx.JobChange
	index  uint64
}

// beginOwnRegister says that a register of the job with this key is about
// to be sent.
func (m *Applier) beginOwnRegister(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.detector.registering == nil {
		m.detector.registering = ownRegisters{}
	}
	m.detector.registering[key] = nil
}

// endOwnRegister says that the register of the job with this key, of the
// spec with specHash, was answered at modify index index (0: it failed, or
// its outcome is unknown). It wakes detection for any held event the
// register does not explain.
func (m *Applier) endOwnRegister(key, specHash string, index uint64) {
	m.mu.Lock()
	d := m.detector
	held := d.registering[key]
	delete(d.registering, key)
	if index != 0 {
		if d.seen == nil {
			d.seen = map[string]observed{}
		}
		d.seen[key] = observed{specHash: specHash, liveMod: index, inSync: true, planned: m.now(), registered: time.Now()}
	}
	wake := false
	for _, h := range held {
		if index == 0 || h.change.Deleted || h.change.JobModifyIndex != index {
			// As liveChangeOfManaged: the cycle lists from this index
			// on.
			m.liveIndex = max(m.liveIndex, h.index)
			wake = true
		}
	}
	m.mu.Unlock()
	if wake {
		m.logger.Debug("live change of a managed job during its register", "job", key)
		m.metrics.liveChanges.Inc()
		m.TriggerDetection()
	}
}

// hold holds the change c, of a batch at index, of the job with this key
// when a register of it is in flight, and reports whether it did. Called
// with core.mu held.
func (o ownRegisters) hold(key string, index uint64, c nomadx.JobChange) bool {
	held, ok := o[key]
	if ok {
		o[key] = append(held, heldChange{change: c, index: index})
	}
	return ok
}

// listPredates reports whether a list of live jobs asked for at listed,
// which shows the job at liveMod (0: not at all), predates the answer of
// Nops's own register recorded in prev: the list was asked for before the
// answer, and shows an older index. Nomad's indexes only grow, so the
// list tells nothing the answer does not.
func listPredates(prev observed, liveMod uint64, listed time.Time) bool {
	return !prev.registered.IsZero() && !listed.IsZero() && listed.Before(prev.registered) && liveMod < prev.liveMod
}
