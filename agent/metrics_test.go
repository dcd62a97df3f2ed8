package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// pendingSince creates a deployment that entered pending_approval at
// since, as the reconcilers would have recorded it then.
func pendingSince(t *testing.T, s *nopstest.Server, jobID string, since time.Time) string {
	t.Helper()
	meta := structs.WriteMeta{Time: since.UTC(), Actor: "nops"}
	d := &structs.Deployment{
		ID: uuid.NewString(), Namespace: "default", JobID: jobID, Repository: "ops", Commit: strings.Repeat("cd", 20),
		File: "jobs/" + jobID + ".nomad.hcl", Policy: structs.PolicyApproval, State: structs.StateDetected, SpecHash: "spec-" + jobID,
	}
	if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta, Deployment: d}); err != nil {
		t.Fatalf("create deployment of %s: %v", jobID, err)
	}
	if _, err := s.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: meta, ID: d.ID, From: structs.StateDetected, To: structs.StatePendingApproval, Message: "waits for approval",
	}); err != nil {
		t.Fatalf("move deployment of %s to pending_approval: %v", jobID, err)
	}
	return d.ID
}

// TestMetrics_ApprovalAge: the age of the oldest deployment waiting for
// approval is read from the replicated state at each scrape: 0 while none
// waits, the oldest one's wait when several do, and the next one's once the
// oldest is decided.
func TestMetrics_ApprovalAge(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	age := func() float64 { return counter(t, s, "nops_approvals_oldest_pending_age_seconds") }
	if a := age(); a != 0 {
		t.Fatalf("age with no deployment waiting: %v, want 0", a)
	}

	const waited = 5 * time.Hour
	old := pendingSince(t, s, "old", time.Now().Add(-waited))
	pendingSince(t, s, "young", time.Now().Add(-time.Minute))
	// The scrape comes after the writes: the oldest has waited at least
	// 5 hours, and not much more on any machine.
	if a := age(); a < waited.Seconds() || a > (waited+5*time.Minute).Seconds() {
		t.Fatalf("age with a deployment waiting 5 hours: %v s", a)
	}

	if code, body := s.Do(http.MethodPost, "/v1/deployment/"+old+"/reject", map[string]string{"reason": "not now"}, nil); code != http.StatusOK {
		t.Fatalf("reject: %d %s", code, body)
	}
	if a := age(); a < time.Minute.Seconds() || a > (time.Minute+5*time.Minute).Seconds() {
		t.Fatalf("age once the oldest is rejected: %v s, want the younger one's (about 60 s)", a)
	}
}

// TestMetrics_LeadershipAndCommitTime: a server counts the leaderships it
// won and times the entries it commits as leader.
func TestMetrics_LeadershipAndCommitTime(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	// The leadership counter is bumped by the goroutine that follows Raft's
	// notifications, which may run just after the server is seen leading.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		n := counter(t, s, "nops_raft_leadership_acquired_total")
		return n == 1, fmt.Errorf("%v leaderships acquired, want 1", n)
	})

	before := histogramCount(t, s, "nops_raft_commit_duration_seconds")
	const writes = 3
	for i := range writes {
		s.CreatePending("default", fmt.Sprintf("job-%d", i))
	}
	// CreatePending writes twice (create, then pending_approval), each
	// write waited for: each is an entry of its own.
	if got := histogramCount(t, s, "nops_raft_commit_duration_seconds") - before; got < 2*writes {
		t.Fatalf("%d commits timed for %d writes, want at least %d", got, 2*writes, 2*writes)
	}

	// Autopilot's health of the one server, under its ID and name.
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		v, err := testutil.MetricValue(s.Metrics(), "nops_autopilot_server_healthy", "id", s.NodeID(), "server", s.Config().NodeName)
		return err == nil && v == 1, fmt.Errorf("autopilot health of %s: %v (%v)", s.NodeID(), v, err)
	})
}

// histogramCount returns the number of observations of the histogram name
// in the server's metrics.
func histogramCount(t *testing.T, s *nopstest.Server, name string) uint64 {
	t.Helper()
	families, err := s.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 && f.GetMetric()[0].GetHistogram() != nil {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no histogram %s in the server's metrics", name)
	return 0
}
