package client

// DeploymentFilter selects deployments; empty fields match all.
type DeploymentFilter struct {
	Namespace string
	JobID     string
	State     string
}
