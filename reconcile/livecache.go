package reconcile

import (
	"context"
	"maps"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// The list of live jobs is kept between cycles while Nomad's event stream
// is up. At 10,000 jobs one list is megabytes of JSON for Nomad to write
// and for the leader to read, in every cycle, and the cycles a commit or a
// paced re-plan runs come a second apart. While the stream has been up
// since the list and has reported no change of any job, the list is what
// Nomad would answer. When it reports changes of a few jobs (a commit's
// register, someone's change), the next cycle reads the stubs of those
// jobs alone (one small request each, from Nomad's state at the change's
// index) into a copy of the list, rather than the whole list again: a
// commit at 10,000 jobs no longer costs Nomad and the leader a list of
// every job. More changes than maxPatched between two cycles, a change
// the stream reports while the list is being made, or the stream going
// down, make the next cycle list everything again. As a safety net, a
// list (the one the patches were applied to) is not reused past the full
// re-plan interval (FullPlanInterval, 24 h by default: the safety net of
// the plans too), or past DriftInterval when that is longer or the re-plan
// is off. The first commit after an idle drift interval does not wait for
// a list: at 10,000 jobs it took most of a second, on the commit's path.

// maxPatched is the most jobs the stream may report changed between two
// cycles for the kept list to be patched, one request each, rather than
// listed again.
const maxPatched = 32

// liveList is a list of live jobs and what was true when it was made.
type liveList struct {
	jobs map[string]*api.JobListStub
	// epoch (the count of the stream's ups, downs and the job changes
	// that were not patched) and index (the last live change's it
	// accounts for, patched or to patch) are those before the list was
	// asked for, index moved on by each change recorded to patch.
	epoch, index uint64
	// at is when the list the patches apply to was asked for.
	at time.Time
}

// jobRef names a job the stream reported changed, and the index of the
// last such report.
type jobRef struct {
	ns, id string
	index  uint64
}

// liveJobsCached returns the live jobs, slimmed (slimStub): the kept list
// while it is still what Nomad holds (with the jobs the stream reported
// changed read again), or a new list; and when that list was asked for.
// Callers must not change the map.
func (m *Detector) liveJobsCached(ctx context.Context) (map[string]*api.JobListStub, time.Time, error) {
	m.mu.Lock()
	kept, epoch, index := m.liveList, m.streamEpoch, m.liveIndex
	dirty := maps.Clone(m.liveDirty)
	up := len(m.streamUp) > 0
	for _, u := range m.streamUp {
		up = up && u
	}
	m.mu.Unlock()
	if up && kept != nil && kept.epoch == epoch && kept.index == index && time.Since(kept.at) < m.listTrust() {
		if len(dirty) == 0 {
			return kept.jobs, kept.at, nil
		}
		return m.patchLive(ctx, kept, dirty)
	}
	started := time.Now()
	live, err := m.liveJobs(ctx)
	for k, stub := range live {
		live[k] = slimStub(stub)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.liveList, m.liveDirty = nil, nil
	if err == nil && up {
		m.liveList = &liveList{jobs: live, epoch: epoch, index: index, at: started}
	}
	return live, started, err
}

// patchLive reads the stubs of the jobs in dirty, which the stream
// reported changed since kept was made, into a copy of kept's jobs, keeps
// the copy, and returns it with the time kept was asked for: a stub not
// read again is as Nomad held it then, or later.
func (m *Detector) patchLive(ctx context.Context, kept *liveList, dirty map[string]jobRef) (map[string]*api.JobListStub, time.Time, error) {
	jobs := maps.Clone(kept.jobs)
	for key, ref := range dirty {
		stub, err := m.nomad.JobStub(ctx, ref.ns, ref.id, ref.index, liveListWait)
		if err != nil {
			m.mu.Lock()
			m.liveList, m.liveDirty = nil, nil
			m.mu.Unlock()
			return nil, kept.at, err
		}
		if stub == nil {
			delete(jobs, key)
		} else {
			jobs[key] = slimStub(stub)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// A change reported meanwhile was either recorded to patch (the
	// list's index moved on, its job stays in liveDirty unless it is one
	// just read at that index) or ends the list (another epoch).
	if cur := m.liveList; cur != nil && cur.epoch == kept.epoch {
		m.liveList = &liveList{jobs: jobs, epoch: cur.epoch, index: cur.index, at: kept.at}
		for key, ref := range dirty {
			if m.liveDirty[key].index == ref.index {
				delete(m.liveDirty, key)
			}
		}
	}
	return jobs, kept.at, nil
}

// listTrust is how long a kept list of live jobs may be reused while the
// stream reports no change: the full re-plan interval, or the drift
// interval when that is longer or the re-plan is off.
func (m *Detector) listTrust() time.Duration {
	return max(m.rules.interval(), m.cfg.DriftInterval)
}

// jobsChanged says that the stream reported changes of jobs at index: a
// kept list of live jobs is out of date, and the next list (or read of a
// changed job's stub) waits until Nomad's reads show index (Nomad sends the
// event before the change is visible to reads), whatever job changed, so
// that a list made in between is not kept as the new one. When the kept
// list is current and few jobs changed, they are recorded to be read again
// (patchLive); otherwise the next cycle lists every job.
func (m *core) jobsChanged(index uint64, changes []nomadx.JobChange) {
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.liveList
	patch := kept != nil && kept.epoch == m.streamEpoch && kept.index == m.liveIndex &&
		len(changes) > 0 && len(m.liveDirty)+len(changes) <= maxPatched
	for _, c := range changes {
		patch = patch && c.JobID != ""
	}
	m.liveIndex = max(m.liveIndex, index)
	if !patch {
		m.streamEpoch++
		m.liveDirty = nil
		return
	}
	if m.liveDirty == nil {
		m.liveDirty = map[string]jobRef{}
	}
	for _, c := range changes {
		ns := c.Namespace
		if ns == "" {
			ns = "default"
		}
		m.liveDirty[m.key(ns, c.JobID)] = jobRef{ns: ns, id: c.JobID, index: m.liveIndex}
	}
	m.liveList = &liveList{jobs: kept.jobs, epoch: kept.epoch, index: m.liveIndex, at: kept.at}
}

// slimStub keeps of a live job's stub what detection reads (its identity,
// type, status, stop flag and indexes), and drops the rest: a job's
// summary and meta, kept for 10,000 jobs, are most of a list's memory.
func slimStub(s *api.JobListStub) *api.JobListStub {
	return &api.JobListStub{
		ID: s.ID, ParentID: s.ParentID, Name: s.Name, Namespace: s.Namespace, Type: s.Type,
		Priority: s.Priority, Periodic: s.Periodic, ParameterizedJob: s.ParameterizedJob, Stop: s.Stop,
		Status: s.Status, CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex, JobModifyIndex: s.JobModifyIndex,
		SubmitTime: s.SubmitTime,
	}
}
