package structs

// Kick names what a write changed, so that the leader's loops wake for it
// alone. A zero Kick wakes nothing.
type Kick struct {
	// Deployment is the ID of a deployment whose decision (approve,
	// reject) was recorded: the apply loop wakes it alone, and detection
	// does not run for it.
	Deployment string `json:"deployment,omitempty"`
	// Namespace and JobID name a job whose holds changed (pause, resume,
	// deploy now): detection runs, and the apply loop wakes the job's
	// active deployment alone.
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	JobID     string `json:"job_id,omitempty"`
	// All says something that can move any job changed (a global pause, a
	// sync window, a restored snapshot): both loops run whole.
	All bool `json:"all,omitempty"`
}
