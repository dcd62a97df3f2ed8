package reconcile_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// A cluster that is slow or refusing never delays another (SPEC section
// 16): these scenarios run a Nops server against two real Nomad dev agents,
// cluster eu behind a fault proxy, and check that a commit registers in us
// within the usual time while eu answers late or not at all.

// slowDelay is how late the proxy makes each of eu's answers.
const slowDelay = 5 * time.Second

// startTwoClustersBehindProxy is startTwoClusters with a fault proxy in
// front of cluster eu's Nomad: the server reaches eu through the proxy
// only (its requests, blocking queries and event stream).
func startTwoClustersBehindProxy(t *testing.T, files map[string]string) (*twoClusters, *testutil.FaultProxy) {
	t.Helper()
	e := &twoClusters{t: t, euDir: "eu", usDir: "us"}
	e.eu = testutil.StartNomad(t, testutil.WithNomadConfig(`region = "eu"`))
	e.us = testutil.StartNomad(t, testutil.WithNomadConfig(`region = "us"`))
	e.clusters = map[string]*testutil.NomadAgent{"eu": e.eu, "us": e.us}
	proxy := testutil.StartFaultProxy(t, e.eu.Addr)
	e.repo = testutil.NewGitRepo(t)
	commitFiles(e.repo, "initial jobs", files)
	url := e.repo.URL()
	e.s = nopstest.Start(t, "", nopstest.WithConfig(func(c *config.Config) {
		c.Nomads = []config.NomadCluster{
			{Name: "eu", Address: proxy.URL, Region: "eu"},
			{Name: "us", Address: e.us.Addr, Region: "us"},
		}
		c.Repositories = append(c.Repositories,
			config.Repository{Name: "eu-jobs", URL: url, Branch: "main", Path: e.euDir, Cluster: "eu", PollInterval: repoPollInterval},
			config.Repository{Name: "us-jobs", URL: url, Branch: "main", Path: e.usDir, Cluster: "us", PollInterval: repoPollInterval})
	}))
	return e, proxy
}

// webInBoth is job web, policy auto, in both clusters, with count n.
func webInBoth(n int) map[string]string {
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithCount(n))...)
	return map[string]string{"eu/web.nomad.hcl": hcl, "us/web.nomad.hcl": hcl}
}

// commitToUsRegister commits web with count 3 in both clusters and returns
// the commit and the time from it to us's Nomad holding the new version;
// it fails the test if that takes longer than the usual wait.
func (e *twoClusters) commitToUsRegister() (string, time.Duration) {
	e.t.Helper()
	live := lookupNomadJob(e.t, e.us, "web")
	if live == nil {
		e.t.Fatal("us's Nomad has no job web before the commit")
	}
	commit := commitFiles(e.repo, "scale web in both clusters", webInBoth(3))
	start := time.Now()
	d, err := waitNewVersion(e.us, "web", live, start, lcWait)
	if err != nil {
		e.t.Fatalf("commit %s: %v", commit[:8], err)
	}
	if j := lookupNomadJob(e.t, e.us, "web"); j == nil || groupCount(j) != 3 {
		e.t.Fatalf("us's Nomad runs %+v after commit %s, want web with count 3", j, commit[:8])
	}
	return commit, d
}

// TestClustersSlow_SlowClusterDoesNotDelayOther: while every answer of
// eu's Nomad comes 5 s late, a commit that changes web in both clusters
// registers in us in less than one of eu's answers takes, so us's
// detection and apply never waited on eu; eu, slow but answering, gets
// the change too and stays reachable.
func TestClustersSlow_SlowClusterDoesNotDelayOther(t *testing.T) {
	t.Parallel()
	e, proxy := startTwoClustersBehindProxy(t, webInBoth(1))
	e.waitDeployment("eu", "web", structs.StateCompleted)
	e.waitDeployment("us", "web", structs.StateCompleted)

	proxy.SetDelay(slowDelay)
	before := proxy.Requests()
	// The parses eu's manager asks of its Nomad: the commit's own work
	// there, which a reconnect of its event stream is not.
	euParses := func() uint64 { return e.s.Fleet().Manager("eu").Nomad().Stats().Operations["jobs.parse"].Requests }
	parsesBefore := euParses()
	_, d := e.commitToUsRegister()
	t.Logf("commit to register in us: %s while eu answers %s late", d.Round(time.Millisecond), slowDelay)
	if d >= slowDelay {
		t.Fatalf("commit to register in us took %s, not less than one of slow eu's answers (%s)", d.Round(time.Millisecond), slowDelay)
	}
	// eu was asked meanwhile: the commit's work there was under way.
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		n := proxy.Requests() - before
		return n > 0 && euParses() > parsesBefore, fmt.Errorf("eu got %d requests since it turned slow, and %d parses of the commit", n, euParses()-parsesBefore)
	})
	e.waitDeployment("us", "web", structs.StateCompleted)

	// Slow is not down: eu registers the change in its own time.
	testutil.WaitForResult(t, 3*time.Minute, func() (bool, error) {
		j := lookupNomadJob(t, e.eu, "web")
		if j == nil || groupCount(j) != 3 {
			return false, fmt.Errorf("eu's Nomad runs %+v, want web with count 3", j)
		}
		return true, nil
	})
	cs := e.clusterStatuses()
	for _, name := range []string{"eu", "us"} {
		if c := cs[name]; c == nil || !c.Reachable || c.Error != "" {
			t.Fatalf("cluster %s: %+v, want reachable without an error", name, c)
		}
	}
}

// TestClustersSlow_RefusingClusterDoesNotBlockOther: while eu's Nomad
// answers 403 to every request, a commit that changes web in both clusters
// registers in us within the usual time; eu's job status says Nomad
// refused the token, GET /v1/clusters shows eu unreachable with that error
// and us reachable, and eu's Nomad keeps its old version. Once eu accepts
// the token again, it gets the change.
func TestClustersSlow_RefusingClusterDoesNotBlockOther(t *testing.T) {
	t.Parallel()
	e, proxy := startTwoClustersBehindProxy(t, webInBoth(1))
	e.waitDeployment("eu", "web", structs.StateCompleted)
	e.waitDeployment("us", "web", structs.StateCompleted)

	proxy.Refuse(http.StatusForbidden)
	commit, d := e.commitToUsRegister()
	t.Logf("commit to register in us: %s while eu refuses every request", d.Round(time.Millisecond))
	if d >= slowDelay {
		t.Fatalf("commit to register in us took %s while eu refuses, want less than %s", d.Round(time.Millisecond), slowDelay)
	}
	e.waitDeployment("us", "web", structs.StateCompleted)

	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		s := e.s.ClusterJobStatus("eu", "default", "web")
		if s == nil || !strings.Contains(strings.Join(s.Errors, "; "), "403") {
			return false, fmt.Errorf("eu's web status %+v, want an error naming Nomad's 403", s)
		}
		return true, nil
	})
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		c := e.clusterStatuses()["eu"]
		if c == nil || c.Reachable || !strings.Contains(c.Error, "refused the token") {
			return false, fmt.Errorf("eu's entry: %+v, want unreachable, Nomad refused the token", c)
		}
		return true, nil
	})
	if c := e.clusterStatuses()["us"]; c == nil || !c.Reachable || c.Error != "" {
		t.Fatalf("us's entry: %+v, want reachable without an error", c)
	}
	if s := e.s.ClusterJobStatus("us", "default", "web"); s == nil || len(s.Errors) != 0 {
		t.Fatalf("us's web status %+v, want no error", s)
	}
	if j := lookupNomadJob(t, e.eu, "web"); j == nil || groupCount(j) != 1 {
		t.Fatalf("eu's Nomad runs %+v while it refuses Nops, want web with count 1", j)
	}

	proxy.Refuse(0)
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		j := lookupNomadJob(t, e.eu, "web")
		if j == nil || groupCount(j) != 3 {
			return false, fmt.Errorf("eu's Nomad runs %+v once it accepts the token again, want web with count 3", j)
		}
		return true, nil
	})
	if dep := e.waitDeployment("eu", "web", structs.StateCompleted); dep.Commit != commit {
		t.Fatalf("eu's newest deployment is of commit %s, want %s", dep.Commit, commit)
	}
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		c := e.clusterStatuses()["eu"]
		if c == nil || !c.Reachable || c.Error != "" {
			return false, fmt.Errorf("eu's entry: %+v, want reachable again", c)
		}
		return true, nil
	})
}
