package fsm

import (
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
)

// Webhook deliveries: the push webhooks handled, by provider and delivery
// ID, with the leader's time of each. A delivery already recorded is
// refused with structs.ErrDuplicate and changes nothing; retention forgets the
// deliveries older than the cut-off the leader proposes, and the table
// never holds more than structs.MaxWebhookDeliveries (the oldest goes).

// TableWebhookDeliveries holds the webhook deliveries handled.
const TableWebhookDeliveries = "webhook_deliveries"

func webhookDeliveriesTable() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableWebhookDeliveries, Indexes: map[string]*memdb.IndexSchema{
		"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
			&memdb.StringFieldIndex{Field: "Provider"},
			&memdb.StringFieldIndex{Field: "ID"},
		}}},
	}}
}

// webhookProvider reports a provider whose delivery IDs are recorded.
func webhookProvider(p string) bool {
	switch p {
	case "github", "gitlab", "gitea", "generic":
		return true
	}
	return false
}

func validWebhookDelivery(d *structs.WebhookDelivery) error {
	if !webhookProvider(d.Provider) {
		return invalid("webhook delivery: unknown provider %q", d.Provider)
	}
	if d.ID == "" || len(d.ID) > structs.MaxWebhookDeliveryID {
		return invalid("webhook delivery: an ID of 1 to %d characters is required, not %d", structs.MaxWebhookDeliveryID, len(d.ID))
	}
	if d.Time.IsZero() {
		return invalid("webhook delivery %s/%s has no time", d.Provider, d.ID)
	}
	return nil
}

// webhookWriter records the webhook deliveries handled, and forgets them,
// through the entry's writer.
type webhookWriter struct{ *writer }

func (w webhookWriter) webhookDelivery(req *structs.WebhookDeliveryRequest) error {
	d := &structs.WebhookDelivery{Provider: req.Provider, ID: req.ID, Time: req.Time}
	if err := validWebhookDelivery(d); err != nil {
		return err
	}
	raw, err := w.first(TableWebhookDeliveries, d.Provider, d.ID)
	if err != nil {
		return fmt.Errorf("webhook delivery lookup: %w", err)
	}
	if raw != nil {
		return fmt.Errorf("%w: webhook delivery %s/%s was handled at %s", structs.ErrDuplicate,
			d.Provider, d.ID, raw.(*structs.WebhookDelivery).Time.Format(time.RFC3339))
	}
	if err := w.forgetOldestDelivery(); err != nil {
		return err
	}
	return w.put(TableWebhookDeliveries, d)
}

// forgetOldestDelivery makes room for one delivery when the table is full.
func (w webhookWriter) forgetOldestDelivery() error {
	all, err := w.deliveries()
	if err != nil || len(all) < structs.MaxWebhookDeliveries {
		return err
	}
	oldest := all[0]
	for _, d := range all[1:] {
		if d.Time.Before(oldest.Time) {
			oldest = d
		}
	}
	return w.delete(TableWebhookDeliveries, oldest)
}

func (w webhookWriter) deliveries() ([]*structs.WebhookDelivery, error) {
	it, err := w.txn.Get(TableWebhookDeliveries, "id")
	if err != nil {
		return nil, fmt.Errorf("list webhook deliveries: %w", err)
	}
	var out []*structs.WebhookDelivery
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*structs.WebhookDelivery))
	}
	return out, nil
}

// gcWebhookDeliveries forgets the deliveries recorded before the cut-off.
func (w webhookWriter) gcWebhookDeliveries(before time.Time, res *structs.GCResult) error {
	if before.IsZero() {
		return nil
	}
	all, err := w.deliveries()
	if err != nil {
		return err
	}
	for _, d := range all {
		if d.Time.Before(before) {
			if err := w.delete(TableWebhookDeliveries, d); err != nil {
				return fmt.Errorf("forget webhook delivery: %w", err)
			}
			res.WebhookDeliveriesDeleted++
		}
	}
	return nil
}

// WebhookDelivery returns the delivery of provider with id, or nil.
func (s *StateStore) WebhookDelivery(provider, id string) (*structs.WebhookDelivery, error) {
	return first[structs.WebhookDelivery](s.db.Txn(false), TableWebhookDeliveries, provider, id)
}

// WebhookDeliveries returns every delivery remembered.
func (s *StateStore) WebhookDeliveries() ([]*structs.WebhookDelivery, error) {
	return list[structs.WebhookDelivery](s.db.Txn(false), TableWebhookDeliveries)
}
