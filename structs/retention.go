package structs

import "time"

// GCRequest runs one pass of retention (garbage collection). The leader
// computes the cut-offs from its clock and the configured retention; the
// FSM decides what goes, the same way on every server. It never removes an
// active deployment, the newest deployment of a job, the deployment a block
// names, a block or a deploy-now request.
type GCRequest struct {
	WriteMeta
	// SpecBefore drops the stored job spec (and hook specs) of each
	// finished deployment that finished before it. Its diff, decisions,
	// hook runs and events stay. Zero keeps every spec.
	SpecBefore time.Time `json:"spec_before,omitzero"`
	// DeploymentsBefore and KeepPerJob delete a finished deployment that
	// finished before DeploymentsBefore and is not among the KeepPerJob
	// newest of its job. Zero keeps every deployment; KeepPerJob is at
	// least 1.
	DeploymentsBefore time.Time `json:"deployments_before,omitzero"`
	KeepPerJob        int       `json:"keep_per_job"`
	// EventsBefore deletes the audit events older than it, oldest first,
	// up to the first event at or after it. Zero keeps every event.
	EventsBefore time.Time `json:"events_before,omitzero"`
	// WebhookDeliveriesBefore deletes the webhook deliveries recorded
	// before it (at most MaxWebhookDeliveries are kept anyway). Zero keeps
	// them.
	WebhookDeliveriesBefore time.Time `json:"webhook_deliveries_before,omitzero"`
	// MaxDeployments bounds the deployments one entry changes or deletes,
	// MaxScan the deployments it reads (it reads whole jobs, from the job
	// FromJob, a namespace/job key, on), and MaxEvents the events it
	// deletes, so that no entry holds the log for long; the leader goes on
	// with the next entry, from the result's NextJob, while a result says
	// More.
	FromJob        string `json:"from_job,omitempty"`
	MaxDeployments int    `json:"max_deployments"`
	MaxScan        int    `json:"max_scan"`
	MaxEvents      int    `json:"max_events"`
}

// GCResult is what one retention pass removed.
type GCResult struct {
	SpecsDropped       int `json:"specs_dropped"`
	DeploymentsDeleted int `json:"deployments_deleted"`
	EventsDeleted      int `json:"events_deleted"`
	// WebhookDeliveriesDeleted counts the webhook deliveries forgotten.
	WebhookDeliveriesDeleted int `json:"webhook_deliveries_deleted"`
	// More is set when a bound stopped the pass before it was done;
	// NextJob is then where the next entry starts reading deployments
	// (empty when the deployments are done).
	More    bool   `json:"more"`
	NextJob string `json:"next_job,omitempty"`
	// Index is the Raft index of the pass.
	Index uint64 `json:"index"`
}

// Add sums two results.
func (r GCResult) Add(o GCResult) GCResult {
	return GCResult{
		SpecsDropped:             r.SpecsDropped + o.SpecsDropped,
		DeploymentsDeleted:       r.DeploymentsDeleted + o.DeploymentsDeleted,
		EventsDeleted:            r.EventsDeleted + o.EventsDeleted,
		WebhookDeliveriesDeleted: r.WebhookDeliveriesDeleted + o.WebhookDeliveriesDeleted,
		More:                     o.More,
		NextJob:                  o.NextJob,
		Index:                    max(r.Index, o.Index),
	}
}
