package client_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// twoClusters configures the Nomad clusters eu and us (SPEC section 16);
// no Nomad answers at their addresses, and none is asked: the reconcilers'
// routes are a FakeReconciler's.
func twoClusters(t *testing.T) nopstest.Option {
	return nopstest.WithConfig(func(c *config.Config) {
		c.Nomads = []config.NomadCluster{
			{Name: "eu", Address: "http://" + testutil.ClosedAddress(t)},
			{Name: "us", Address: "http://" + testutil.ClosedAddress(t)},
		}
	})
}

// TestClient_Clusters: Clusters().List answers GET /v1/clusters whole;
// Jobs().InCluster names the cluster on every request: the filter of the
// lists, the job's cluster on the job routes and the whole cluster on
// PauseAll and ResumeAll; an unknown cluster is a 400 that changes
// nothing, and so is a job in no configured cluster named by no cluster.
func TestClient_Clusters(t *testing.T) {
	fake := fakeReconciler()
	fake.ClusterList = []*structs.ClusterStatus{
		{Name: "eu", Address: "http://eu.example:4646", Reachable: true, NomadVersion: "1.9.3", EventStream: true, Jobs: 1},
		{Name: "us", Address: "http://us.example:4646", Error: "connection refused"},
	}
	eu := &structs.JobStatus{Cluster: "eu", Namespace: "default", JobID: "web", Sync: structs.SyncInSync}
	us := &structs.JobStatus{Cluster: "us", Namespace: "default", JobID: "web", Sync: structs.SyncDrift}
	fake.JobList = []*structs.JobSummary{{JobStatus: eu}, {JobStatus: us}}
	fake.Details = map[string]*structs.JobDetail{"us:default/web": {Status: us}}
	s := nopstest.StartDev(t, twoClusters(t), nopstest.WithReconciler(fake))
	c := newClient(t, s, "ops@ci")
	ctx := context.Background()

	list, _, err := c.Clusters().List(ctx, nil)
	if err != nil || !reflect.DeepEqual(list, fake.ClusterList) {
		t.Fatalf("clusters %s, %v; want %s", dump(list), err, dump(fake.ClusterList))
	}
	jobs, _, err := c.Jobs().InCluster("us").List(ctx, nil)
	if err != nil || len(jobs) != 1 || jobs[0].Cluster != "us" {
		t.Fatalf("jobs of us: %s, %v", dump(jobs), err)
	}
	if jobs, _, err = c.Jobs().List(ctx, &client.QueryOptions{Cluster: "eu"}); err != nil || len(jobs) != 1 || jobs[0].Cluster != "eu" {
		t.Fatalf("jobs of eu by QueryOptions: %s, %v", dump(jobs), err)
	}
	job, _, err := c.Jobs().InCluster("us").Info(ctx, "default", "web", nil)
	if err != nil || job.Status.Cluster != "us" || job.Status.Sync != structs.SyncDrift {
		t.Fatalf("job web of us: %+v, %v", job, err)
	}

	pauses, err := c.Jobs().InCluster("us").Pause(ctx, "default", "web", "db upgrade")
	if err != nil || len(pauses) != 1 || pauses[0].Key != structs.JobKey("us", "default", "web") || pauses[0].Cluster != "us" {
		t.Fatalf("pause of us's web: %s, %v", dump(pauses), err)
	}
	pauses, err = c.Jobs().InCluster("eu").PauseAll(ctx, "eu maintenance")
	if err != nil || len(pauses) != 2 {
		t.Fatalf("pause of eu: %s, %v", dump(pauses), err)
	}
	var whole *structs.Pause
	for _, p := range pauses {
		if p.Key == structs.ClusterPauseKey("eu") {
			whole = p
		}
	}
	if whole == nil || whole.Global || whole.Cluster != "eu" || whole.JobID != "" {
		t.Fatalf("pauses %s: want the pause of every job of eu, not a global one", dump(pauses))
	}

	// An unknown cluster, on a job's route, on the whole-cluster pause and
	// on a list, is a 400 naming the clusters, and changes nothing.
	refused := map[string]error{}
	_, refused["job pause"] = c.Jobs().InCluster("mars").Pause(ctx, "default", "web", "x")
	_, refused["pause all"] = c.Jobs().InCluster("mars").PauseAll(ctx, "x")
	_, refused["retry"] = c.Jobs().InCluster("mars").Retry(ctx, "default", "web")
	_, _, refused["deployments"] = c.Deployments().List(ctx, client.DeploymentFilter{Cluster: "mars"}, nil)
	_, _, refused["events"] = c.Events().List(ctx, "", "", 0, &client.QueryOptions{Cluster: "mars"})
	for what, err := range refused {
		if client.StatusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), `"mars"`) ||
			!strings.Contains(err.Error(), "eu, us") {
			t.Errorf("%s in cluster mars: %v; want a 400 naming the clusters", what, err)
		}
	}
	// Named by no cluster, a job the reconciler places in no configured
	// cluster is refused too.
	if _, err := c.Jobs().Pause(ctx, "default", "api", "x"); client.StatusCode(err) != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "?cluster=") {
		t.Errorf("pause of a job of no cluster: %v; want a 400 asking for ?cluster=", err)
	}
	after, _, err := c.Jobs().Pauses(ctx, nil)
	if err != nil || len(after) != 2 {
		t.Fatalf("pauses after the refusals: %s, %v; want the two of before", dump(after), err)
	}

	if pauses, err = c.Jobs().InCluster("eu").ResumeAll(ctx, "done"); err != nil || len(pauses) != 1 || pauses[0].Cluster != "us" {
		t.Fatalf("resume of eu: %s, %v; want us's web's pause alone", dump(pauses), err)
	}
	for _, call := range fake.Calls() {
		if strings.HasPrefix(call, "Retry") {
			t.Errorf("a refused retry reached the reconciler: %s", call)
		}
	}
}
