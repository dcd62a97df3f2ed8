package agent_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// finishedDeployment writes a deployment created and finished at the
// given time through the leader's Raft.
func finishedDeployment(t testing.TB, leader *nopstest.Server, id, job string, to structs.DeploymentState, at time.Time) {
	t.Helper()
	meta := structs.WriteMeta{Time: at, Actor: "nops"}
	d := &structs.Deployment{ID: id, Namespace: "default", JobID: job, Repository: "ops", Commit: "0123456789abcdef",
		File: job + ".nomad.hcl", Policy: structs.PolicyAuto, State: structs.StateDetected, SpecHash: "spec-" + job,
		Spec: []byte(`{"ID":"` + job + `"}`), Diff: "+ job " + job, DiffHash: "diff-" + job}
	if _, err := leader.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta, Deployment: d}); err != nil {
		t.Fatalf("create deployment %s: %v", id, err)
	}
	if _, err := leader.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: meta, ID: id, To: to}); err != nil {
		t.Fatalf("deployment %s to %s: %v", id, to, err)
	}
}

func depIDs(t testing.TB, st *fsm.StateStore) []string {
	t.Helper()
	deps, _, err := st.Deployments(fsm.DeploymentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range deps {
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestCluster_GCThenSnapshot forces a retention pass through a follower of
// a 3-server cluster: every server removes the same records, and the
// state, saved as a snapshot and restored on a fresh 3-server cluster, is
// the same on every server there.
func TestCluster_GCThenSnapshot(t *testing.T) {
	retention := nopstest.WithConfig(func(c *config.Config) {
		c.Retention = config.RetentionConfig{SpecAfter: time.Hour, DeploymentsPerJob: 1, DeploymentAge: 24 * time.Hour,
			EventAge: 48 * time.Hour, Interval: 24 * time.Hour}
	})
	src := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), retention)
	leader := src.Leader()
	now := time.Now().UTC()
	finishedDeployment(t, leader, deploymentID(1), "web", structs.StateCompleted, now.Add(-72*time.Hour))
	finishedDeployment(t, leader, deploymentID(2), "web", structs.StateCompleted, now.Add(-71*time.Hour))
	finishedDeployment(t, leader, deploymentID(3), "api", structs.StateFailed, now.Add(-70*time.Hour))
	finishedDeployment(t, leader, deploymentID(4), "db", structs.StateCompleted, now.Add(-3*time.Hour))
	finishedDeployment(t, leader, deploymentID(5), "db", structs.StateCompleted, now.Add(-2*time.Hour))
	pendingDeployment(t, leader, deploymentID(6), "web")

	var res structs.GCResult
	call(t, src.Followers()[0], "POST", "/v1/operator/gc", nil).ok(t, "gc", &res)
	// web: 1 and 2 are old and behind the active 6; api: 3 is blocked;
	// db: 4 is younger than the deployment age, so 4 and 5 stay and only
	// lose their specs.
	want := structs.GCResult{DeploymentsDeleted: 2, SpecsDropped: 2, EventsDeleted: 6, Index: res.Index}
	if res != want {
		t.Fatalf("gc result = %+v, want %+v", res, want)
	}
	if ids := depIDs(t, leader.State()); !slices.Equal(ids, []string{deploymentID(3), deploymentID(4), deploymentID(5), deploymentID(6)}) {
		t.Fatalf("deployments after gc = %v", ids)
	}
	digest := stateDigest(t, leader.State())
	waitEverywhere(t, src, 10*time.Second, func(st *fsm.StateStore) error {
		if got := stateDigest(t, st); got != digest {
			return fmt.Errorf("state after gc differs:\n%s\nwant\n%s", got, digest)
		}
		return nil
	})
	// A second pass finds nothing left to remove.
	call(t, leader, "POST", "/v1/operator/gc", nil).ok(t, "second gc", &res)
	if res.DeploymentsDeleted+res.SpecsDropped+res.EventsDeleted != 0 {
		t.Fatalf("second gc removed %+v", res)
	}

	a := call(t, src.Followers()[1], "GET", "/v1/operator/snapshot", nil)
	a.ok(t, "snapshot save", nil)
	dst := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), retention)
	call(t, dst.Followers()[0], "PUT", "/v1/operator/snapshot", a.body).ok(t, "restore", nil)
	waitEverywhere(t, dst, 20*time.Second, func(st *fsm.StateStore) error {
		if got := stateDigest(t, st); got != digest {
			return fmt.Errorf("restored state differs:\n%s\nwant\n%s", got, digest)
		}
		return nil
	})
}

// TestGC_LeaderLoop checks that the leader runs retention on its own, at
// the configured interval, and counts what it removed in its metrics.
func TestGC_LeaderLoop(t *testing.T) {
	s := nopstest.Start(t, t.TempDir(), nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.Retention = config.RetentionConfig{SpecAfter: time.Minute, DeploymentsPerJob: 1, DeploymentAge: time.Hour,
			EventAge: time.Hour, Interval: time.Second}
	}))
	now := time.Now().UTC()
	finishedDeployment(t, s, deploymentID(1), "web", structs.StateCompleted, now.Add(-3*time.Hour))
	finishedDeployment(t, s, deploymentID(2), "web", structs.StateCompleted, now.Add(-2*time.Hour))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		ids := depIDs(t, s.State())
		if !slices.Equal(ids, []string{deploymentID(2)}) {
			return false, fmt.Errorf("deployments = %v", ids)
		}
		d, _ := s.State().Deployment(deploymentID(2))
		if d.Spec != nil {
			return false, fmt.Errorf("the spec of the newest deployment is still there")
		}
		return true, nil
	})
	a := call(t, s, "GET", "/metrics", nil)
	if a.code != http.StatusOK {
		t.Fatalf("metrics: %d %s", a.code, a.body)
	}
	for _, line := range []string{`nops_gc_removed_total{kind="deployment"} 1`, `nops_gc_removed_total{kind="spec"} 1`, `nops_gc_removed_total{kind="event"} 4`} {
		if !slices.Contains(strings.Split(string(a.body), "\n"), line) {
			t.Errorf("metrics lack %q", line)
		}
	}
}

// TestCluster_WebhookDeliverySurvivesFailover: a webhook delivery recorded
// through one leader is a duplicate for the next one, after the first is
// killed: the IDs are replicated, not kept by the server that saw them.
func TestCluster_WebhookDeliverySurvivesFailover(t *testing.T) {
	c, leader := startBareCluster(t)
	record := func(s *nopstest.Server) error {
		_, err := s.Apply(structs.WebhookDeliveryRequestType, &structs.WebhookDeliveryRequest{
			WriteMeta: structs.WriteMeta{Time: time.Now().UTC(), Actor: "webhook"}, Provider: "github", ID: "delivery-1"})
		return err
	}
	if err := record(leader); err != nil {
		t.Fatal(err)
	}
	c.Kill(c.Index(leader))
	next := c.WaitForLeader(30 * time.Second)
	if err := record(next); !errors.Is(err, structs.ErrDuplicate) {
		t.Fatalf("the delivery again through the new leader: %v; want ErrDuplicate", err)
	}
}
