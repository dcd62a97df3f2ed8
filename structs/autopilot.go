package structs

import (
	"fmt"
	"time"
)

// AutopilotConfig is the operator-changeable part of autopilot, stored in
// Raft so that every server, and every future leader, uses the same
// settings. Until an operator sets it, each server uses the autopilot
// block of its configuration file.
type AutopilotConfig struct {
	// CleanupDeadServers removes failed servers from Raft automatically.
	CleanupDeadServers bool `json:"cleanup_dead_servers"`
	// LastContactThreshold is how long a server may go without contact
	// with the leader and stay healthy.
	LastContactThreshold time.Duration `json:"last_contact_threshold"`
	// MaxTrailingLogs is how many entries a server may trail the leader
	// by and stay healthy.
	MaxTrailingLogs uint64 `json:"max_trailing_logs"`
	// MinQuorum is the fewest voters dead-server cleanup leaves.
	MinQuorum uint `json:"min_quorum"`
	// ServerStabilizationTime is how long a new server stays healthy
	// before it is promoted to voter.
	ServerStabilizationTime time.Duration `json:"server_stabilization_time"`

	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// Validate lists what is wrong with the configuration.
func (c *AutopilotConfig) Validate() []string {
	var problems []string
	if c.LastContactThreshold <= 0 {
		problems = append(problems, fmt.Sprintf("last_contact_threshold: must be greater than zero, got %s", c.LastContactThreshold))
	}
	if c.ServerStabilizationTime <= 0 {
		problems = append(problems, fmt.Sprintf("server_stabilization_time: must be greater than zero, got %s", c.ServerStabilizationTime))
	}
	if c.MinQuorum > 9 {
		problems = append(problems, fmt.Sprintf("min_quorum: at most 9, got %d", c.MinQuorum))
	}
	return problems
}

// AutopilotSetConfigRequest replaces the autopilot configuration. With
// CAS, it applies only when the stored configuration's ModifyIndex is
// Config.ModifyIndex (0: none stored yet).
type AutopilotSetConfigRequest struct {
	WriteMeta
	Config AutopilotConfig `json:"config"`
	CAS    bool            `json:"cas"`
}

// EventKindOperator is an event about the cluster's operation, such as an
// autopilot configuration change.
const EventKindOperator = "operator"
