package structs

import "time"

// The request bodies and answers of the HTTP API (SPEC section 10) that are
// not stored objects. Each is declared here once: the server encodes it,
// rpc/client decodes it and the dashboard reads it, so the two sides of the
// API cannot drift apart. The agent's route table names, for every route,
// which of these (or which stored object) it answers.

// --- status and agent

// NodeStatus is the answer of GET /v1/status/node: the node ID and serf
// name of the server that answers.
type NodeStatus struct {
	NodeID string `json:"node_id"`
	// Name is the server's serf node name: the leader binds a Raft peer
	// to the member of this name only.
	Name string `json:"name,omitempty"`
}

// RaftStats is the answer of GET /v1/status/raft: a server's own Raft
// index, term and last contact, which the leader's autopilot reads.
type RaftStats struct {
	// LastContactMillis is the time since the last contact with the
	// leader, in milliseconds: 0 on the leader, -1 when never.
	LastContactMillis int64  `json:"last_contact_ms"`
	LastTerm          uint64 `json:"last_term"`
	LastIndex         uint64 `json:"last_index"`
}

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
	// Refused says why the member is ignored for every membership
	// decision (it claims the node ID of a Raft peer it is not); empty
	// for the others.
	Refused string `json:"refused,omitempty"`
}

// The serf tags every Nops server carries, which GET /v1/agent/members
// shows.
const (
	MemberTagRole            = "role"
	MemberTagID              = "id"
	MemberTagRPCAddr         = "rpc_addr"
	MemberTagHTTPAddr        = "http_addr"
	MemberTagBootstrapExpect = "bootstrap_expect"
	MemberTagVersion         = "version"
	MemberTagACL             = "acl"
	// MemberTagRegion is the server's region: a member of another region
	// is never a peer.
	MemberTagRegion = "region"
	// MemberTagBatch says the server applies batch entries.
	MemberTagBatch = "batch"
	// MemberRoleNops is the role tag of a Nops server.
	MemberRoleNops = "nops"
)

// Health is the answer of GET /v1/health while the server knows a leader
// (it answers 503 otherwise).
type Health struct {
	Status string `json:"status"`
	Leader string `json:"leader"`
	Node   string `json:"node"`
}

// --- deployments, pauses and windows

// ApproveRequest is the body of POST /v1/deployment/{id}/approve.
type ApproveRequest struct {
	Comment string `json:"comment"`
}

// RejectRequest is the body of POST /v1/deployment/{id}/reject.
type RejectRequest struct {
	Reason string `json:"reason"`
}

// ReasonRequest is the body of a pause or a resume.
type ReasonRequest struct {
	Reason string `json:"reason"`
}

// PauseAllRequest is the body of POST /v1/pause and POST /v1/resume: the
// pause of every job, or with Cluster of every job of that Nomad cluster.
type PauseAllRequest struct {
	Reason  string `json:"reason"`
	Cluster string `json:"cluster,omitempty"`
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
	// Clusters selects the Nomad clusters (globs); empty selects all.
	Clusters []string `json:"clusters,omitempty"`
}

// Deleted is the answer of a delete: the name or ID of what was deleted.
type Deleted struct {
	Deleted string `json:"deleted"`
}

// --- operator

// RaftServer is one Raft peer as the operator endpoints show it.
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

// RaftPeerRemoved is the answer of DELETE /v1/operator/raft/peer.
type RaftPeerRemoved struct {
	Removed string `json:"removed"`
}

// LeadershipTransfer is the answer of a leadership transfer: the leader
// once it is done.
type LeadershipTransfer struct {
	Leader   string `json:"leader"`
	LeaderID string `json:"leader_id"`
}

// SnapshotRestore is the answer of PUT /v1/operator/snapshot.
type SnapshotRestore struct {
	RestoredIndex uint64 `json:"restored_index"`
	Term          uint64 `json:"term"`
}

// KeyringResponse is the answer of the keyring endpoints: what every
// server answered. Keys are never shown, only their fingerprints
// ("sha256:" and 16 hex digits of the SHA-256 of the key's bytes), so that
// reading the keyring does not give away the key that protects gossip.
type KeyringResponse struct {
	// Keys counts, per key fingerprint, the servers that have it installed.
	Keys map[string]int `json:"keys"`
	// PrimaryKeys counts, per key fingerprint, the servers that encrypt
	// with it.
	PrimaryKeys map[string]int `json:"primary_keys"`
	// NumNodes is the number of members; NumResp answered, NumErr failed.
	NumNodes int `json:"num_nodes"`
	NumResp  int `json:"num_resp"`
	NumErr   int `json:"num_err"`
	// Messages holds the error of each server that failed, by name.
	Messages map[string]string `json:"messages,omitempty"`
}

// KeyringOp is the body of a keyring change: a base64 gossip key.
type KeyringOp struct {
	Key string `json:"key"`
}

// AutopilotConfiguration is the autopilot configuration as
// /v1/operator/autopilot/configuration shows and takes it. Durations are
// Go duration strings ("200ms", "10s").
type AutopilotConfiguration struct {
	CleanupDeadServers      bool   `json:"cleanup_dead_servers"`
	LastContactThreshold    string `json:"last_contact_threshold"`
	MaxTrailingLogs         uint64 `json:"max_trailing_logs"`
	MinQuorum               uint   `json:"min_quorum"`
	ServerStabilizationTime string `json:"server_stabilization_time"`
	// CreateIndex and ModifyIndex are 0 while the configuration comes from
	// the servers' configuration files (none was set through the API).
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// AutopilotHealth is the cluster's health as the leader's autopilot sees
// it (GET /v1/operator/autopilot/health).
type AutopilotHealth struct {
	Healthy          bool                    `json:"healthy"`
	FailureTolerance int                     `json:"failure_tolerance"`
	Leader           string                  `json:"leader"`
	Voters           []string                `json:"voters"`
	Servers          []AutopilotServerHealth `json:"servers"`
}

// AutopilotServerHealth is one Raft server's health.
type AutopilotServerHealth struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Address     string    `json:"address"`
	SerfStatus  string    `json:"serf_status"`
	Version     string    `json:"version"`
	Leader      bool      `json:"leader"`
	Voter       bool      `json:"voter"`
	RaftState   string    `json:"raft_state"`
	Healthy     bool      `json:"healthy"`
	LastContact string    `json:"last_contact"`
	LastTerm    uint64    `json:"last_term"`
	LastIndex   uint64    `json:"last_index"`
	StableSince time.Time `json:"stable_since"`
}

// --- notifications

// NotifyTarget is a configured notify block as the API shows it: never its
// URL or secret.
type NotifyTarget struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Events     []string `json:"events"`
	Namespaces []string `json:"namespaces"`
	Jobs       []string `json:"jobs"`
}

// NotifyTestResult is the answer of POST /v1/notify/{name}/test.
type NotifyTestResult struct {
	Target string `json:"target"`
	ID     string `json:"id"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

// --- ACL

// ACLPolicySpec is the body of PUT /v1/acl/policy/{name}.
type ACLPolicySpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Rules       string `json:"rules"`
}

// ACLRoleSpec is the body of PUT /v1/acl/role/{name}.
type ACLRoleSpec struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Policies    []string `json:"policies"`
}

// ACLTokenSpec is the body of a token create or update.
type ACLTokenSpec struct {
	Name     string   `json:"name"`
	Type     string   `json:"type,omitempty"`
	Policies []string `json:"policies"`
	Roles    []string `json:"roles"`
	// ExpirationTime or ExpirationTTL (a Go duration) set an expiry at
	// creation; an update cannot change it.
	ExpirationTime *time.Time `json:"expiration_time,omitempty"`
	ExpirationTTL  string     `json:"expiration_ttl,omitempty"`
}

// ACLAuthMethodSpec is the body of PUT /v1/acl/auth-method/{name}.
type ACLAuthMethodSpec struct {
	Name        string               `json:"name"`
	Type        string               `json:"type"`
	DisplayName string               `json:"display_name"`
	TokenTTL    string               `json:"token_ttl"`
	Default     bool                 `json:"default"`
	Config      *ACLAuthMethodConfig `json:"config"`
}

// ACLBindingRuleSpec is the body of a binding rule create or update; the
// server names a new rule, so ID is for an update only.
type ACLBindingRuleSpec struct {
	ID          string `json:"id,omitempty"`
	Description string `json:"description"`
	AuthMethod  string `json:"auth_method"`
	Selector    string `json:"selector"`
	BindType    string `json:"bind_type"`
	BindName    string `json:"bind_name"`
}

// ACLOIDCAuthURLRequest is the body of POST /v1/acl/oidc/auth-url.
type ACLOIDCAuthURLRequest struct {
	AuthMethod  string `json:"auth_method"`
	RedirectURI string `json:"redirect_uri"`
	ClientNonce string `json:"client_nonce"`
	// CodeChallenge is the S256 PKCE challenge of the client's verifier.
	CodeChallenge string `json:"code_challenge"`
}

// ACLOIDCAuthURLResponse is its answer: where the user's browser goes, and
// the state the callback must come back with.
type ACLOIDCAuthURLResponse struct {
	AuthURL string `json:"auth_url"`
	State   string `json:"state"`
}

// ACLOIDCCompleteAuthRequest is the body of POST /v1/acl/oidc/complete-auth.
type ACLOIDCCompleteAuthRequest struct {
	AuthMethod   string `json:"auth_method"`
	RedirectURI  string `json:"redirect_uri"`
	ClientNonce  string `json:"client_nonce"`
	State        string `json:"state"`
	Code         string `json:"code"`
	CodeVerifier string `json:"code_verifier"`
}

// ACLLoginRequest is the body of POST /v1/acl/login (a JWT exchange).
type ACLLoginRequest struct {
	AuthMethod string `json:"auth_method"`
	LoginToken string `json:"login_token"`
}

// --- the reconcilers' routes

// DeploymentRef names a deployment and its state.
type DeploymentRef struct {
	ID    string          `json:"id"`
	State DeploymentState `json:"state"`
}

// JobSummary is one job of GET /v1/jobs: its observed status with its
// active and last deployments and when the leader last reconciled it.
type JobSummary struct {
	*JobStatus
	ActiveDeployment *DeploymentRef `json:"active_deployment"`
	LastDeployment   *DeploymentRef `json:"last_deployment"`
	// LastReconciled is when the last detection cycle finished.
	LastReconciled *time.Time `json:"last_reconciled"`
}

// JobDetail is the answer of GET /v1/job/{ns}/{id}: the observed status of
// one managed job with what holds it and its deployments (without their
// job specs).
type JobDetail struct {
	Status           *JobStatus  `json:"status"`
	ActiveDeployment *Deployment `json:"active_deployment"`
	LastDeployment   *Deployment `json:"last_deployment"`
	Block            *Block      `json:"block"`
	Pause            *Pause      `json:"pause"`
	// LastReconciled is when the last detection cycle finished.
	LastReconciled *time.Time `json:"last_reconciled"`
}

// PromoteResult is the answer of POST /v1/deployment/{id}/promote: the
// deployment whose canaries were promoted.
type PromoteResult struct {
	Promoted string `json:"promoted"`
}

// WebhookResult is the answer of POST /v1/webhook/git: the watched
// repositories the push matched (each fetched at once) and its branch.
type WebhookResult struct {
	Matched []string `json:"matched"`
	// Branches are the branches the push moved.
	Branches []string `json:"branches,omitempty"`
	// Message says why a delivery changed nothing: it was no push of a
	// branch (a ping, a tag), or no watched repository follows its
	// repository and branch.
	Message string `json:"message,omitempty"`
	// Duplicate is set when the delivery's ID was already handled: the
	// replay changed nothing.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Push is a git push whose webhook signature the agent verified: the
// repository's URLs as the sender names them (clone, SSH, web; a generic
// sender may give a watched repository's name), the branches pushed to
// (Bitbucket can push several at once), the commit it now points at, and
// the sender's delivery ID. After and Delivery are empty when the sender
// names none, After also when several branches moved.
type Push struct {
	URLs     []string
	Branches []string
	After    string
	// Provider and Delivery name the delivery (the sender's ID of it, by
	// its provider's header), which the leader records so that a replay
	// changes nothing; both empty when the sender gave none.
	Provider string
	Delivery string
}

// NomadHealth is the answer of GET /v1/deployment/{id}/nomad: the health
// of the Nomad deployment that a Nops deployment's register created, read
// from Nomad by the server asked. Deployment is false when the register
// created none (batch, periodic and parameterized jobs) or has not
// happened yet.
type NomadHealth struct {
	Deployment  bool               `json:"deployment"`
	ID          string             `json:"id,omitempty"`
	Status      string             `json:"status,omitempty"`
	Description string             `json:"description,omitempty"`
	Groups      []NomadGroupHealth `json:"groups,omitempty"`
}

// NomadGroupHealth is one task group of a Nomad deployment.
type NomadGroupHealth struct {
	Name              string `json:"name"`
	Desired           int    `json:"desired"`
	Placed            int    `json:"placed"`
	Healthy           int    `json:"healthy"`
	Unhealthy         int    `json:"unhealthy"`
	DesiredCanaries   int    `json:"desired_canaries"`
	PlacedCanaries    int    `json:"placed_canaries"`
	Promoted          bool   `json:"promoted"`
	AwaitingPromotion bool   `json:"awaiting_promotion"`
}

// PreviewRequest asks what Nops would do with a repository at a ref (SPEC
// section 19): a branch or tag name on the remote, or a full commit hash.
type PreviewRequest struct {
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
}

// Preview is what Nops would do with a repository at a ref (SPEC section
// 19), computed without writing anything: the managed jobs whose spec at
// the ref differs from the live cluster, and the managed jobs the ref adds
// and removes against the repository's followed branch. Every diff in it
// is redacted as a deployment's diffs are. Jobs the caller's token cannot
// read are left out.
type Preview struct {
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
	// Commit is the commit the ref resolved to.
	Commit string `json:"commit"`
	// Branch is the repository's followed branch, and BranchCommit the
	// commit of it the file diffs and the added and removed jobs compare
	// with ("" before the repository's first fetch).
	Branch       string `json:"branch"`
	BranchCommit string `json:"branch_commit,omitempty"`
	// Jobs are the managed jobs declared at the ref that would deploy
	// (their spec differs from the live job's, or there is no live job)
	// or cannot (a validation error), by job key.
	Jobs []*PreviewJob `json:"jobs"`
	// Removed are the managed jobs the followed branch declares and the
	// ref does not: Nops never stops them; they would become orphans.
	Removed []*PreviewJob `json:"removed"`
	// Errors are the files at the ref that are not valid jobs, as
	// "path: error".
	Errors []string `json:"errors,omitempty"`
	// Changes says whether anything would change: a job in Jobs or
	// Removed, or an error.
	Changes bool `json:"changes"`
}

// Preview changes of a job.
const (
	// PreviewChanged: the followed branch declares the job too.
	PreviewChanged = "changed"
	// PreviewAdded: the ref declares a job the followed branch does not.
	PreviewAdded = "added"
	// PreviewRemoved: the followed branch declares a job the ref does not.
	PreviewRemoved = "removed"
)

// PreviewJob is one job of a Preview.
type PreviewJob struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	JobID     string `json:"job_id"`
	File      string `json:"file"`
	// Change is PreviewChanged, PreviewAdded or PreviewRemoved.
	Change string `json:"change"`
	Policy Policy `json:"policy,omitempty"`
	// PlanType is Nomad's diff type ("Added", "Edited"), Diff the
	// redacted plan diff in the style of `nomad job plan`; both empty for
	// a removed job or one that cannot be planned.
	PlanType string `json:"plan_type,omitempty"`
	Diff     string `json:"diff,omitempty"`
	// FileDiff is the redacted unified diff of the job file and its
	// variables file from the followed branch to the ref.
	FileDiff string `json:"file_diff,omitempty"`
	// What would stop the deployment: a hold (pause or window), a block
	// left by a failed or rejected deployment, a dependency
	// (nops_depends_on) that is not ready, and validation errors.
	Hold       string   `json:"hold,omitempty"`
	Blocked    string   `json:"blocked,omitempty"`
	WaitingFor string   `json:"waiting_for,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// ClusterStatus is what the leader sees of one Nomad cluster (GET
// /v1/clusters, SPEC section 16). Reachable says the cluster's last
// request got an answer Nops could use; Error says why not.
type ClusterStatus struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Region  string `json:"region,omitempty"`
	// Reachable, LastContact and Error describe the last request to the
	// cluster: answered and allowed, when Nomad last answered, and the
	// error of the last request that got no answer or a refusal.
	Reachable   bool      `json:"reachable"`
	LastContact time.Time `json:"last_contact,omitzero"`
	Error       string    `json:"error,omitempty"`
	// NomadVersion is the version of the cluster's Nomad servers, as the
	// leader last read it; EventStream says its job event stream is up.
	NomadVersion string `json:"nomad_version,omitempty"`
	EventStream  bool   `json:"event_stream"`
	// Jobs counts the cluster's managed jobs (orphans aside), Drifted
	// those that drift, Active the active deployments.
	Jobs    int `json:"jobs"`
	Drifted int `json:"drifted"`
	Active  int `json:"active"`
	// LastReconciled is when the cluster's last detection cycle finished
	// (replicated: a cluster that is down stops moving it); zero before
	// the first.
	LastReconciled time.Time `json:"last_reconciled,omitzero"`
	// Requires and Bake are the cluster's promotion order: a job deploys
	// here only after it completed in each required cluster Bake ago.
	Requires []string      `json:"requires,omitempty"`
	Bake     time.Duration `json:"bake,omitempty"`
	UIURL    string        `json:"ui_url,omitempty"`
	// Leader is the server whose loops watch the cluster; empty on a
	// server that does not lead (its answer is then the replicated part).
	Leader string `json:"leader,omitempty"`
}
