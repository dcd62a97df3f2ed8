package reconcile_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// startStagingProd is startTwoClusters for the promotion order (SPEC
// section 16): clusters staging and prod, two real Nomad dev agents, from
// the folders staging and prod of one git repository; prod requires
// staging with bake. In the returned value, eu is staging's Nomad and us
// prod's.
func startStagingProd(t *testing.T, files map[string]string, bake time.Duration) *twoClusters {
	t.Helper()
	e := &twoClusters{t: t, euDir: "staging", usDir: "prod"}
	e.eu = testutil.StartNomad(t, testutil.WithNomadConfig(`region = "staging"`))
	e.us = testutil.StartNomad(t, testutil.WithNomadConfig(`region = "prod"`))
	e.clusters = map[string]*testutil.NomadAgent{"staging": e.eu, "prod": e.us}
	e.repo = testutil.NewGitRepo(t)
	commitFiles(e.repo, "initial jobs", files)
	url := e.repo.URL()
	e.s = nopstest.Start(t, "", nopstest.WithConfig(func(c *config.Config) {
		c.Nomads = []config.NomadCluster{
			{Name: "staging", Address: e.eu.Addr, Region: "staging"},
			{Name: "prod", Address: e.us.Addr, Region: "prod", Requires: []string{"staging"}, Bake: bake},
		}
		c.Repositories = append(c.Repositories,
			config.Repository{Name: "staging-jobs", URL: url, Branch: "main", Path: "staging", Cluster: "staging", PollInterval: repoPollInterval},
			config.Repository{Name: "prod-jobs", URL: url, Branch: "main", Path: "prod", Cluster: "prod", PollInterval: repoPollInterval})
	}))
	return e
}

// webIn is the files of web in both clusters' folders, staging's with
// stagingOpts and prod's with prodOpts after the managed policy auto.
func webIn(stagingOpts, prodOpts []testutil.JobOption) map[string]string {
	return map[string]string{
		"staging/web.nomad.hcl": testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, stagingOpts...)...),
		"prod/web.nomad.hcl":    testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, prodOpts...)...),
	}
}

// waitCommitted waits until the newest deployment of web in a cluster is
// of commit and in state.
func (e *twoClusters) waitCommitted(cluster, commit string, state structs.DeploymentState) *structs.Deployment {
	e.t.Helper()
	var d *structs.Deployment
	testutil.WaitForResult(e.t, lcWait, func() (bool, error) {
		list := e.deployments(cluster, "web")
		if len(list) == 0 || list[0].Commit != commit || list[0].State != state {
			if len(list) > 0 {
				return false, fmt.Errorf("newest deployment of web in %s: commit %s, %s (%s); want commit %s, %s",
					cluster, structs.ShortID(list[0].Commit), list[0].State, list[0].Error, structs.ShortID(commit), state)
			}
			return false, fmt.Errorf("web in %s has no deployment", cluster)
		}
		d = list[0]
		return true, nil
	})
	return d
}

// watchWaiting records, until stop is called, every WaitingFor that web's
// status in prod shows.
func (e *twoClusters) watchWaiting() (stop func() []string) {
	var (
		mu   sync.Mutex
		seen []string
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if st, _ := e.s.State().JobStatus("prod", "default", "web"); st != nil && st.WaitingFor != "" {
				mu.Lock()
				if len(seen) == 0 || seen[len(seen)-1] != st.WaitingFor {
					seen = append(seen, st.WaitingFor)
				}
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() []string {
		close(done)
		wg.Wait()
		return seen
	}
}

// TestPromotion_ProdWaitsForStagingToBake: one commit changes web in
// staging and in prod; prod's deployment is created at once and waits in
// detected, its job's status saying it waits for staging, and registers
// only once staging's deployment of that commit completed and baked.
func TestPromotion_ProdWaitsForStagingToBake(t *testing.T) {
	t.Parallel()
	const bake = 3 * time.Second
	e := startStagingProd(t, webIn(nil, nil), bake)
	first := e.repo.Head()
	e.waitCommitted("staging", first, structs.StateCompleted)
	e.waitCommitted("prod", first, structs.StateCompleted)

	stop := e.watchWaiting()
	c := commitFiles(e.repo, "web v2 in staging and prod", webIn(
		[]testutil.JobOption{testutil.WithEnv("VERSION", "2")}, []testutil.JobOption{testutil.WithEnv("VERSION", "2")}))
	staging := e.waitCommitted("staging", c, structs.StateCompleted)
	prod := e.waitCommitted("prod", c, structs.StateCompleted)
	seen := stop()

	baked := staging.StateEnteredAt.Add(bake)
	if prod.RegisterStartedAt.Before(baked) {
		t.Fatalf("prod registered at %s, before staging's deployment completed (%s) and baked %s",
			prod.RegisterStartedAt.Format(time.RFC3339Nano), staging.StateEnteredAt.Format(time.RFC3339Nano), bake)
	}
	if !prod.CreatedAt.Before(staging.StateEnteredAt) {
		t.Fatalf("prod's deployment was created at %s, not before staging's completed (%s): it did not wait in detected",
			prod.CreatedAt.Format(time.RFC3339Nano), staging.StateEnteredAt.Format(time.RFC3339Nano))
	}
	waited := false
	for _, w := range seen {
		waited = waited || strings.HasPrefix(w, "waiting for staging")
	}
	if !waited {
		t.Fatalf("prod's status never said it waits for staging; it said %q", seen)
	}
	var st structs.JobDetail
	if code, body := e.s.Do("GET", "/v1/job/default/web?cluster=prod", nil, &st); code != http.StatusOK || st.Status.WaitingFor != "" {
		t.Fatalf("prod's web once deployed: %d %s", code, body)
	}
}

// TestPromotion_FailedStagingHoldsProdUntilSkipped: a commit whose web
// fails in staging holds prod's deployment in detected, its status naming
// staging's failure; skip-requirements through the API lets it deploy
// while staging stays blocked, audited on the deployment.
func TestPromotion_FailedStagingHoldsProdUntilSkipped(t *testing.T) {
	t.Parallel()
	e := startStagingProd(t, webIn(nil, nil), time.Second)
	first := e.repo.Head()
	e.waitCommitted("staging", first, structs.StateCompleted)
	e.waitCommitted("prod", first, structs.StateCompleted)

	c := commitFiles(e.repo, "web v2: broken in staging", webIn(
		[]testutil.JobOption{testutil.WithEnv("VERSION", "2"), testutil.WithFailure()}, []testutil.JobOption{testutil.WithEnv("VERSION", "2")}))
	failed := e.waitCommitted("staging", c, structs.StateFailed)
	want := fmt.Sprintf("held by staging: deployment %s failed: %s", structs.ShortID(failed.ID), failed.Error)
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		st := e.s.ClusterJobStatus("prod", "default", "web")
		if st == nil || st.WaitingFor != want {
			return false, fmt.Errorf("prod's web status: %+v, want waiting for %q", st, want)
		}
		return true, nil
	})
	held := e.deployments("prod", "web")[0]
	if held.Commit != c || held.State != structs.StateDetected {
		t.Fatalf("prod's newest deployment while staging is held: commit %s, %s; want %s, detected", structs.ShortID(held.Commit), held.State, structs.ShortID(c))
	}
	// The status above is from a cycle of prod's detection after
	// staging's failure: it kept the deployment, which the apply loop's
	// gate keeps from starting.
	if d, _ := e.s.State().Deployment(held.ID); d.State != structs.StateDetected || d.Registered {
		t.Fatalf("prod's deployment moved while held: %s", d.State)
	}
	if j := lookupNomadJob(t, e.us, "web"); j == nil || j.TaskGroups[0].Tasks[0].Env["VERSION"] != "" {
		t.Fatalf("prod's Nomad does not run web v1 while staging is held: %+v", j)
	}

	if code, body := e.s.Do("POST", "/v1/deployment/"+held.ID+"/skip-requirements", map[string]string{"reason": ""}, nil); code != http.StatusBadRequest {
		t.Fatalf("skip without a reason: %d %s", code, body)
	}
	var skipped structs.Deployment
	if code, body := e.s.Do("POST", "/v1/deployment/"+held.ID+"/skip-requirements",
		map[string]string{"reason": "the staging failure is a staging-only quota"}, &skipped); code != http.StatusOK {
		t.Fatalf("skip-requirements: %d %s", code, body)
	}
	done := e.waitCommitted("prod", c, structs.StateCompleted)
	if done.ID != held.ID || !done.SkipRequirements || done.SkipRequirementsBy != "tester" {
		t.Fatalf("prod's completed deployment: %+v", done)
	}
	if j := lookupNomadJob(t, e.us, "web"); j == nil || j.TaskGroups[0].Tasks[0].Env["VERSION"] != "2" {
		t.Fatalf("prod's Nomad does not run web v2 after the skip: %+v", j)
	}
	audited := false
	for _, ev := range e.s.Events(held.ID) {
		audited = audited || (ev.Actor == "tester" && ev.Message == "promotion order skipped by tester: the staging failure is a staging-only quota")
	}
	if !audited {
		t.Fatal("the skip is not among the deployment's events")
	}
	if st := e.s.ClusterJobStatus("staging", "default", "web"); st == nil || !st.Blocked {
		t.Fatalf("staging's web is not blocked any more: %+v", st)
	}
}
