package reconcile

import (
	"maps"
	"slices"
	"time"

	"github.com/nops-dev/nops/structs"
)

// ClusterStatus returns what this manager sees of its Nomad cluster: how
// its last request went, the version and event stream of this term, and
// the counts of its jobs and active deployments in the replicated state.
func (m *Manager) ClusterStatus() *structs.ClusterStatus {
	c := m.nomad.Contact()
	out := &structs.ClusterStatus{
		Name: m.cluster, Address: m.nomad.Address(), Region: m.cfg.Region,
		LastContact: c.LastContact, Error: c.Error, Reachable: !c.LastContact.IsZero() && c.Error == "",
		NomadVersion: m.NomadVersion(), EventStream: m.streaming(),
	}
	p := m.promotion()
	out.Requires, out.Bake, out.UIURL = p.Requires, p.Bake, p.UIURL
	if m.srv.IsLeader() {
		out.Leader = m.srv.NodeID()
	}
	if list, err := m.jobStatuses(); err == nil {
		for _, s := range list {
			if s.Orphan {
				continue
			}
			out.Jobs++
			if s.Sync == structs.SyncDrift {
				out.Drifted++
			}
		}
	}
	if active, err := m.activeDeployments(); err == nil {
		out.Active = len(active)
	}
	if c, err := m.srv.State().ClusterDetectionCycle(m.cluster); err == nil && c != nil {
		out.LastReconciled = c.FinishedAt
	}
	return out
}

// ClusterSettings are the settings of a cluster a reload may change:
// its promotion order (the clusters a job must have completed in first,
// and how long ago) and its Nomad UI.
type ClusterSettings struct {
	Requires []string
	Bake     time.Duration
	UIURL    string
}

// promotion returns the cluster's settings in force.
func (m *core) promotion() ClusterSettings {
	if p := m.settings.Load(); p != nil {
		return *p
	}
	return ClusterSettings{Requires: m.cfg.Requires, Bake: m.cfg.Bake, UIURL: m.cfg.UIURL}
}

// SetClusterSettings replaces the cluster's promotion order and Nomad UI,
// as a configuration reload does; the next cycle decides by them.
func (m *Manager) SetClusterSettings(s ClusterSettings) {
	s.Requires = slices.Clone(s.Requires)
	m.settings.Store(&s)
	m.TriggerDetection()
}

// setRepoClusters replaces the repositories' clusters, as a configuration
// reload does; the next cycle classifies the jobs by them.
func (m *core) setRepoClusters(repoClusters map[string]string) {
	c := maps.Clone(repoClusters)
	m.repoClusters.Store(&c)
}
