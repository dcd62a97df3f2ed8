package client

// DeploymentFilter selects deployments; empty fields match all.
type DeploymentFilter struct {
	// Cluster is a Nomad cluster's name.
	Cluster   string
	Namespace string
	JobID     string
	State     string
}
