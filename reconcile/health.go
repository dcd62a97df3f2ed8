package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// The health of the managed jobs (JobStatus.Health) is the count of their
// allocations (nomadx.CountAllocations), recorded through Raft when it
// changes: every server's dashboard shows it, and its live updates move
// with it. The leader keeps a book of the allocations of the managed jobs
// that Nomad still wants: each subscription of the event stream
// (livewatch.go) fills it with one list of the namespace's allocations,
// and the stream's allocation events move it, so that counting costs no
// Nomad request while the stream is up. An event marks the job it
// concerns; a pass then counts the marked jobs from the book,
// healthDebounce after the first event of a burst, and records the counts
// that changed. While the stream is down, each detection cycle is followed
// by a pass that lists the allocations again; the cycle that records a
// job's first status reads its allocations (countFresh). Passes run in the
// detection loop, so a cycle's record of the statuses and a pass never
// interleave: the cycle keeps the counts the pass recorded
// (recordStatuses).

// healthDebounce gathers the events of a burst (an allocation moves from
// pending to running to healthy within seconds) into one pass.
const healthDebounce = 500 * time.Millisecond

// allocBook holds the allocations the counts read, guarded by core.mu.
type allocBook struct {
	// allocs are the allocations of managed jobs that Nomad wants and has
	// not replaced, by ID.
	allocs map[string]nomadx.AllocState
	// listed is, by stream namespace, the index of the last list: an
	// event about an allocation at or before it tells nothing new. A job
	// is counted from the book only once its namespace was listed.
	listed map[string]uint64
}

// covers reports whether the allocations of namespace ns were listed.
func (b *allocBook) covers(ns string) bool {
	_, all := b.listed["*"]
	_, one := b.listed[ns]
	return all || one
}

// put keeps a newer state of an allocation, or forgets one Nomad no
// longer wants. Called with core.mu held.
func (b *allocBook) put(a nomadx.AllocState) {
	if b.allocs == nil {
		b.allocs = map[string]nomadx.AllocState{}
	}
	if old, ok := b.allocs[a.ID]; ok && old.ModifyIndex > a.ModifyIndex {
		return
	}
	if !a.Wanted() {
		delete(b.allocs, a.ID)
		return
	}
	b.allocs[a.ID] = a
}

// fill replaces the allocations of stream namespace ns ("*": all) by a
// list Nomad made at index, keeping what an event told after it. Called
// with core.mu held.
func (b *allocBook) fill(ns string, list []nomadx.AllocState, index uint64, managed func(key string) bool) {
	listed := map[string]bool{}
	for _, a := range list {
		if managed(a.Key()) {
			listed[a.ID] = true
			b.put(a)
		}
	}
	for id, a := range b.allocs {
		if (ns == "*" || a.Namespace == ns) && !listed[id] && a.ModifyIndex <= index {
			delete(b.allocs, id)
		}
	}
	if b.listed == nil {
		b.listed = map[string]uint64{}
	}
	b.listed[ns] = max(b.listed[ns], index)
}

// managedJob reports whether the job with this key has a status, that is
// whether Nops manages (or deployed) it.
func (m *core) managedJob(key string) bool {
	cluster, ns, id, ok := structs.SplitJobKey(key)
	if !ok {
		return false
	}
	s, err := m.srv.State().JobStatus(cluster, ns, id)
	return err == nil && s != nil
}

// fillAllocations lists the allocations of stream namespace ns into the
// book.
func (m *core) fillAllocations(ctx context.Context, ns string) error {
	list, index, err := m.nomad.Allocations(ctx, ns)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.book.fill(ns, list, index, m.managedJob)
	m.mu.Unlock()
	return nil
}

// allocationEvents moves the book with a batch's allocation events from
// the stream of namespace stream, and marks the managed jobs they
// concern; hook runs and other jobs are not counted.
func (m *core) allocationEvents(stream string, acts []nomadx.Activity) {
	var keys []string
	seen := map[string]bool{}
	m.mu.Lock()
	for _, act := range acts {
		a := act.Alloc
		if a.ID == "" || a.JobID == "" || a.ModifyIndex <= m.book.listed[stream] {
			continue
		}
		key := a.Key()
		if !seen[key] {
			seen[key] = m.managedJob(key)
			if seen[key] {
				keys = append(keys, key)
			}
		}
		if seen[key] {
			m.book.put(a)
		}
	}
	m.mu.Unlock()
	m.markHealth(keys...)
}

// markHealth asks for the counts of the jobs with these keys.
func (m *core) markHealth(keys ...string) { m.mark(&m.healthDirty, keys, m.signalHealth) }

// markHealthAll asks for the counts of every job; list asks that the
// allocations be listed from Nomad first.
func (m *core) markHealthAll(list bool) {
	m.mu.Lock()
	m.healthAll = true
	m.healthList = m.healthList || list
	m.mu.Unlock()
	m.signalHealth()
}

// readHealth asks for the allocations of jobs to be read from Nomad
// before they are counted again (a read that failed).
func (m *core) readHealth(keys ...string) { m.mark(&m.healthRead, keys, m.signalHealth) }

func (m *core) signalHealth() {
	select {
	case m.healthCh <- struct{}{}:
	default:
	}
}

// takeHealth returns and clears what the health pass was asked for.
func (m *core) takeHealth() (all, list bool, keys, reads []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	all, list = m.healthAll, m.healthList
	m.healthAll, m.healthList = false, false
	for k := range m.healthDirty {
		keys = append(keys, k)
	}
	for k := range m.healthRead {
		reads = append(reads, k)
	}
	m.healthDirty, m.healthRead = nil, nil
	sort.Strings(keys)
	return all, list, keys, reads
}

// recordHealth counts the allocations of the jobs asked for and records
// the counts that changed. What it could not read from Nomad is asked for
// again at the next pass.
func (m *Detector) recordHealth(ctx context.Context) error {
	all, list, keys, reads := m.takeHealth()
	return m.countHealth(ctx, all, list, keys, reads)
}

// freshReads is how many jobs that start to be managed a cycle reads the
// allocations of one by one; more are counted from one list a namespace.
const freshReads = 10

// countFresh counts the jobs that start to be managed, in the cycle that
// records their first status, before the next cycle: no event told of
// their allocations.
func (m *Detector) countFresh(ctx context.Context, fresh []string) {
	if len(fresh) == 0 {
		return
	}
	sort.Strings(fresh)
	list, reads := len(fresh) > freshReads, fresh
	if list {
		reads = nil
	}
	if err := m.countHealth(ctx, false, list, fresh, reads); err != nil && ctx.Err() == nil {
		m.logger.Warn("health of new jobs not recorded; the health pass tries again", "error", err)
	}
}

// healthChanges returns copies of the stored statuses of the jobs with
// keys whose counts differ from the stored ones, sorted by key. A job
// whose allocations are not covered (the book has not had them listed
// yet) keeps its counts until they are.
func healthChanges(stored []*structs.JobStatus, keys []string, counts map[string]*structs.JobHealth, covered map[string]bool) []*structs.JobStatus {
	statuses := make(map[string]*structs.JobStatus, len(stored))
	for _, s := range stored {
		statuses[s.Key()] = s
	}
	var upserts []*structs.JobStatus
	done := map[string]bool{}
	for _, key := range keys {
		s := statuses[key]
		if s == nil || done[key] || !covered[key] {
			continue
		}
		done[key] = true
		h := counts[key]
		if h == nil {
			h = &structs.JobHealth{}
		}
		if s.Health != nil && *s.Health == *h {
			continue
		}
		c := *s
		c.Health = h
		upserts = append(upserts, &c)
	}
	sort.Slice(upserts, func(i, j int) bool { return upserts[i].Key() < upserts[j].Key() })
	return upserts
}

// countHealth counts the allocations of every job (all) or of those with
// keys, after listing every allocation (list) or reading those of the
// jobs with reads, and records the counts that changed.
func (m *Detector) countHealth(ctx context.Context, all, list bool, keys, reads []string) error {
	if !all && len(keys) == 0 && len(reads) == 0 {
		return nil
	}
	if list {
		for _, ns := range m.streamNamespaces() {
			if err := m.fillAllocations(ctx, ns); err != nil {
				m.markHealthAll(true)
				return fmt.Errorf("count allocations: %w", err)
			}
		}
	}
	for i, key := range reads {
		_, ns, id, _ := structs.SplitJobKey(key)
		allocs, err := m.nomad.JobAllocations(ctx, ns, id)
		if err != nil && !errors.Is(err, nomadx.ErrJobNotFound) {
			m.readHealth(reads[i:]...)
			return fmt.Errorf("count allocations of %s: %w", key, err)
		}
		m.mu.Lock()
		for _, a := range allocs {
			m.book.put(nomadx.AllocStateOf(m.cluster, a))
		}
		m.mu.Unlock()
	}
	stored, err := m.jobStatuses()
	if err != nil {
		return fmt.Errorf("read job statuses: %w", err)
	}
	if all {
		keys = keys[:0]
		for _, s := range stored {
			keys = append(keys, s.Key())
		}
	} else {
		keys = append(keys, reads...)
	}
	read := make(map[string]bool, len(reads))
	for _, k := range reads {
		read[k] = true
	}
	m.mu.Lock()
	allocs := make([]nomadx.AllocState, 0, len(m.book.allocs))
	for _, a := range m.book.allocs {
		allocs = append(allocs, a)
	}
	covered := map[string]bool{}
	for _, s := range stored {
		covered[s.Key()] = read[s.Key()] || m.book.covers(s.Namespace)
	}
	m.mu.Unlock()
	upserts := healthChanges(stored, keys, nomadx.CountAllocations(allocs), covered)
	if len(upserts) == 0 {
		return nil
	}
	if _, err := m.srv.Apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: m.meta(), Statuses: upserts}); err != nil {
		return fmt.Errorf("record job health: %w", err)
	}
	m.logger.Debug("job health recorded", "jobs", len(upserts))
	return nil
}
