package agent

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
)

// stateCollector reads the replicated state at each scrape.
type stateCollector struct {
	s           *Server
	deployments *prometheus.Desc
	jobs        *prometheus.Desc
	raftState   *prometheus.Desc
	applied     *prometheus.Desc
	leader      *prometheus.Desc
	// approvalAge is the age of the oldest deployment waiting for
	// approval.
	approvalAge *prometheus.Desc
}

// registerMetrics registers the server's collectors, and makes its
// retention with its counters.
func registerMetrics(s *Server) {
	c := &stateCollector{
		s:           s,
		deployments: prometheus.NewDesc("nops_deployments", "Deployments by state.", []string{"state"}, nil),
		jobs:        prometheus.NewDesc("nops_jobs", "Managed jobs by sync state.", []string{"sync"}, nil),
		raftState:   prometheus.NewDesc("nops_raft_state", "Raft state of this server (1 for the current state).", []string{"state"}, nil),
		applied:     prometheus.NewDesc("nops_raft_applied_index", "Last Raft index applied to the state.", nil, nil),
		leader:      prometheus.NewDesc("nops_leader", "1 when this server is the leader.", nil, nil),
		approvalAge: prometheus.NewDesc("nops_approvals_oldest_pending_age_seconds",
			"Seconds the oldest deployment in pending_approval has waited for a decision, from the replicated state (0 when none waits).", nil, nil),
	}
	s.metrics.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.metrics.MustRegister(s.raftLogStore.collectors()...)
	s.metrics.MustRegister(s.proposer.writes, s.proposer.commitTime, s.leader.gained)
	s.retention = newRetention(s, s.metrics)
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.deployments
	ch <- c.jobs
	ch <- c.raftState
	ch <- c.applied
	ch <- c.leader
	ch <- c.approvalAge
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.State()
	counts := map[structs.DeploymentState]int{}
	var oldestWait time.Time
	if list, _, err := st.Deployments(fsm.DeploymentFilter{}); err == nil {
		for _, d := range list {
			counts[d.State]++
			if d.State == structs.StatePendingApproval && (oldestWait.IsZero() || d.StateEnteredAt.Before(oldestWait)) {
				oldestWait = d.StateEnteredAt
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.approvalAge, prometheus.GaugeValue, waitedSeconds(oldestWait, time.Now()))
	for _, state := range structs.AllStates {
		ch <- prometheus.MustNewConstMetric(c.deployments, prometheus.GaugeValue, float64(counts[state]), string(state))
	}
	syncs := map[structs.SyncState]int{}
	if jobs, err := st.JobStatuses(); err == nil {
		for _, j := range jobs {
			if !j.Orphan {
				syncs[j.Sync]++
			}
		}
	}
	for _, sy := range []structs.SyncState{structs.SyncInSync, structs.SyncDrift, structs.SyncError} {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(syncs[sy]), string(sy))
	}
	cur := c.s.raft.State()
	for _, rs := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if rs == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.raftState, prometheus.GaugeValue, v, rs.String())
	}
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, float64(c.s.raft.AppliedIndex()))
	l := 0.0
	if cur == raft.Leader {
		l = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, l)
}

// waitedSeconds is how long ago since was, in seconds: 0 for a zero time
// (nothing waits) and for a time ahead of now (another server's clock).
func waitedSeconds(since, now time.Time) float64 {
	if since.IsZero() {
		return 0
	}
	return max(now.Sub(since).Seconds(), 0)
}
