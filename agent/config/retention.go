package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// blockRetention is the retention block: how long the leader keeps what
// the state holds. A pass runs every Interval, through Raft (see
// fsm/retention.go for what is never removed).
const blockRetention = "retention"

// RetentionConfig bounds the state. The defaults keep a year of audit
// events, 90 days of finished deployments (and at least the newest
// DeploymentsPerJob of each job whatever their age), and drop the stored
// job spec of a finished deployment an hour after it finished: its diff,
// decisions, hook runs and events stay. For a 1,000-job shop that deploys
// each job once a week this holds about 200 MB of state
// (BenchmarkRetentionYear1000Jobs).
type RetentionConfig struct {
	// SpecAfter is how long a finished deployment keeps its job spec and
	// hook specs.
	SpecAfter time.Duration
	// DeploymentsPerJob finished deployments of each job, the newest, are
	// kept whatever their age; older ones go after DeploymentAge.
	DeploymentsPerJob int
	DeploymentAge     time.Duration
	// EventAge is how long audit events are kept.
	EventAge time.Duration
	// Interval is the time between two passes.
	Interval time.Duration
}

// Defaults of the retention block.
const (
	DefaultRetentionSpecAfter         = time.Hour
	DefaultRetentionDeploymentsPerJob = 10
	DefaultRetentionDeploymentAge     = 90 * 24 * time.Hour
	DefaultRetentionEventAge          = 365 * 24 * time.Hour
	DefaultRetentionInterval          = 10 * time.Minute
)

// Bounds of the retention block.
const (
	// maxDeploymentsPerJob bounds deployments_per_job: past it, a job's
	// history is too long to list and retention keeps next to nothing.
	maxDeploymentsPerJob = 100_000
	// minRetentionInterval and maxRetentionInterval bound interval: a pass
	// more often than every second is a busy loop of Raft writes, and one
	// less often than daily lets a day's backlog pile up.
	minRetentionInterval = time.Second
	maxRetentionInterval = 24 * time.Hour
)

// DefaultRetention returns the retention used when nothing is set.
func DefaultRetention() RetentionConfig {
	return RetentionConfig{
		SpecAfter:         DefaultRetentionSpecAfter,
		DeploymentsPerJob: DefaultRetentionDeploymentsPerJob,
		DeploymentAge:     DefaultRetentionDeploymentAge,
		EventAge:          DefaultRetentionEventAge,
		Interval:          DefaultRetentionInterval,
	}
}

func retentionFields(r *RetentionConfig) []attrField {
	return []attrField{
		{name: "spec_after", v: durationValue(&r.SpecAfter)},
		{name: "deployments_per_job", v: intValue(&r.DeploymentsPerJob, nil)},
		{name: "deployment_age", v: durationValue(&r.DeploymentAge)},
		{name: "event_age", v: durationValue(&r.EventAge)},
		{name: "interval", v: durationValue(&r.Interval)},
	}
}

// decodeRetention applies a retention block.
func (l *loader) decodeRetention(b *hcl.Block) {
	l.decodeBody(b.Body, retentionFields(&l.cfg.Retention), nil)
}

// validateRetention checks the retention block: every bound is positive, a
// job keeps at least its newest deployment, and a pass runs at least once
// a day and at most once a second.
func (r RetentionConfig) validate(add func(key, format string, args ...any)) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"spec_after", r.SpecAfter}, {"deployment_age", r.DeploymentAge}, {"event_age", r.EventAge}} {
		if d.v <= 0 {
			add(blockRetention, "%s: must be a positive duration, not %s", d.name, d.v)
		}
	}
	if r.DeploymentsPerJob < 1 || r.DeploymentsPerJob > maxDeploymentsPerJob {
		add(blockRetention, "deployments_per_job: must be 1 to %d (the newest deployment of a job is always kept), not %d", maxDeploymentsPerJob, r.DeploymentsPerJob)
	}
	if r.Interval < minRetentionInterval || r.Interval > maxRetentionInterval {
		add(blockRetention, "interval: must be from 1s to 24h, not %s", r.Interval)
	}
}
