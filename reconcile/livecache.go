package reconcile

import (
	"context"
	"time"

	"github.com/hashicorp/nomad/api"
)

// The list of live jobs is kept between cycles while Nomad's event stream
// is up. At 10,000 jobs one list is megabytes of JSON for Nomad to write
// and for the leader to read, in every cycle, and the cycles a commit or a
// paced re-plan runs come a second apart. While the stream has been up
// since the list and has reported no change of any job, the list is what
// Nomad would answer; a change of a watched job also triggers a cycle,
// which lists again. As a safety net, a list is not reused past the full
// re-plan interval (FullPlanInterval, 24 h by default: the safety net of
// the plans too), or past DriftInterval when that is longer or the re-plan
// is off. The first commit after an idle drift interval does not wait for
// a list: at 10,000 jobs it took most of a second, on the commit's path.

// liveList is a list of live jobs and what was true when it was made.
type liveList struct {
	jobs map[string]*api.JobListStub
	// epoch (the count of the stream's ups, downs and job changes) and
	// index (the last live change's) are those before the list was asked
	// for.
	epoch, index uint64
	at           time.Time
}

// liveJobsCached returns the live jobs, slimmed (slimStub): the kept list
// while it is still what Nomad holds, or a new list; and when that list
// was asked for. Callers must not change the map.
func (m *Detector) liveJobsCached(ctx context.Context) (map[string]*api.JobListStub, time.Time, error) {
	m.mu.Lock()
	kept, epoch, index := m.liveList, m.streamEpoch, m.liveIndex
	up := len(m.streamUp) > 0
	for _, u := range m.streamUp {
		up = up && u
	}
	m.mu.Unlock()
	if up && kept != nil && kept.epoch == epoch && kept.index == index && time.Since(kept.at) < m.listTrust() {
		return kept.jobs, kept.at, nil
	}
	started := time.Now()
	live, err := m.liveJobs(ctx)
	for k, stub := range live {
		live[k] = slimStub(stub)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.liveList = nil
	if err == nil && up {
		m.liveList = &liveList{jobs: live, epoch: epoch, index: index, at: started}
	}
	return live, started, err
}

// listTrust is how long a kept list of live jobs may be reused while the
// stream reports no change: the full re-plan interval, or the drift
// interval when that is longer or the re-plan is off.
func (m *Detector) listTrust() time.Duration {
	return max(m.rules.interval(), m.cfg.DriftInterval)
}

// jobsChanged says that the stream reported a change of a job at index: a
// kept list of live jobs is out of date, and the next list waits until
// Nomad's reads show index (Nomad sends the event before the change is
// visible to reads), whatever job changed, so that a list made in between
// is not kept as the new one.
func (m *core) jobsChanged(index uint64) {
	m.mu.Lock()
	m.streamEpoch++
	m.liveIndex = max(m.liveIndex, index)
	m.mu.Unlock()
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
