package structs

import "time"

// Webhook deliveries: the push webhooks the cluster has handled, by the
// delivery ID their provider gives each (SPEC §19), so that a replayed
// delivery changes nothing.
const (
	// WebhookDeliveryRetention is how long a delivery ID is remembered: a
	// replay after it is handled again. Providers retry a failed delivery
	// within minutes; an hour covers a replay of a captured request for as
	// long as it could matter, and retention forgets the IDs after it.
	WebhookDeliveryRetention = 60 * time.Minute
	// MaxWebhookDeliveries bounds the deliveries remembered: past it, the
	// oldest is forgotten for the newest.
	MaxWebhookDeliveries = 10000
	// MaxWebhookDeliveryID bounds a delivery ID: providers send a UUID.
	MaxWebhookDeliveryID = 128
)

// WebhookDelivery is a delivery the cluster handled.
type WebhookDelivery struct {
	Provider string
	ID       string
	// Time is the leader's time when the delivery was recorded.
	Time time.Time
}

// WebhookDeliveryRequest records a delivery that passed its signature
// check. A delivery already recorded is refused with ErrDuplicate.
type WebhookDeliveryRequest struct {
	WriteMeta
	Provider string `json:"provider"`
	ID       string `json:"id"`
}
