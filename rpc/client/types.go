package client

import (
	"time"

	"github.com/nops-dev/nops/structs"
)

// AgentSelf is the server answering, as GET /v1/agent/self shows it.
type AgentSelf struct {
	NodeID     string            `json:"node_id"`
	Name       string            `json:"name"`
	Version    string            `json:"version"`
	HTTPAddr   string            `json:"http_addr"`
	RPCAddr    string            `json:"rpc_addr"`
	SerfAddr   string            `json:"serf_addr"`
	RaftState  string            `json:"raft_state"`
	Leader     string            `json:"leader"`
	LeaderID   string            `json:"leader_id"`
	IsLeader   bool              `json:"is_leader"`
	LoopsOn    bool              `json:"leader_loops_running"`
	Stats      map[string]string `json:"raft_stats"`
	Dev        bool              `json:"dev"`
	Namespaces []string          `json:"namespaces"`
}

// Member is a serf member, as GET /v1/agent/members shows it.
type Member struct {
	Name   string            `json:"name"`
	Addr   string            `json:"addr"`
	Port   uint16            `json:"port"`
	Status string            `json:"status"`
	Tags   map[string]string `json:"tags"`
}

// Health is the answer of GET /v1/health.
type Health struct {
	Status string `json:"status"`
	Leader string `json:"leader"`
	Node   string `json:"node"`
}

// RaftServer is one Raft peer.
type RaftServer struct {
	Node         string `json:"node"`
	ID           string `json:"id"`
	Address      string `json:"address"`
	Leader       bool   `json:"leader"`
	Voter        bool   `json:"voter"`
	RaftProtocol string `json:"raft_protocol"`
}

// RaftConfiguration is the answer of GET /v1/operator/raft/configuration.
type RaftConfiguration struct {
	Servers []RaftServer `json:"servers"`
	Index   uint64       `json:"index"`
}

// LeadershipTransfer is the answer of a leadership transfer: the leader
// once it is done.
type LeadershipTransfer struct {
	Leader   string `json:"leader"`
	LeaderID string `json:"leader_id"`
}

// SnapshotRestore is the answer of a snapshot restore.
type SnapshotRestore struct {
	RestoredIndex uint64 `json:"restored_index"`
	Term          uint64 `json:"term"`
}

// WindowSpec is the body of PUT /v1/window/{name}: a sync window as an
// operator writes it.
type WindowSpec struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Schedule   string   `json:"schedule"`
	Duration   string   `json:"duration"`
	Timezone   string   `json:"timezone"`
	Namespaces []string `json:"namespaces"`
	Jobs       []string `json:"jobs"`
}

// ApproveRequest is the body of an approve.
type ApproveRequest struct {
	Comment string `json:"comment"`
}

// RejectRequest is the body of a reject.
type RejectRequest struct {
	Reason string `json:"reason"`
}

// ReasonRequest is the body of a pause or a resume.
type ReasonRequest struct {
	Reason string `json:"reason"`
}

// JobDetail is the answer of GET /v1/job/{ns}/{id}: the observed status of
// one managed job with what holds it and its deployments.
type JobDetail struct {
	Status           *structs.JobStatus  `json:"status"`
	ActiveDeployment *structs.Deployment `json:"active_deployment"`
	LastDeployment   *structs.Deployment `json:"last_deployment"`
	Block            *structs.Block      `json:"block"`
	Pause            *structs.Pause      `json:"pause"`
	// LastReconciled is when the last detection cycle finished.
	LastReconciled *time.Time `json:"last_reconciled"`
}

// DeploymentFilter selects deployments; empty fields match all.
type DeploymentFilter struct {
	Namespace string
	JobID     string
	State     string
}
