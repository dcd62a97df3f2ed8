package notify_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// children returns the dispatched children of a parameterized job.
func children(t testing.TB, c *nomadapi.Client, parent string) []*nomadapi.Job {
	t.Helper()
	stubs, _, err := c.Jobs().PrefixList(parent + "/")
	if err != nil {
		t.Fatal(err)
	}
	var out []*nomadapi.Job
	for _, s := range stubs {
		if s.ParentID != parent {
			continue
		}
		j, _, err := c.Jobs().Info(s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	return out
}

// TestNomadDispatchTarget dispatches a real parameterized job for a
// notification, with the meta keys the job declares, once however often
// the delivery is attempted.
func TestNomadDispatchTarget(t *testing.T) {
	nomad := testutil.StartNomad(t)
	nomad.RegisterJobHCL(t, testutil.HookJobHCL("on-notify",
		testutil.WithHookMeta([]string{"nops_kind"}, []string{"nops_job", "nops_notification_id", "nops_idempotency_key"})))
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(),
		nopstest.WithConfig(func(c *config.Config) { c.NomadAddr = nomad.Addr }),
		withTarget(config.NotifyConfig{Name: "runner", Kind: config.NotifyKindNomad, NomadJob: "on-notify",
			Events: []string{structs.NotifyPaused}}))
	s.Do("POST", "/v1/job/default/web/pause", map[string]string{"reason": "maintenance"}, nil)
	var kids []*nomadapi.Job
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		kids = children(t, nomad.Client, "on-notify")
		return len(kids) == 1, fmt.Errorf("%d dispatched children", len(kids))
	})
	var n *structs.Notification
	for _, c := range notifications(t, s, "") {
		if c.Kind == structs.NotifyPaused {
			n = c
		}
	}
	k := kids[0]
	if k.Meta["nops_kind"] != structs.NotifyPaused || k.Meta["nops_job"] != "web" || k.Meta["nops_notification_id"] != n.ID {
		t.Errorf("child meta %v", k.Meta)
	}
	if _, ok := k.Meta["nops_title"]; ok {
		t.Error("a meta key the job does not declare was sent")
	}
	if k.DispatchIdempotencyToken == nil || *k.DispatchIdempotencyToken != n.IdempotencyKey("runner") {
		t.Errorf("idempotency token %v", k.DispatchIdempotencyToken)
	}

	// A repeated attempt with the same key, as after a failover, runs no
	// second child.
	d := &notify.NomadDispatch{Client: nomad.Client, Namespace: "default", JobID: "on-notify"}
	if err := d.Send(context.Background(), &notify.Message{Notification: n, Target: "runner", IdempotencyKey: n.IdempotencyKey("runner")}); err != nil {
		t.Fatal(err)
	}
	if kids := children(t, nomad.Client, "on-notify"); len(kids) != 1 {
		t.Errorf("%d children after a repeated dispatch", len(kids))
	}
	// A job that is not parameterized is an error naming it.
	nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("plain"))
	bad := &notify.NomadDispatch{Client: nomad.Client, Namespace: "default", JobID: "plain"}
	if err := bad.Send(context.Background(), &notify.Message{Notification: n, IdempotencyKey: "x"}); err == nil {
		t.Error("dispatch of a job that is not parameterized succeeded")
	}
}
