package client_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// newClient returns a client of s with a fixed actor.
func newClient(t *testing.T, s *nopstest.Server, actor string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Address: "http://" + s.HTTPAddr(), Actor: actor})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return c
}

var observedAt = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeReconciler answers the reconcilers' routes with fixed values: two
// jobs (web with a last deployment and a pause), one repository, one
// orphan and one detection cycle.
func fakeReconciler() *nopstest.FakeReconciler {
	jobs := []*structs.JobStatus{
		{Namespace: "default", JobID: "web", Sync: structs.SyncInSync, Policy: structs.PolicyAuto, ObservedAt: observedAt},
		{Namespace: "default", JobID: "api", Sync: structs.SyncDrift, DriftSummary: "count 2 -> 3", ObservedAt: observedAt},
	}
	reconciled := observedAt.Add(time.Second)
	return &nopstest.FakeReconciler{
		JobList: []*structs.JobSummary{
			{JobStatus: jobs[0], LastDeployment: &structs.DeploymentRef{ID: "d-last", State: structs.StateCompleted}, LastReconciled: &reconciled},
			{JobStatus: jobs[1], ActiveDeployment: &structs.DeploymentRef{ID: "d-now", State: structs.StateApplying}, LastReconciled: &reconciled},
		},
		Details: map[string]*structs.JobDetail{"default/web": {
			Status:         jobs[0],
			LastDeployment: &structs.Deployment{ID: "d-last", Namespace: "default", JobID: "web", State: structs.StateCompleted},
			Pause:          &structs.Pause{Key: "default/web", Namespace: "default", JobID: "web", Actor: "ann@ops", Reason: "db upgrade"},
		}},
		Blocks: map[string]*structs.Block{"prod/web": {Namespace: "prod", JobID: "web", DeploymentID: "d-failed"}},
		RepoList: []*structs.RepoStatus{{Name: "ops", URL: "https://git.example/ops.git", Branch: "main", Path: "jobs",
			Head: strings.Repeat("c", 40), Files: 4, LastFetch: observedAt}},
		OrphanList: []*structs.JobStatus{{Namespace: "default", JobID: "old", Orphan: true, ObservedAt: observedAt}},
		LastCycle:  &structs.DetectionCycle{Leader: "n1", StartedAt: observedAt, FinishedAt: observedAt.Add(time.Second), Jobs: 2, Drifted: 1},
		Health: &structs.NomadHealth{Deployment: true, ID: "nomad-d", Status: "running",
			Groups: []structs.NomadGroupHealth{{Name: "web", Desired: 2, Placed: 2, Healthy: 1}}},
	}
}
