package fsm

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

// delivery records a delivery and reports whether it was a duplicate.
func (h *harness) delivery(provider, id string) bool {
	h.t.Helper()
	err := h.apply(structs.WebhookDeliveryRequestType, &structs.WebhookDeliveryRequest{WriteMeta: h.meta("webhook"), Provider: provider, ID: id})
	if err != nil && !errors.Is(err, structs.ErrDuplicate) {
		h.t.Fatalf("webhook delivery %s/%s: %v", provider, id, err)
	}
	return err != nil
}

// TestWebhookDeliveries: a delivery is recorded once with the leader's
// time; the same ID again is a duplicate that changes nothing; another
// provider's same ID is not; bad input is refused; retention forgets the
// deliveries before its cut-off; the table keeps at most
// MaxWebhookDeliveries, forgetting the oldest.
func TestWebhookDeliveries(t *testing.T) {
	h := newHarness(t)
	if h.delivery("github", "d-1") {
		t.Fatal("a first delivery is a duplicate")
	}
	d, _ := h.state().WebhookDelivery("github", "d-1")
	if d == nil || !d.Time.Equal(h.now) {
		t.Fatalf("recorded %+v, want the leader's time %v", d, h.now)
	}
	if !h.delivery("github", "d-1") {
		t.Fatal("a replay is not a duplicate")
	}
	if h.delivery("gitlab", "d-1") {
		t.Fatal("another provider's delivery of the same ID is a duplicate")
	}
	for _, bad := range []structs.WebhookDeliveryRequest{
		{Provider: "bitbucket-ish", ID: "x"}, {Provider: "github"}, {Provider: "github", ID: string(make([]byte, structs.MaxWebhookDeliveryID+1))},
	} {
		bad.WriteMeta = h.meta("webhook")
		h.refused(structs.ErrInvalid, []string{"webhook delivery"}, func() error { return h.apply(structs.WebhookDeliveryRequestType, &bad) })
	}

	h.now = h.now.Add(time.Hour)
	h.delivery("github", "d-2")
	res := h.gc(structs.GCRequest{KeepPerJob: 1, MaxDeployments: 10, MaxScan: 10, MaxEvents: 10,
		WebhookDeliveriesBefore: h.now.Add(-time.Minute)})
	if res.WebhookDeliveriesDeleted != 2 {
		t.Fatalf("retention forgot %d deliveries, want 2", res.WebhookDeliveriesDeleted)
	}
	if all, _ := h.state().WebhookDeliveries(); len(all) != 1 || all[0].ID != "d-2" {
		t.Fatalf("after retention: %+v", all)
	}
	if h.delivery("github", "d-1") {
		t.Fatal("a delivery forgotten by retention is still a duplicate")
	}

	for i := range structs.MaxWebhookDeliveries {
		h.now = h.now.Add(time.Millisecond)
		h.delivery("generic", fmt.Sprintf("g-%05d", i))
	}
	if all, _ := h.state().WebhookDeliveries(); len(all) != structs.MaxWebhookDeliveries {
		t.Fatalf("%d deliveries kept, want %d", len(all), structs.MaxWebhookDeliveries)
	}
	if d, _ := h.state().WebhookDelivery("github", "d-2"); d != nil {
		t.Fatal("the oldest delivery was kept past the bound")
	}
}
