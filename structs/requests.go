package structs

import "time"

// WriteMeta is stamped by the leader on every request before it is applied,
// so that the FSM stays deterministic.
type WriteMeta struct {
	Time  time.Time `json:"time"`
	Actor string    `json:"actor"`
}

// DeploymentCreateRequest creates a deployment in state detected.
type DeploymentCreateRequest struct {
	WriteMeta
	Deployment *Deployment `json:"deployment"`
	// ConsumeLift consumes the job's deploy-now request, if any, and records
	// it on the deployment.
	ConsumeLift bool `json:"consume_lift"`
	// FailWith, when set, fails the new deployment in the same entry with
	// this error (a hook it declares is missing or invalid), so that no step
	// can start it in between.
	FailWith string `json:"fail_with,omitempty"`
}

// DeploymentTransitionRequest moves a deployment to another state, and may
// update its bookkeeping in the same entry.
type DeploymentTransitionRequest struct {
	WriteMeta
	ID string `json:"id"`
	// From, when set, must be the deployment's current state: a
	// compare-and-set that keeps a stale decision from applying.
	From    DeploymentState  `json:"from,omitempty"`
	To      DeploymentState  `json:"to"`
	Message string           `json:"message,omitempty"`
	Error   string           `json:"error,omitempty"`
	Update  *DeploymentPatch `json:"update,omitempty"`
}

// DeploymentPatch is the bookkeeping a step records on a deployment. Nil
// fields are left as they are. The fields carry no omitempty: the log
// encoding would drop a pointer to a zero value (a zero deadline pauses the
// apply timeout), so only nil means "leave as it is".
type DeploymentPatch struct {
	HookRun           *HookRun   `json:"hook_run"`
	RegisterStartedAt *time.Time `json:"register_started_at"`
	Registered        *bool      `json:"registered"`
	JobVersion        *uint64    `json:"job_version"`
	NomadEvalID       *string    `json:"nomad_eval_id"`
	NomadDeploymentID *string    `json:"nomad_deployment_id"`
	HealthDeadline    *time.Time `json:"health_deadline"`
	Message           string     `json:"message"`
	// JobModifyIndex moves the check-and-set index of a deployment whose
	// live job changed only by the counts left to an autoscaler. It is
	// refused once the register is recorded.
	JobModifyIndex *uint64 `json:"job_modify_index,omitempty"`
}

// DeploymentUpdateRequest records bookkeeping on an active deployment
// without a change of state.
type DeploymentUpdateRequest struct {
	WriteMeta
	ID     string           `json:"id"`
	State  DeploymentState  `json:"state,omitempty"`
	Update *DeploymentPatch `json:"update"`
}

// DeploymentDecisionRequest is a person's approve or reject.
type DeploymentDecisionRequest struct {
	WriteMeta
	ID       string `json:"id"`
	Decision string `json:"decision"`
	Comment  string `json:"comment,omitempty"`
	// ForbidSelf is the leader's approval { forbid_self } when it
	// proposed the request: the FSM then refuses an approval by the
	// author of the deployment's commit. The setting travels in the entry
	// so that every server decides alike, whatever its own configuration.
	ForbidSelf bool `json:"forbid_self,omitempty"`
}

// DeploymentSkipRequirementsRequest lets a deployment that waits in
// detected for its cluster's promotion order (SPEC section 16) start
// without it. Reason is required: the skip is audited, with the actor,
// on the deployment's events.
type DeploymentSkipRequirementsRequest struct {
	WriteMeta
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// PauseRequest pauses one job, or every job when Global is set.
type PauseRequest struct {
	WriteMeta
	Global bool `json:"global"`
	// Cluster is the job's cluster; without a job, it pauses every job
	// of that cluster.
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	JobID     string `json:"job_id,omitempty"`
	Reason    string `json:"reason"`
}

// Key returns the pause key the request is about.
func (r *PauseRequest) Key() string {
	if r.Global {
		return GlobalPauseKey
	}
	if r.JobID == "" && r.Cluster != "" {
		return ClusterPauseKey(r.Cluster)
	}
	return JobKey(r.Cluster, r.Namespace, r.JobID)
}

// ClusterPauseKey is the pause key of the pause of every job of a cluster.
func ClusterPauseKey(cluster string) string { return "cluster:" + cluster }

// ResumeRequest ends a pause.
type ResumeRequest = PauseRequest

// WindowUpsertRequest creates or replaces a sync window.
type WindowUpsertRequest struct {
	WriteMeta
	Window *SyncWindow `json:"window"`
}

// WindowDeleteRequest deletes a sync window.
type WindowDeleteRequest struct {
	WriteMeta
	Name string `json:"name"`
}

// WindowLiftRequest stores a deploy-now request.
type WindowLiftRequest struct {
	WriteMeta
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace"`
	JobID     string `json:"job_id"`
}

// JobStatusUpsertRequest writes the observed status of jobs that changed.
type JobStatusUpsertRequest struct {
	WriteMeta
	Statuses []*JobStatus `json:"statuses"`
}

// JobStatusDeleteRequest removes the observed status of jobs no longer
// managed nor orphaned.
type JobStatusDeleteRequest struct {
	WriteMeta
	Keys []string `json:"keys"`
}

// RepoStatusUpsertRequest writes the observed status of repositories.
type RepoStatusUpsertRequest struct {
	WriteMeta
	Repos []*RepoStatus `json:"repos"`
}

// DetectionCycleRequest records a completed detection cycle.
type DetectionCycleRequest struct {
	WriteMeta
	Cycle *DetectionCycle `json:"cycle"`
}

// RetryRequest lifts the block of a job.
type RetryRequest struct {
	WriteMeta
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace"`
	JobID     string `json:"job_id"`
}

// EventAppendRequest appends events that go with no state change (a
// promote, an observation worth auditing).
type EventAppendRequest struct {
	WriteMeta
	Events []*Event `json:"events"`
}
