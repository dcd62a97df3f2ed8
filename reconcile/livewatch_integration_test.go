package reconcile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// liveDriftBudget is how soon a hand change must show, with a one-hour
// drift interval: only the event stream can make it.
const liveDriftBudget = 5 * time.Second

// TestLiveDrift_HandChangeSeenAtOnce: with a one-hour drift interval, the
// leader makes no Nomad request while nothing changes, and a change made
// to a managed job in Nomad shows as drift, with a new deployment, within
// seconds.
func TestLiveDrift_HandChangeSeenAtOnce(t *testing.T) {
	t.Parallel()
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyApproval)...)
	e := lcWorld(t, map[string]string{jobFile("web"): hcl})
	e.nomad.RegisterJobHCL(t, hcl)
	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) { c.DriftInterval = time.Hour }))
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	m := e.s.Manager()
	e.waitFor(func() (bool, string) { return m.WatchingEvents(), "the event stream is not up" })
	e.settle()

	// Idle: no polling.
	before := m.Nomad().Stats()
	idle := 3 * time.Second
	time.Sleep(idle)
	if d := m.Nomad().Stats().Sub(before); d.Requests != 0 {
		t.Fatalf("idle for %s with the event stream up, the leader made Nomad requests: %s", idle, d)
	}

	// A change by hand.
	start := time.Now()
	reg := e.nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithMeta("by", "hand"))...))
	testutil.WaitForResult(t, liveDriftBudget, func() (bool, error) {
		st := e.jobStatus("web")
		if st.Sync != structs.SyncDrift || st.LiveModifyIndex != reg.JobModifyIndex {
			return false, fmt.Errorf("status %s at modify index %d, want drift at %d", st.Sync, st.LiveModifyIndex, reg.JobModifyIndex)
		}
		return true, nil
	})
	t.Logf("hand register to drift: %s", time.Since(start).Round(time.Millisecond))
	d := e.s.WaitForDeployment("default", "web", structs.StatePendingApproval, liveDriftBudget)
	if d.JobModifyIndex != reg.JobModifyIndex {
		t.Fatalf("deployment against modify index %d, hand register at %d", d.JobModifyIndex, reg.JobModifyIndex)
	}

	// Nops's own register does not keep the stream busy: once the job is
	// back in sync, the leader is idle again.
	e.post("/v1/deployment/"+d.ID+"/approve", nil)
	e.waitDeployment(d.ID, structs.StateCompleted)
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	e.settle()
	before = m.Nomad().Stats()
	time.Sleep(idle)
	if d := m.Nomad().Stats().Sub(before); d.Requests != 0 {
		t.Fatalf("idle again for %s, the leader made Nomad requests: %s", idle, d)
	}
}

// TestLiveDrift_StreamBreaksFallsBackAndResumes: when Nomad closes the event
// stream and refuses a new one (here: the token is deleted, and the token
// file now holds one without read-job, which the stream needs and the
// detection of a plain job does not), the leader falls back to the drift
// interval and still sees a hand change; once the file holds a token that
// may read again, it resubscribes by itself, and an idle leader makes no
// request again.
func TestLiveDrift_StreamBreaksFallsBackAndResumes(t *testing.T) {
	t.Parallel()
	nomad := testutil.StartNomad(t, testutil.WithACL())
	policy := nomadPolicy(t)
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyNone)...)
	e := &lcEnv{world{t: t, nomad: nomad, repo: testutil.NewGitRepo(t)}}
	commitFiles(e.repo, "jobs", map[string]string{jobFile("web"): hcl})
	nomad.RegisterJobHCL(t, hcl)
	tokenFile := filepath.Join(t.TempDir(), "nomad-token")
	writeToken := func(secret string) {
		t.Helper()
		if err := os.WriteFile(tokenFile, []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeToken(nomad.ACLToken(t, "nops", policy, ""))
	const drift = 2 * time.Second
	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) { c.NomadTokenFile, c.DriftInterval = tokenFile, drift }))
	m := e.s.Manager()
	e.waitStatus("web", func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	e.waitFor(func() (bool, string) { return m.WatchingEvents(), "the event stream is not up" })

	// Nomad closes the stream (its token is deleted) and refuses a new
	// one (the new token may not read jobs).
	writeToken(nomad.ACLToken(t, "nops-no-read", without(t, policy, "read-job"), ""))
	deleteToken(t, nomad, "nops")
	e.waitFor(func() (bool, string) { return !m.WatchingEvents(), "the event stream is still up" })
	reg := nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web", managed(structs.PolicyNone, testutil.WithMeta("by", "hand"))...))
	start := time.Now()
	e.waitStatus("web", func(s *structs.JobStatus) bool {
		return s.Sync == structs.SyncDrift && s.LiveModifyIndex == reg.JobModifyIndex
	})
	if took := time.Since(start); took > 3*drift {
		t.Fatalf("without the stream the change took %s to show, drift interval %s", took, drift)
	}
	if m.WatchingEvents() {
		t.Fatal("the event stream came back without read-job")
	}

	// A token that may read: the leader resubscribes (backoff at most 30s).
	writeToken(nomad.ACLToken(t, "nops-again", policy, ""))
	testutil.WaitForResult(t, 45*time.Second, func() (bool, error) {
		return m.WatchingEvents(), fmt.Errorf("the event stream is not back")
	})
	e.settle()
	before := m.Nomad().Stats()
	time.Sleep(2 * drift)
	// Nothing but the check of Nomad's version, once a drift interval.
	if d := m.Nomad().Stats().Sub(before); d.Requests != d.Operations["agent.members"].Requests || d.Requests > 3 || d.Errors != 0 {
		t.Fatalf("idle for %s with the stream back, the leader made Nomad requests: %s", 2*drift, d)
	}
	// And a change shows through it again.
	reg = nomad.RegisterJobHCL(t, hcl)
	testutil.WaitForResult(t, liveDriftBudget, func() (bool, error) {
		st := e.jobStatus("web")
		if st.Sync != structs.SyncInSync || st.LiveModifyIndex != reg.JobModifyIndex {
			return false, fmt.Errorf("status %s at %d, want in_sync at %d", st.Sync, st.LiveModifyIndex, reg.JobModifyIndex)
		}
		return true, nil
	})
}

// deleteToken deletes the ACL tokens named name.
func deleteToken(t *testing.T, nomad *testutil.NomadAgent, name string) {
	t.Helper()
	list, _, err := nomad.Client.ACLTokens().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list {
		if tok.Name == name {
			if _, err := nomad.Client.ACLTokens().Delete(tok.AccessorID, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestLiveDrift_NewLeaderWatchesToo: in a three-server cluster, only the
// leader watches the event stream; after it dies, the new leader starts
// its own, and a hand change (one made during the failover, one after)
// still shows at once with a one-hour drift interval.
func TestLiveDrift_NewLeaderWatchesToo(t *testing.T) {
	t.Parallel()
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyNone)...)
	nomad, repo := startWorld(t, map[string]string{jobFile("web"): hcl})
	nomad.RegisterJobHCL(t, hcl)
	opts := append(serverOptions(nomad, repo.URL()), nopstest.WithConfig(func(c *config.Config) { c.DriftInterval = time.Hour }))
	c := nopstest.StartCluster(t, 3, opts...)
	leader := c.WaitForLeader(30 * time.Second)
	leader.WaitForJobStatus("default", "web", lcWait, func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		return leader.Manager().WatchingEvents(), fmt.Errorf("the leader's event stream is not up")
	})
	for _, f := range c.Followers() {
		if f.Manager().WatchingEvents() {
			t.Fatalf("follower %s watches the event stream", f.Config().NodeName)
		}
	}

	c.Kill(c.Index(leader))
	during := nomad.RegisterJobHCL(t, testutil.ServiceJobHCL("web", managed(structs.PolicyNone, testutil.WithMeta("by", "hand"))...))
	next := c.WaitForLeader(30 * time.Second)
	next.WaitForJobStatus("default", "web", lcWait, func(s *structs.JobStatus) bool {
		return s.Sync == structs.SyncDrift && s.LiveModifyIndex == during.JobModifyIndex
	})
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		return next.Manager().WatchingEvents(), fmt.Errorf("the new leader's event stream is not up")
	})

	after := nomad.RegisterJobHCL(t, hcl)
	next.WaitForJobStatus("default", "web", liveDriftBudget, func(s *structs.JobStatus) bool {
		return s.Sync == structs.SyncInSync && s.LiveModifyIndex == after.JobModifyIndex
	})
}

// TestLiveDrift_EveryManagedNamespace: with two managed namespaces, a hand
// change in either shows at once (one stream per namespace).
func TestLiveDrift_EveryManagedNamespace(t *testing.T) {
	t.Parallel()
	nomad := testutil.StartNomad(t)
	if _, err := nomad.Client.Namespaces().Register(&nomadapi.Namespace{Name: "team"}, nil); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	web := testutil.ServiceJobHCL("web", managed(structs.PolicyNone)...)
	api := testutil.ServiceJobHCL("api", managed(structs.PolicyNone, testutil.WithNamespace("team"))...)
	e := &lcEnv{world{t: t, nomad: nomad, repo: testutil.NewGitRepo(t)}}
	commitFiles(e.repo, "jobs", map[string]string{jobFile("web"): web, jobFile("api"): api})
	nomad.RegisterJobHCL(t, web)
	nomad.RegisterJobHCL(t, api)
	e.serve(e.repo.URL(), nopstest.WithConfig(func(c *config.Config) {
		c.DriftInterval, c.Namespaces = time.Hour, []string{"default", "team"}
	}))
	m := e.s.Manager()
	for _, st := range []struct{ ns, id string }{{"default", "web"}, {"team", "api"}} {
		e.s.WaitForJobStatus(st.ns, st.id, lcWait, func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	}
	e.waitFor(func() (bool, string) { return m.WatchingEvents(), "the event streams are not up" })
	e.settle()

	for _, c := range []struct{ ns, id string }{{"team", "api"}, {"default", "web"}} {
		reg := nomad.RegisterJobHCL(t, testutil.ServiceJobHCL(c.id, managed(structs.PolicyNone,
			testutil.WithNamespace(c.ns), testutil.WithMeta("by", "hand"))...))
		e.s.WaitForJobStatus(c.ns, c.id, liveDriftBudget, func(s *structs.JobStatus) bool {
			return s.Sync == structs.SyncDrift && s.LiveModifyIndex == reg.JobModifyIndex
		})
	}
}
