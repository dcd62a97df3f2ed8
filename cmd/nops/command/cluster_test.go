package command

import (
	"strings"
	"testing"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestCLI_Clusters: with two Nomad clusters (SPEC section 16), nops
// cluster list shows each; -cluster names the job's cluster on the job
// commands and pauses one whole cluster with nops pause; the lists show a
// Cluster column; an unknown cluster fails naming the clusters and
// changes nothing. A server of one cluster shows no Cluster column.
func TestCLI_Clusters(t *testing.T) {
	fake := fakeReconciler()
	fake.ClusterList = []*structs.ClusterStatus{
		{Name: "eu", Address: "http://eu.example:4646", Reachable: true, NomadVersion: "1.9.3", EventStream: true,
			LastContact: observedAt, Jobs: 2, Drifted: 1, Active: 1},
		{Name: "us", Address: "http://us.example:4646", Error: "connection refused"},
	}
	us := &structs.JobStatus{Cluster: "us", Namespace: "default", JobID: "web", Sync: structs.SyncDrift, ObservedAt: observedAt}
	fake.Details = map[string]*structs.JobDetail{"us:default/web": {Status: us}}
	fake.Blocks = map[string]*structs.Block{"eu:default/web": {Cluster: "eu", Namespace: "default", JobID: "web", DeploymentID: "d-1", Retried: true}}
	fake.OrphanList = []*structs.JobStatus{{Cluster: "us", Namespace: "default", JobID: "legacy", Orphan: true, ObservedAt: observedAt}}
	s := nopstest.StartDev(t, nopstest.WithReconciler(fake), nopstest.WithConfig(func(c *config.Config) {
		c.Nomads = []config.NomadCluster{
			{Name: "eu", Address: "http://" + testutil.ClosedAddress(t)},
			{Name: "us", Address: "http://" + testutil.ClosedAddress(t)},
		}
	}))
	c := newCLI(t, s)

	out := c.ok("cluster", "list")
	mustContain(t, "cluster list", out, "Name", "Address", "Reachable", "Version", "Stream", "Last contact",
		"eu", "http://eu.example:4646", "yes", "1.9.3", "up", "us", "no: connection refused", "down")
	var clusters []*structs.ClusterStatus
	c.okJSON(&clusters, "cluster", "list")
	if len(clusters) != 2 || clusters[0].Name != "eu" || clusters[0].Jobs != 2 || clusters[1].Error != "connection refused" {
		t.Errorf("cluster list -json: %+v", clusters)
	}

	mustContain(t, "job status", c.ok("job", "status", "web", "-cluster", "us"), "us:default/web", "drift")
	// web named by no cluster: this fake places it in none of the
	// configured clusters.
	mustContain(t, "job status without -cluster", c.fails(1, "job", "pause", "web", "-reason", "x"), "400", "?cluster=")
	mustContain(t, "job pause", c.ok("job", "pause", "web", "-cluster", "us", "-reason", "db upgrade"), "Job us:default/web paused")
	mustContain(t, "job retry", c.ok("job", "retry", "web", "-cluster", "eu"), "Job eu:default/web: block lifted")
	mustContain(t, "unknown cluster", c.fails(1, "job", "pause", "web", "-cluster", "mars", "-reason", "x"), "400", "mars", "eu, us")
	mustContain(t, "pause of an unknown cluster", c.fails(1, "pause", "-cluster", "mars", "-reason", "x"), "mars", "eu, us")

	out = c.ok("pause", "-cluster", "eu", "-reason", "eu maintenance")
	mustContain(t, "pause -cluster", out, "Every job of cluster eu is paused", "eu:* (every job of the cluster)", "eu maintenance",
		"us:default/web", "db upgrade")
	pauses, err := s.State().Pauses()
	if err != nil || len(pauses) != 2 {
		t.Fatalf("pauses %+v, %v; want eu's and us's web's", pauses, err)
	}
	for _, p := range pauses {
		if p.Global {
			t.Errorf("nops pause -cluster eu paused every job: %+v", p)
		}
	}
	out = c.ok("resume", "-cluster", "eu", "-reason", "done")
	mustContain(t, "resume -cluster", out, "Every job of cluster eu is resumed", "us:default/web")
	if strings.Contains(out, "eu:*") {
		t.Errorf("eu's pause left after resume -cluster eu:\n%s", out)
	}

	eu := s.CreatePendingWith("default", "web", func(d *structs.Deployment) { d.Cluster = "eu" })
	usDep := s.CreatePendingWith("default", "web", func(d *structs.Deployment) { d.Cluster = "us" })
	out = c.ok("deployment", "list")
	mustContain(t, "deployment list", out, "Cluster", "eu", "us", structs.ShortID(eu.ID), structs.ShortID(usDep.ID))
	out = c.ok("deployment", "list", "-cluster", "us")
	if !strings.Contains(out, structs.ShortID(usDep.ID)) || strings.Contains(out, structs.ShortID(eu.ID)) {
		t.Errorf("deployment list -cluster us:\n%s", out)
	}
	mustContain(t, "orphans", c.ok("orphans"), "Cluster", "us", "legacy")
	mustContain(t, "job status -h", c.ok("job", "status", "-h"), "-cluster=<name>")

	var want []string
	for _, call := range fake.Calls() {
		if strings.HasPrefix(call, "Retry") || strings.HasPrefix(call, "Job ") {
			want = append(want, call)
		}
	}
	if len(want) != 2 || want[0] != "Job us:default/web" || !strings.HasPrefix(want[1], "Retry eu:default/web by ") {
		t.Errorf("calls of the job routes %q: want us's web read and eu's web retried, the refused ones not", want)
	}

	single := nopstest.StartDev(t)
	single.CreatePending("default", "web")
	if out := newCLI(t, single).ok("deployment", "list"); strings.Contains(out, "Cluster") {
		t.Errorf("a server of one cluster shows a Cluster column:\n%s", out)
	}
}

// TestCLI_DeploymentSkipRequirements: nops deployment skip-requirements
// lets a deployment waiting in detected skip its cluster's promotion
// order, recording the reason and the actor; without -reason it fails
// before asking the server, and a second skip is the server's 409.
func TestCLI_DeploymentSkipRequirements(t *testing.T) {
	s := nopstest.StartDev(t)
	detected := &structs.Deployment{ID: "6a1c30d2-9f0e-4c57-8d1b-2f6f0a7e5b11", Cluster: "prod", Namespace: "default", JobID: "web",
		Repository: "ops", Commit: strings.Repeat("ab", 20), File: "jobs/web.nomad.hcl", Policy: structs.PolicyAuto,
		State: structs.StateDetected, SpecHash: "spec-web"}
	if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
		WriteMeta: structs.WriteMeta{Time: observedAt, Actor: "nops"}, Deployment: detected}); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, s)

	mustContain(t, "without -reason", c.fails(1, "deployment", "skip-requirements", detected.ID), "-reason is required")
	if d, _ := s.State().Deployment(detected.ID); d.SkipRequirements {
		t.Fatal("a refused skip changed the deployment")
	}
	mustContain(t, "skip-requirements", c.ok("deployment", "skip-requirements", "-reason", "staging is down", detected.ID),
		"Deployment 6a1c30d2 of prod:default/web skips the promotion order of cluster prod: now detected")
	d, _ := s.State().Deployment(detected.ID)
	if !d.SkipRequirements || d.SkipRequirementsBy == "" {
		t.Fatalf("deployment after the skip: %+v", d)
	}
	evs := s.Events(detected.ID)
	if last := evs[len(evs)-1]; !strings.HasSuffix(last.Message, ": staging is down") || last.Actor != d.SkipRequirementsBy {
		t.Fatalf("audit event: %+v", last)
	}
	mustContain(t, "second skip", c.fails(1, "deployment", "skip-requirements", "-reason", "again", detected.ID), "409", "already skips")
	mustContain(t, "help", c.ok("deployment", "skip-requirements", "-h"), "promotion order", "-reason")
}
