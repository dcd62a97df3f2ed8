package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	nomadapi "github.com/hashicorp/nomad/api"
)

// NomadDispatch dispatches a parameterized Nomad job for each
// notification, with the notification in its meta (the keys the job
// declares in meta_required or meta_optional) and, unless the job forbids
// a payload, the webhook JSON as its payload. The dispatch carries the
// idempotency key as its idempotency token, so Nomad runs one child per
// notification however often it is attempted.
type NomadDispatch struct {
	Client    *nomadapi.Client
	Namespace string
	JobID     string
}

var _ Sender = (*NomadDispatch)(nil)

// DispatchMeta returns every meta key a dispatch may carry, with its value.
func DispatchMeta(m *Message) map[string]string {
	n := m.Notification
	meta := map[string]string{
		"nops_notification_id": n.ID,
		"nops_idempotency_key": m.IdempotencyKey,
		"nops_kind":            n.Kind,
		"nops_title":           Title(n),
		"nops_object":          n.Object,
		"nops_namespace":       n.Namespace,
		"nops_job":             n.JobID,
		"nops_actor":           n.Actor,
		"nops_link":            m.Link,
	}
	if d := n.Deployment; d != nil {
		meta["nops_deployment"] = d.ID
		meta["nops_commit"] = d.Commit
	}
	return meta
}

// Send dispatches the job once for the message.
func (d *NomadDispatch) Send(ctx context.Context, m *Message) error {
	q := (&nomadapi.QueryOptions{Namespace: d.Namespace}).WithContext(ctx)
	job, _, err := d.Client.Jobs().Info(d.JobID, q)
	if err != nil {
		return fmt.Errorf("read nomad job %q in namespace %q: %w", d.JobID, d.Namespace, err)
	}
	p := job.ParameterizedJob
	if p == nil {
		return fmt.Errorf("nomad job %q is not parameterized", d.JobID)
	}
	all := DispatchMeta(m)
	meta := map[string]string{}
	for k, v := range all {
		if slices.Contains(p.MetaRequired, k) || slices.Contains(p.MetaOptional, k) {
			meta[k] = v
		}
	}
	for _, k := range p.MetaRequired {
		if _, ok := all[k]; !ok {
			return fmt.Errorf("nomad job %q requires meta %q, which a notification does not have", d.JobID, k)
		}
	}
	var payload []byte
	if p.Payload != "forbidden" {
		if payload, err = json.Marshal(Payload(m)); err != nil {
			return fmt.Errorf("encode dispatch payload: %w", err)
		}
	}
	w := (&nomadapi.WriteOptions{Namespace: d.Namespace, IdempotencyToken: m.IdempotencyKey}).WithContext(ctx)
	if _, _, err := d.Client.Jobs().Dispatch(d.JobID, meta, payload, "", w); err != nil {
		return fmt.Errorf("dispatch nomad job %q: %w", d.JobID, err)
	}
	return nil
}
