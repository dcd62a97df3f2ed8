package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// noTick is an engine and drift interval no step of a test can wait for.
const noTick = time.Hour

// eventStepBudget bounds the whole of a deployment with a pre- and a
// post-hook when every step follows the one before at once: three short
// runs of the mock driver and one Nomad deployment, on a shared machine.
const eventStepBudget = 60 * time.Second

// TestEventApply_HooksAndHealthMoveWithoutTheEngineTick: with engine and
// drift intervals of an hour, a deployment with a pre- and a post-hook
// completes: each step (pre-hook run, register, Nomad deployment, post-hook
// run) is started by the one before or by Nomad's events, never by a tick.
func TestEventApply_HooksAndHealthMoveWithoutTheEngineTick(t *testing.T) {
	t.Parallel()
	e := hkStart(t, map[string]string{
		"web.nomad.hcl": testutil.ServiceJobHCL("web", hkManaged(structs.PolicyAuto,
			testutil.WithMeta("nops_pre_hooks", "backup"), testutil.WithMeta("nops_post_hooks", "notify"))...),
		"backup.nomad.hcl": testutil.HookJobHCL("backup"),
		"notify.nomad.hcl": testutil.HookJobHCL("notify"),
	}, nopstest.WithConfig(func(c *config.Config) {
		c.EngineInterval, c.DriftInterval, c.NomadEventStream = noTick, noTick, true
	}))
	d := e.s.WaitForDeployment("default", "web", structs.StateCompleted, eventStepBudget)
	if !e.s.Manager().WatchingEvents() {
		t.Fatal("the deployment completed but the event stream is not up")
	}
	if took := d.UpdatedAt.Sub(d.CreatedAt); took > eventStepBudget {
		t.Fatalf("the deployment took %s", took)
	}
	pre, post := hookRun(t, d, structs.PhasePre, 0), hookRun(t, d, structs.PhasePost, 0)
	if pre.State != structs.HookRunSucceeded || post.State != structs.HookRunSucceeded {
		t.Fatalf("runs: pre %+v post %+v", pre, post)
	}
	if !d.Registered || post.StartedAt.Before(pre.FinishedAt) {
		t.Fatalf("registered %v; pre finished %s, post started %s", d.Registered, pre.FinishedAt, post.StartedAt)
	}
	// Each step started right after the one before ended, not a tick later.
	if gap := post.StartedAt.Sub(pre.FinishedAt); gap > eventStepBudget {
		t.Fatalf("%s between the pre-hook's end and the post-hook's start", gap)
	}
}

// attempts records the deployment writes a manager tried.
type attempts struct {
	mu   sync.Mutex
	list []string
}

func (a *attempts) add(s string) {
	a.mu.Lock()
	a.list = append(a.list, s)
	a.mu.Unlock()
}

func (a *attempts) has(s string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.list {
		if x == s {
			return true
		}
	}
	return false
}

// eventManager is a manager whose loops move only on events (engine and
// drift intervals of an hour).
func eventManager(t *testing.T, srv reconcile.Server, nomadAddr, repoURL string) *reconcile.Manager {
	nc, err := nomadx.New(nomadx.Config{Address: nomadAddr}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gitwatch.New([]gitwatch.RepoConfig{{Name: "main", URL: repoURL, Branch: "main", Path: jobsDir,
		PollInterval: noTick}}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return reconcile.New(reconcile.Config{DriftInterval: noTick, EngineInterval: noTick,
		Defaults: meta.Defaults{Policy: structs.PolicyAuto, ApplyTimeout: 2 * time.Minute, HookTimeout: time.Minute}},
		srv, nc, gw, nopstest.Logger("deposed"))
}

// TestEventApply_DeposedLeaderWatchDrivesNothing: the loops of a server
// that is no longer the leader (here: a follower of a real three-server
// cluster running them, as a deposed leader does until it sees the loss)
// see Nomad report a deployment's job healthy on the event stream and try
// to move it, but the transition goes through Raft and fails: the
// replicated deployment stays where it was on every server.
func TestEventApply_DeposedLeaderWatchDrivesNothing(t *testing.T) {
	t.Parallel()
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyAuto)...)
	nomad, repo := startWorld(t, map[string]string{jobFile("web"): hcl})
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithNomad(nomad.Addr))
	leader := c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]

	// The replicated state: web registered (version 0), waiting for health.
	d := &structs.Deployment{ID: "0e0e0e0e-0000-4000-8000-000000000001", Namespace: "default", JobID: "web",
		Repository: "main", Commit: repo.Head(), File: jobFile("web"), Policy: structs.PolicyAuto,
		State: structs.StateDetected, SpecHash: "seeded", Spec: []byte("{}"), ApplyTimeout: 2 * time.Minute}
	apply := func(typ structs.MessageType, req any) {
		t.Helper()
		if _, err := leader.Apply(typ, req); err != nil {
			t.Fatalf("apply %s: %v", typ, err)
		}
	}
	apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: seedMeta(), Deployment: d})
	apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{WriteMeta: seedMeta(), ID: d.ID,
		From: structs.StateDetected, To: structs.StateApplying, Message: "seeded"})
	now, reg, v := time.Now().UTC(), true, uint64(0)
	deadline := now.Add(2 * time.Minute)
	apply(structs.DeploymentUpdateRequestType, &structs.DeploymentUpdateRequest{WriteMeta: seedMeta(), ID: d.ID,
		State: structs.StateApplying, Update: &structs.DeploymentPatch{RegisterStartedAt: &now, Registered: &reg,
			JobVersion: &v, HealthDeadline: &deadline, Message: "seeded: registered"}})
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		got, err := follower.State().Deployment(d.ID)
		return err == nil && got != nil && got.Registered, fmt.Errorf("the follower has not applied the seed: %v", err)
	})

	var tried attempts
	srv := &wrapSrv{s: follower, onApply: func(typ structs.MessageType, req any) error {
		switch r := req.(type) {
		case *structs.DeploymentTransitionRequest:
			if r.ID == d.ID {
				tried.add("to " + string(r.To))
			}
		case *structs.DeploymentUpdateRequest:
			if r.ID == d.ID && r.Update != nil && r.Update.NomadDeploymentID != nil {
				tried.add("record the Nomad deployment")
			}
		}
		return nil
	}}
	m := eventManager(t, srv, nomad.Addr, repo.URL())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx, nil); close(done) }()
	defer func() { cancel(); <-done }()
	testutil.WaitForResult(t, scenarioWait, func() (bool, error) {
		return m.WatchingEvents(), fmt.Errorf("the deposed manager's event stream is not up")
	})

	// Nomad runs web and reports its deployment: the deposed manager's
	// watch sees it and tries to record it (the step before a completion),
	// which Raft refuses, so it goes no further.
	job := nomad.RegisterJobHCL(t, hcl)
	nomad.WaitForDeployment(t, job, "successful")
	testutil.WaitForResult(t, scenarioWait, func() (bool, error) {
		return tried.has("record the Nomad deployment"), fmt.Errorf("no write tried after Nomad's events: %v", tried.list)
	})
	if tried.has("to " + string(structs.StateCompleted)) {
		t.Fatalf("a completion was tried past a refused write: %v", tried.list)
	}
	for _, s := range c.Servers() {
		got, err := s.State().Deployment(d.ID)
		if err != nil || got == nil || got.State != structs.StateApplying || got.NomadDeploymentID != "" {
			t.Fatalf("server %s: deployment %+v (%v), want it still applying", s.Config().NodeName, got, err)
		}
	}
}
