package reconcile_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// twoClusters is a Nops server deploying to two real Nomad dev agents of
// different regions, not federated (SPEC section 16): cluster eu from the
// repository folder eu, cluster us from the folder us of the same git
// repository.
type twoClusters struct {
	t        *testing.T
	s        *nopstest.Server
	eu, us   *testutil.NomadAgent
	repo     *testutil.GitRepo
	euDir    string
	usDir    string
	clusters map[string]*testutil.NomadAgent
	// token, when set, is the secret the helpers' requests carry (a
	// server with ACLs on).
	token string
}

func startTwoClusters(t *testing.T, files map[string]string, opts ...nopstest.Option) *twoClusters {
	t.Helper()
	e := &twoClusters{t: t, euDir: "eu", usDir: "us"}
	e.eu = testutil.StartNomad(t, testutil.WithNomadConfig(`region = "eu"`))
	e.us = testutil.StartNomad(t, testutil.WithNomadConfig(`region = "us"`))
	e.clusters = map[string]*testutil.NomadAgent{"eu": e.eu, "us": e.us}
	e.repo = testutil.NewGitRepo(t)
	commitFiles(e.repo, "initial jobs", files)
	url := e.repo.URL()
	e.s = nopstest.Start(t, "", append([]nopstest.Option{nopstest.WithConfig(func(c *config.Config) {
		c.Nomads = []config.NomadCluster{
			{Name: "eu", Address: e.eu.Addr, Region: "eu"},
			{Name: "us", Address: e.us.Addr, Region: "us"},
		}
		c.Repositories = append(c.Repositories,
			config.Repository{Name: "eu-jobs", URL: url, Branch: "main", Path: e.euDir, Cluster: "eu", PollInterval: repoPollInterval},
			config.Repository{Name: "us-jobs", URL: url, Branch: "main", Path: e.usDir, Cluster: "us", PollInterval: repoPollInterval})
	})}, opts...)...)
	return e
}

// repoPollInterval is the poll interval of the test repositories: a commit
// is seen at once.
const repoPollInterval = nopstest.RepoPollInterval

// deployments lists the deployments of a job of a cluster, newest first.
func (e *twoClusters) deployments(cluster, jobID string) []*structs.Deployment {
	e.t.Helper()
	var out []*structs.Deployment
	path := fmt.Sprintf("/v1/deployments?cluster=%s&namespace=default&job=%s", cluster, jobID)
	if e.token == "" {
		if code, body := e.s.Do("GET", path, nil, &out); code != http.StatusOK {
			e.t.Fatalf("list deployments of %s: %d %s", cluster, code, body)
		}
		return out
	}
	code, body := tokenCall(e.t, e.s, e.token, "GET", path, nil)
	if code != http.StatusOK {
		e.t.Fatalf("list deployments of %s: %d %s", cluster, code, body)
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		e.t.Fatalf("list deployments of %s: %v: %s", cluster, err, body)
	}
	return out
}

// waitDeployment waits until the newest deployment of a job of a cluster
// is in state.
func (e *twoClusters) waitDeployment(cluster, jobID string, state structs.DeploymentState) *structs.Deployment {
	e.t.Helper()
	var found *structs.Deployment
	testutil.WaitForResult(e.t, lcWait, func() (bool, error) {
		list := e.deployments(cluster, jobID)
		if len(list) == 0 {
			return false, fmt.Errorf("job %s of cluster %s has no deployment", jobID, cluster)
		}
		found = list[0]
		if found.State != state {
			return false, fmt.Errorf("newest deployment of %s in %s is %s (%s), want %s", jobID, cluster, found.State, found.Error, state)
		}
		return true, nil
	})
	return found
}

// clusterStatuses reads GET /v1/clusters.
func (e *twoClusters) clusterStatuses() map[string]*structs.ClusterStatus {
	e.t.Helper()
	var list []*structs.ClusterStatus
	if code, body := e.s.Do("GET", "/v1/clusters", nil, &list); code != http.StatusOK {
		e.t.Fatalf("GET /v1/clusters: %d %s", code, body)
	}
	out := map[string]*structs.ClusterStatus{}
	for _, c := range list {
		out[c.Name] = c
	}
	return out
}

// TestClusters_SameJobTwoClusters: the same job ID in two clusters is two
// jobs, each deployed to its own Nomad with its own policy and history; an
// approval in one touches nothing in the other; a job route without
// ?cluster= is ambiguous and names the clusters; GET /v1/clusters shows
// both clusters reachable with their version and event stream.
func TestClusters_SameJobTwoClusters(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithCount(2))...),
	})
	eu := e.waitDeployment("eu", "web", structs.StateCompleted)
	if eu.Cluster != "eu" || eu.Repository != "eu-jobs" || !eu.Registered {
		t.Fatalf("eu deployment: %+v", eu)
	}
	pending := e.waitDeployment("us", "web", structs.StatePendingApproval)
	if pending.Cluster != "us" || pending.Repository != "us-jobs" {
		t.Fatalf("us deployment: %+v", pending)
	}
	if j := lookupNomadJob(t, e.eu, "web"); j == nil || groupCount(j) != 1 {
		t.Fatalf("eu's Nomad runs %+v, want web with count 1", j)
	}
	if j := lookupNomadJob(t, e.us, "web"); j != nil {
		t.Fatalf("us's Nomad runs web before its approval: version %d", *j.Version)
	}

	// Without ?cluster= the job is ambiguous; with it, each is itself.
	code, body := e.s.Do("GET", "/v1/job/default/web", nil, nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "eu, us") {
		t.Fatalf("GET /v1/job/default/web: %d %s, want 400 naming eu, us", code, body)
	}
	for cluster, policy := range map[string]structs.Policy{"eu": structs.PolicyAuto, "us": structs.PolicyApproval} {
		var d structs.JobDetail
		if code, body := e.s.Do("GET", "/v1/job/default/web?cluster="+cluster, nil, &d); code != http.StatusOK {
			t.Fatalf("GET job of %s: %d %s", cluster, code, body)
		}
		if d.Status == nil || d.Status.Cluster != cluster || d.Status.Policy != policy {
			t.Fatalf("job of %s: %+v", cluster, d.Status)
		}
	}

	// An approval in us deploys us's job alone.
	euBefore := len(e.deployments("eu", "web"))
	if code, body := e.s.Do("POST", "/v1/deployment/"+pending.ID+"/approve", map[string]string{"comment": "us only"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	e.waitDeployment("us", "web", structs.StateCompleted)
	if j := lookupNomadJob(t, e.us, "web"); j == nil || groupCount(j) != 2 {
		t.Fatalf("us's Nomad runs %+v, want web with count 2", j)
	}
	if j := lookupNomadJob(t, e.eu, "web"); j == nil || *j.Version != 0 || groupCount(j) != 1 {
		t.Fatalf("the approval in us changed eu's job: %+v", j)
	}
	if n := len(e.deployments("eu", "web")); n != euBefore {
		t.Fatalf("eu has %d deployments after the approval in us, had %d", n, euBefore)
	}

	cs := e.clusterStatuses()
	for _, name := range []string{"eu", "us"} {
		c := cs[name]
		if c == nil || !c.Reachable || c.Address != e.clusters[name].Addr || c.NomadVersion == "" || !c.EventStream || c.Jobs != 1 {
			t.Fatalf("cluster %s: %+v", name, c)
		}
	}
}

// TestClusters_OneDownOtherDeploys: with one cluster's Nomad killed, a
// commit that changes a job in both clusters registers in the live one
// within the usual time, and the dead one's job and its entry in GET
// /v1/clusters say why.
func TestClusters_OneDownOtherDeploys(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	e.waitDeployment("eu", "web", structs.StateCompleted)
	e.waitDeployment("us", "web", structs.StateCompleted)

	e.eu.Stop()
	downAt := time.Now()
	commitFiles(e.repo, "scale web in both clusters", map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(3))...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(3))...),
	})
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		j := lookupNomadJob(t, e.us, "web")
		if j == nil || groupCount(j) != 3 {
			return false, fmt.Errorf("us's Nomad runs %+v, want count 3", j)
		}
		return true, nil
	})
	e.waitDeployment("us", "web", structs.StateCompleted)
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		c := e.clusterStatuses()["eu"]
		if c == nil || c.Reachable || c.Error == "" {
			return false, fmt.Errorf("eu's entry: %+v, want unreachable with its error", c)
		}
		return true, nil
	})
	if c := e.clusterStatuses()["us"]; c == nil || !c.Reachable || !c.LastReconciled.After(downAt) {
		t.Fatalf("us's entry: %+v, want reachable and reconciled after eu went down", c)
	}
}

// TestClusters_WindowSelectsOneCluster: a deny window that selects cluster
// eu holds eu's job while us's job deploys.
func TestClusters_WindowSelectsOneCluster(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{})
	w := &structs.WindowSpec{Kind: string(structs.WindowDeny), Schedule: "* * * * *", Duration: "24h",
		Clusters: []string{"eu"}}
	if code, body := e.s.Do("PUT", "/v1/window/eu-freeze", w, nil); code != http.StatusOK {
		t.Fatalf("put window: %d %s", code, body)
	}
	commitFiles(e.repo, "web in both clusters", map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	e.waitDeployment("us", "web", structs.StateCompleted)
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		s := e.s.ClusterJobStatus("eu", "default", "web")
		if s == nil || !strings.Contains(s.Hold, "eu-freeze") {
			return false, fmt.Errorf("eu's web status %+v, want held by eu-freeze", s)
		}
		return true, nil
	})
	if j := lookupNomadJob(t, e.eu, "web"); j != nil {
		t.Fatalf("eu's Nomad runs web during its deny window")
	}
	if s := e.s.ClusterJobStatus("us", "default", "web"); s == nil || s.Hold != "" {
		t.Fatalf("us's web status %+v, want no hold", s)
	}
}

// TestClusters_FailoverResumesEveryCluster: three servers deploy to two
// Nomad clusters; the leader is killed; the new leader resumes both
// clusters' loops, so a commit changing a job in each registers in both.
func TestClusters_FailoverResumesEveryCluster(t *testing.T) {
	t.Parallel()
	eu := testutil.StartNomad(t, testutil.WithNomadConfig(`region = "eu"`))
	us := testutil.StartNomad(t, testutil.WithNomadConfig(`region = "us"`))
	repo := testutil.NewGitRepo(t)
	commitFiles(repo, "initial jobs", map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	url := repo.URL()
	c := nopstest.StartCluster(t, 3, nopstest.WithConfig(func(c *config.Config) {
		c.Nomads = []config.NomadCluster{{Name: "eu", Address: eu.Addr, Region: "eu"}, {Name: "us", Address: us.Addr, Region: "us"}}
		c.Repositories = []config.Repository{
			{Name: "eu-jobs", URL: url, Branch: "main", Path: "eu", Cluster: "eu", PollInterval: repoPollInterval},
			{Name: "us-jobs", URL: url, Branch: "main", Path: "us", Cluster: "us", PollInterval: repoPollInterval},
		}
	}))
	count := func(agent *testutil.NomadAgent, n int) func() (bool, error) {
		return func() (bool, error) {
			j := lookupNomadJob(t, agent, "web")
			if j == nil || groupCount(j) != n {
				return false, fmt.Errorf("%s runs %+v, want web with count %d", agent.Addr, j, n)
			}
			return true, nil
		}
	}
	testutil.WaitForResult(t, lcWait, count(eu, 1))
	testutil.WaitForResult(t, lcWait, count(us, 1))

	old := c.Leader()
	c.Kill(c.Index(old))
	next := c.WaitForLeader(clusterFailoverWait)
	if next == old {
		t.Fatal("the killed server still leads")
	}
	commitFiles(repo, "scale web in both clusters", map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(3))...),
	})
	testutil.WaitForResult(t, lcWait, count(eu, 2))
	testutil.WaitForResult(t, lcWait, count(us, 3))
	var list []*structs.ClusterStatus
	if code, body := next.Do("GET", "/v1/clusters", nil, &list); code != http.StatusOK || len(list) != 2 {
		t.Fatalf("GET /v1/clusters on the new leader: %d %s", code, body)
	}
	for _, cs := range list {
		if cs.Leader != next.NodeID() || !cs.Reachable {
			t.Fatalf("cluster %s after the failover: %+v, want watched by the new leader %s", cs.Name, cs, next.NodeID())
		}
	}
}

// clusterFailoverWait bounds the election after the leader is killed.
const clusterFailoverWait = 60 * time.Second

// TestClusters_MetaNamesCluster: a job's nops_cluster deploys it to that
// cluster whatever its repository's, and one that names no cluster is an
// error on the job, in its repository's cluster, naming the clusters.
func TestClusters_MetaNamesCluster(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{
		"eu/api.nomad.hcl":  testutil.ServiceJobHCL("api", managed(structs.PolicyAuto, testutil.WithMeta("nops_cluster", "us"))...),
		"eu/mars.nomad.hcl": testutil.ServiceJobHCL("mars", managed(structs.PolicyAuto, testutil.WithMeta("nops_cluster", "mars"))...),
	})
	d := e.waitDeployment("us", "api", structs.StateCompleted)
	if d.Cluster != "us" || d.Repository != "eu-jobs" {
		t.Fatalf("api's deployment: %+v, want of cluster us from eu-jobs", d)
	}
	if j := lookupNomadJob(t, e.us, "api"); j == nil {
		t.Fatal("us's Nomad does not run api")
	}
	if j := lookupNomadJob(t, e.eu, "api"); j != nil {
		t.Fatal("eu's Nomad runs api, which names cluster us")
	}
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		s := e.s.ClusterJobStatus("eu", "default", "mars")
		if s == nil || s.Sync != structs.SyncError || !strings.Contains(strings.Join(s.Errors, "\n"), `no Nomad cluster of that name (the clusters are eu, us)`) {
			return false, fmt.Errorf("mars's status in eu: %+v", s)
		}
		return true, nil
	})
	if list := e.deployments("eu", "mars"); len(list) != 0 {
		t.Fatalf("mars, which names no cluster, has deployments: %+v", list)
	}
}

// TestClusters_HooksRunInTheJobsCluster: a hook declared once, in the
// folder of cluster eu, runs for a job of eu in eu's Nomad and for a job
// of us in us's Nomad: each run is dispatched in the managed job's cluster.
func TestClusters_HooksRunInTheJobsCluster(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{
		"eu/backup.nomad.hcl": testutil.HookJobHCL("backup"),
		"eu/web.nomad.hcl":    testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"))...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("nops_pre_hooks", "backup"),
			testutil.WithCount(2))...),
	})
	for cluster, agent := range e.clusters {
		d := e.waitDeployment(cluster, "web", structs.StateCompleted)
		r, ok := d.HookRun(structs.PhasePre, 0)
		if !ok || r.State != structs.HookRunSucceeded || r.DispatchedJobID == "" {
			t.Fatalf("%s: pre-hook run %+v", cluster, d.HookRuns)
		}
		if j := lookupNomadJob(t, agent, r.DispatchedJobID); j == nil {
			t.Fatalf("%s's Nomad has no hook run %s", cluster, r.DispatchedJobID)
		}
		other := e.eu
		if agent == e.eu {
			other = e.us
		}
		if j := lookupNomadJob(t, other, r.DispatchedJobID); j != nil {
			t.Fatalf("the hook run %s of %s's job ran in the other cluster's Nomad", r.DispatchedJobID, cluster)
		}
	}
}

// TestClusters_PreviewEachJobInItsCluster: a preview of one cluster's
// repository at a branch shows each job it changes once, in its own
// cluster (a job naming the other cluster with nops_cluster in that one),
// planned against that cluster's Nomad; the other cluster's repository,
// which the branch does not touch, adds nothing, and a file of the
// repository that is no valid job shows once.
func TestClusters_PreviewEachJobInItsCluster(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{
		"eu/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		"eu/api.nomad.hcl": testutil.ServiceJobHCL("api", managed(structs.PolicyAuto, testutil.WithMeta("nops_cluster", "us"))...),
		"us/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	e.waitDeployment("eu", "web", structs.StateCompleted)
	e.waitDeployment("us", "web", structs.StateCompleted)
	e.waitDeployment("us", "api", structs.StateCompleted)

	e.repo.Git("checkout", "-b", "feature")
	commitFiles(e.repo, "scale eu's web and api, break a file", map[string]string{
		"eu/web.nomad.hcl":    testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(2))...),
		"eu/api.nomad.hcl":    testutil.ServiceJobHCL("api", managed(structs.PolicyAuto, testutil.WithMeta("nops_cluster", "us"), testutil.WithCount(2))...),
		"eu/broken.nomad.hcl": "job \"broken\" {",
	})
	e.repo.Git("checkout", "main")

	var p structs.Preview
	if code, body := e.s.Do("POST", "/v1/preview", &structs.PreviewRequest{Repository: "eu-jobs", Ref: "feature"}, &p); code != http.StatusOK {
		t.Fatalf("POST /v1/preview eu-jobs@feature: %d %s", code, body)
	}
	var got []string
	for _, j := range p.Jobs {
		if j.PlanType == "" {
			t.Fatalf("preview job %+v has no plan", j)
		}
		got = append(got, structs.JobKey(j.Cluster, j.Namespace, j.JobID)+":"+j.Change)
	}
	sort.Strings(got)
	if want := "eu:default/web:changed,us:default/api:changed"; strings.Join(got, ",") != want {
		t.Fatalf("preview jobs %v, want %s: eu's web and us's api once each", got, want)
	}
	if len(p.Removed) != 0 || len(p.Errors) != 1 || !strings.Contains(p.Errors[0], "broken.nomad.hcl") || !p.Changes {
		t.Fatalf("preview: removed %+v, errors %q, changes %v: want one error on broken.nomad.hcl", p.Removed, p.Errors, p.Changes)
	}
}

// TestClusters_RepoStatusWrittenByItsCluster: a file of cluster eu's
// repository that is no valid job shows on that repository, and the
// detection cycles of cluster us, which does not parse that file, leave
// the repository's status as it is: it is not rewritten without its
// error at each of their cycles.
func TestClusters_RepoStatusWrittenByItsCluster(t *testing.T) {
	t.Parallel()
	e := startTwoClusters(t, map[string]string{
		"eu/web.nomad.hcl":    testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
		"eu/broken.nomad.hcl": "job \"broken\" {",
		"us/web.nomad.hcl":    testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...),
	})
	e.waitDeployment("us", "web", structs.StateCompleted)
	repo := func(name string) *structs.RepoStatus {
		var list []*structs.RepoStatus
		if code, body := e.s.Do("GET", "/v1/repos", nil, &list); code != http.StatusOK {
			t.Fatalf("GET /v1/repos: %d %s", code, body)
		}
		for _, r := range list {
			if r.Name == name {
				return r
			}
		}
		return nil
	}
	var before *structs.RepoStatus
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		before = repo("eu-jobs")
		if before == nil || len(before.ParseErrors) != 1 || !strings.Contains(before.ParseErrors[0], "broken.nomad.hcl") {
			return false, fmt.Errorf("eu-jobs: %+v, want the error of broken.nomad.hcl", before)
		}
		return true, nil
	})
	// Each refresh asks every cluster for a detection cycle.
	for range 3 {
		if code, body := e.s.Do("POST", "/v1/repo/us-jobs/refresh", nil, nil); code != http.StatusOK {
			t.Fatalf("refresh us-jobs: %d %s", code, body)
		}
		time.Sleep(time.Second)
	}
	if r := repo("us-jobs"); r == nil || len(r.ParseErrors) != 0 {
		t.Fatalf("us-jobs: %+v, want no parse error", r)
	}
	if after := repo("eu-jobs"); after == nil || after.ModifyIndex != before.ModifyIndex || len(after.ParseErrors) != 1 {
		t.Fatalf("eu-jobs after us's cycles: %+v, want it unchanged from %+v", after, before)
	}
}
