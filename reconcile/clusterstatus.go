package reconcile

import (
	"maps"

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
		Requires: m.cfg.Requires, Bake: m.cfg.Bake, UIURL: m.cfg.UIURL,
	}
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
	return out
}

// setRepoClusters replaces the repositories' clusters, as a configuration
// reload does; the next cycle classifies the jobs by them.
func (m *core) setRepoClusters(repoClusters map[string]string) {
	c := maps.Clone(repoClusters)
	m.repoClusters.Store(&c)
}
