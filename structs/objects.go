package structs

import "time"

// Event kinds: what an audit event is about.
const (
	EventKindDeployment = "deployment"
	EventKindJob        = "job"
	EventKindPause      = "pause"
	EventKindWindow     = "window"
	// EventKindRepository is about a git repository: a head refused for
	// its signature (SPEC section 18), object "repository/<name>".
	EventKindRepository = "repository"
)

// Event is one line of the audit log. Every state change and every decision
// appends one, in the same Raft entry.
type Event struct {
	// Seq orders events; it is assigned by the FSM.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Object names what the event is about: a deployment ID, a job key
	// (namespace/job), a window name, or "*" for every job.
	Object string `json:"object"`
	// Cluster is the Nomad cluster of the job or deployment the event is
	// about, or the cluster a pause names; empty for none.
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	JobID     string `json:"job_id,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
	Actor     string `json:"actor"`
	Message   string `json:"message,omitempty"`
	Index     uint64 `json:"index"`
}

// GlobalPauseKey is the pause key of the pause of every job.
const GlobalPauseKey = "*"

// Pause holds one job, or every job when Global is set.
type Pause struct {
	Key    string `json:"key"`
	Global bool   `json:"global"`
	// Cluster is the job's cluster, or the cluster every job of which the
	// pause holds when it names no job.
	Cluster     string    `json:"cluster,omitempty"`
	Namespace   string    `json:"namespace,omitempty"`
	JobID       string    `json:"job_id,omitempty"`
	Actor       string    `json:"actor"`
	Reason      string    `json:"reason"`
	CreatedAt   time.Time `json:"created_at"`
	CreateIndex uint64    `json:"create_index"`
}

// WindowKind is allow or deny.
type WindowKind string

const (
	WindowAllow WindowKind = "allow"
	WindowDeny  WindowKind = "deny"
)

// SyncWindow is a cluster-wide schedule that opens or closes deployments
// (SPEC section 6).
type SyncWindow struct {
	Name string     `json:"name"`
	Kind WindowKind `json:"kind"`
	// Schedule is a 5-field cron expression for the window's starts.
	Schedule string `json:"schedule"`
	// Duration is how long the window stays active after each start, as a
	// Go duration.
	Duration string `json:"duration"`
	// Timezone is an IANA name; empty means UTC.
	Timezone   string   `json:"timezone"`
	Namespaces []string `json:"namespaces"`
	Jobs       []string `json:"jobs"`
	// Clusters selects the Nomad clusters whose jobs the window holds
	// (SPEC section 16); empty selects every cluster.
	Clusters    []string `json:"clusters,omitempty"`
	CreateIndex uint64   `json:"create_index"`
	ModifyIndex uint64   `json:"modify_index"`
}

// WindowLift is a stored deploy-now request, consumed by the next deployment
// detection creates for the job.
type WindowLift struct {
	Cluster     string    `json:"cluster"`
	Namespace   string    `json:"namespace"`
	JobID       string    `json:"job_id"`
	Actor       string    `json:"actor"`
	CreatedAt   time.Time `json:"created_at"`
	CreateIndex uint64    `json:"create_index"`
}

// Key returns the lift's job key.
func (l *WindowLift) Key() string { return JobKey(l.Cluster, l.Namespace, l.JobID) }

// Block keeps detection from creating the same deployment again after one
// failed, was rejected or expired (SPEC sections 4 and 20). The FSM writes
// it when a deployment ends failed, rejected or expired; a retry or a newer
// deployment removes it.
type Block struct {
	Cluster      string `json:"cluster"`
	Namespace    string `json:"namespace"`
	JobID        string `json:"job_id"`
	DeploymentID string `json:"deployment_id"`
	SpecHash     string `json:"spec_hash"`
	// AfterRegister is set when the deployment failed after its register;
	// such a block survives changes of the live job.
	AfterRegister bool `json:"after_register"`
	// JobModifyIndex is the live job's modify index the deployment saw.
	JobModifyIndex uint64 `json:"job_modify_index"`
	// Retried is set by a person's retry: the block no longer holds, and
	// the next cycle creates a deployment even when the job is in sync (it
	// then waits for health and runs the post-hooks again).
	Retried     bool   `json:"retried"`
	RetriedBy   string `json:"retried_by,omitempty"`
	CreateIndex uint64 `json:"create_index"`
	// Expired is set when the deployment's approval expired. Such a block
	// is no failure: the job does not show as blocked and nothing
	// notifies it, but the same spec on the same live job is not proposed
	// again until a commit, a live change or a retry.
	Expired bool `json:"expired,omitempty"`
}

// Key returns the block's job key.
func (b *Block) Key() string { return JobKey(b.Cluster, b.Namespace, b.JobID) }

// Blocks reports whether the block still holds for a job whose git spec hash
// and live modify index are the ones given: no deployment of them is
// created.
func (b *Block) Blocks(specHash string, liveModifyIndex uint64) bool {
	if b == nil || b.Retried || b.SpecHash != specHash {
		return false
	}
	return b.AfterRegister || b.JobModifyIndex == liveModifyIndex
}

// Failure reports whether the block, holding for the given spec hash and
// live modify index, shows the job as blocked: a failure or a rejection
// does, an expired approval does not.
func (b *Block) Failure(specHash string, liveModifyIndex uint64) bool {
	return b.Blocks(specHash, liveModifyIndex) && !b.Expired
}

// SyncState is a managed job's observed sync.
type SyncState string

const (
	SyncInSync SyncState = "in_sync"
	SyncDrift  SyncState = "drift"
	SyncError  SyncState = "error"
)

// JobStatus is the observed status of one managed job, replicated when it
// changes.
type JobStatus struct {
	Cluster    string    `json:"cluster"`
	Namespace  string    `json:"namespace"`
	JobID      string    `json:"job_id"`
	Repository string    `json:"repository"`
	File       string    `json:"file"`
	Commit     string    `json:"commit"`
	Policy     Policy    `json:"policy"`
	Sync       SyncState `json:"sync"`
	// DriftSummary is a one-line redacted summary of the plan diff.
	DriftSummary string `json:"drift_summary,omitempty"`
	SpecHash     string `json:"spec_hash,omitempty"`
	Hold         string `json:"hold,omitempty"`
	// WaitingFor says which job this one waits for (nops_depends_on, SPEC
	// section 17) and why, as "waiting for default/db: deploying"; empty
	// when it waits for none. No deployment is created while it is set.
	WaitingFor string   `json:"waiting_for,omitempty"`
	Blocked    bool     `json:"blocked"`
	Errors     []string `json:"errors,omitempty"`
	// Orphan is set for a job Nops deployed that git no longer declares.
	Orphan bool `json:"orphan,omitempty"`
	// LiveModifyIndex is the live job's modify index when last observed.
	LiveModifyIndex uint64    `json:"live_modify_index"`
	ObservedAt      time.Time `json:"observed_at"`
	CreateIndex     uint64    `json:"create_index"`
	ModifyIndex     uint64    `json:"modify_index"`

	// Drift is the redacted plan diff of the drift as a tree, while the
	// job drifts: shown whatever holds the job (a pause, a window, a
	// block), with or without a deployment. The list of jobs leaves it
	// out.
	Drift *PlanDiff `json:"drift,omitempty"`
	// Health counts the job's allocations as Nomad last reported them;
	// nil before they were first counted.
	Health *JobHealth `json:"health,omitempty"`
}

// Key returns the status's job key.
func (s *JobStatus) Key() string { return JobKey(s.Cluster, s.Namespace, s.JobID) }

// JobHealth counts the allocations of a job that Nomad wants running, as
// the leader last read them from Nomad (nomadx.CountAllocations): running
// ones, and of them those Nomad judges healthy or unhealthy (by the
// deployment that placed them; one placed outside a deployment is healthy
// when it runs); pending ones; complete ones (a batch job's); and failed or
// lost ones of the job's newest version that Nomad has not replaced.
type JobHealth struct {
	Running   int `json:"running"`
	Healthy   int `json:"healthy"`
	Unhealthy int `json:"unhealthy"`
	Pending   int `json:"pending"`
	Complete  int `json:"complete"`
	Failed    int `json:"failed"`
}

// State sums the counts up in a word: "degraded" when an allocation
// failed or is unhealthy, "progressing" while one is pending or not yet
// judged healthy, "healthy" when every one runs healthy, "completed" when
// none runs and some completed, "none" when there is none.
func (h *JobHealth) State() string {
	switch {
	case h == nil:
		return ""
	case h.Failed > 0 || h.Unhealthy > 0:
		return "degraded"
	case h.Pending > 0 || h.Healthy < h.Running:
		return "progressing"
	case h.Running > 0:
		return "healthy"
	case h.Complete > 0:
		return "completed"
	}
	return "none"
}

// RepoStatus is the observed status of one repository.
type RepoStatus struct {
	Name        string    `json:"name"`
	URL         string    `json:"url"`
	Branch      string    `json:"branch"`
	Path        string    `json:"path"`
	Head        string    `json:"head,omitempty"`
	LastFetch   time.Time `json:"last_fetch,omitzero"`
	FetchError  string    `json:"fetch_error,omitempty"`
	ParseErrors []string  `json:"parse_errors,omitempty"`
	Files       int       `json:"files"`
	ModifyIndex uint64    `json:"modify_index"`
	// Refused is the head commit last refused for its signature, empty
	// once a verified head is taken; FetchError says why.
	Refused string `json:"refused,omitempty"`
}

// DetectionCycle records the leader's last completed detection cycle, so
// every server shows how fresh its view is.
type DetectionCycle struct {
	// Cluster is the Nomad cluster whose jobs the cycle detected (SPEC
	// section 16); each cluster keeps its own last cycle. Empty, as in a
	// record written before clusters, is the default cluster.
	Cluster    string    `json:"cluster,omitempty"`
	Leader     string    `json:"leader"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Jobs       int       `json:"jobs"`
	Drifted    int       `json:"drifted"`
	Created    int       `json:"created"`
	Index      uint64    `json:"index"`
}
