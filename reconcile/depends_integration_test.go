package reconcile_test

import (
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// dependsOnDB is the meta option of a job that depends on db (SPEC
// section 17).
var dependsOnDB = testutil.WithMeta("nops_depends_on", "db")

// wantDeployedAfter fails the test unless api's deployment was created, and
// its job registered to Nomad, only after db's deployment completed (db's
// version healthy), and unless Nomad got db's version before api's.
func (e *lcEnv) wantDeployedAfter(db, api *structs.Deployment) {
	e.t.Helper()
	if db.State != structs.StateCompleted || api.State != structs.StateCompleted {
		e.t.Fatalf("deployments of db (%s) and api (%s), want both completed", db.State, api.State)
	}
	if api.CreatedAt.Before(db.StateEnteredAt) || api.RegisterStartedAt.Before(db.StateEnteredAt) {
		e.t.Fatalf("api's deployment was created at %s and registered at %s, before db's completed at %s",
			api.CreatedAt, api.RegisterStartedAt, db.StateEnteredAt)
	}
	dbJob, apiJob := e.nomadJob("db"), e.nomadJob("api")
	if *dbJob.Version != db.JobVersion || *apiJob.Version != api.JobVersion {
		e.t.Fatalf("Nomad versions db %d, api %d; the deployments registered %d and %d",
			*dbJob.Version, *apiJob.Version, db.JobVersion, api.JobVersion)
	}
	if *apiJob.SubmitTime <= *dbJob.SubmitTime {
		e.t.Fatalf("Nomad got api's version %d (submit time %d) no later than db's version %d (%d)",
			*apiJob.Version, *apiJob.SubmitTime, *dbJob.Version, *dbJob.SubmitTime)
	}
}

// TestDependsOn_DependencyDeploysFirst: api depends on db. The first commit
// (both new) and a later commit that changes both deploy db first; api's
// deployment is created only once db's is healthy and completed, though
// api comes first in key order.
func TestDependsOn_DependencyDeploysFirst(t *testing.T) {
	t.Parallel()
	e := lcStart(t, map[string]string{
		jobFile("db"):  testutil.ServiceJobHCL("db", managed(structs.PolicyAuto)...),
		jobFile("api"): testutil.ServiceJobHCL("api", managed(structs.PolicyAuto, dependsOnDB)...),
	})
	api := e.s.WaitForDeployment("default", "api", structs.StateCompleted, lcWait)
	db := e.s.WaitForDeployment("default", "db", structs.StateCompleted, lcWait)
	e.wantDeployedAfter(db, api)

	c := e.commit("two of each", map[string]string{
		jobFile("db"):  testutil.ServiceJobHCL("db", managed(structs.PolicyAuto, testutil.WithCount(2))...),
		jobFile("api"): testutil.ServiceJobHCL("api", managed(structs.PolicyAuto, dependsOnDB, testutil.WithCount(2))...),
	})
	e.waitHead(c)
	e.waitFor(func() (bool, string) {
		l := e.deploymentsOf("api")
		return len(l) == 2 && l[0].Commit == c && l[0].State == structs.StateCompleted,
			"api's deployment of the new commit has not completed"
	})
	e.settle()
	dbs := e.wantDeployments("db", structs.StateCompleted, structs.StateCompleted)
	apis := e.wantDeployments("api", structs.StateCompleted, structs.StateCompleted)
	if dbs[0].Commit != c {
		t.Fatalf("db's newest deployment is of commit %s, want %s", dbs[0].Commit, c)
	}
	e.wantDeployedAfter(dbs[0], apis[0])
	if v := e.nomadVersions("api"); len(v) != 2 {
		t.Fatalf("Nomad keeps %d versions of api, want 2 (one a deployment)", len(v))
	}
	if s := e.jobStatus("api"); s.WaitingFor != "" || s.Sync != structs.SyncInSync {
		t.Fatalf("api's status once both are deployed: sync %s, waiting for %q", s.Sync, s.WaitingFor)
	}
}

// TestDependsOn_FailedDependencyHoldsDependents: db cannot become healthy,
// so its deployment fails and blocks it; api, which depends on it, gets no
// deployment and its status says it waits for db, blocked, with db's
// failure. A commit that fixes db deploys db, then api.
func TestDependsOn_FailedDependencyHoldsDependents(t *testing.T) {
	t.Parallel()
	e := lcStart(t, map[string]string{
		jobFile("db"):  testutil.ServiceJobHCL("db", managed(structs.PolicyAuto, testutil.WithFailure())...),
		jobFile("api"): testutil.ServiceJobHCL("api", managed(structs.PolicyAuto, dependsOnDB)...),
	})
	failed := e.s.WaitForDeployment("default", "db", structs.StateFailed, lcWait)
	if failed.Error == "" {
		t.Fatalf("db's deployment failed with no error: %+v", failed)
	}
	want := "waiting for default/db: blocked (failed: " + failed.Error + ")"
	s := e.waitStatus("api", func(s *structs.JobStatus) bool { return s.WaitingFor == want })
	if s.Sync != structs.SyncDrift || s.Blocked || len(s.Errors) > 0 {
		t.Fatalf("api's status while db is blocked: %+v", *s)
	}
	e.settle()
	if l := e.deploymentsOf("api"); len(l) != 0 {
		t.Fatalf("api has %d deployments while db is blocked, the first %s, want none", len(l), l[0].State)
	}
	e.nomadHasNoJob("api")
	if s := e.jobStatus("api"); s.WaitingFor != want {
		t.Fatalf("api's status after quiet cycles waits for %q, want %q", s.WaitingFor, want)
	}

	c := e.commit("db fixed", map[string]string{
		jobFile("db"): testutil.ServiceJobHCL("db", managed(structs.PolicyAuto)...),
	})
	e.waitHead(c)
	api := e.s.WaitForDeployment("default", "api", structs.StateCompleted, lcWait)
	dbs := e.wantDeployments("db", structs.StateCompleted, structs.StateFailed)
	e.wantDeployedAfter(dbs[0], api)
}
