package config

import (
	"fmt"
	"time"
)

// Raft timings. As in Consul and Nomad, raft_multiplier scales the base
// timings, which suit servers on one LAN: the leader is suspected lost after
// HeartbeatTimeout to twice that without contact, so a new leader is
// elected within about a second of the loss of the old one. Raise the
// multiplier (up to 10) for servers on slow or distant links, or machines
// so loaded that heartbeats miss their deadline and leaders change without
// cause. Pre-vote (hashicorp/raft's default) stays on: a server that
// rejoins or was cut off asks whether it could win before it starts an
// election, so it cannot depose a healthy leader.
const (
	raftBaseHeartbeatTimeout   = 300 * time.Millisecond
	raftBaseElectionTimeout    = 300 * time.Millisecond
	raftBaseLeaderLeaseTimeout = 300 * time.Millisecond

	// DefaultRaftMultiplier is the multiplier of the base timings.
	DefaultRaftMultiplier = 1
	// MaxRaftMultiplier is the largest multiplier, as in Consul and Nomad:
	// past 10 a failover takes longer than most clients wait.
	MaxRaftMultiplier = 10
)

// RaftTimings are the timeouts a server gives hashicorp/raft.
type RaftTimings struct {
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
}

// RaftTimings returns the Raft timeouts of the configured multiplier.
func (c *Config) RaftTimings() RaftTimings {
	m := time.Duration(max(c.RaftMultiplier, 1))
	return RaftTimings{
		HeartbeatTimeout:   m * raftBaseHeartbeatTimeout,
		ElectionTimeout:    m * raftBaseElectionTimeout,
		LeaderLeaseTimeout: m * raftBaseLeaderLeaseTimeout,
	}
}

func checkRaftMultiplier(n int) error {
	if n < 1 || n > MaxRaftMultiplier {
		return fmt.Errorf("must be from 1 to %d, not %d", MaxRaftMultiplier, n)
	}
	return nil
}
