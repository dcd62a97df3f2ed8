package failover_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// oldVersion is the version the older build of the upgrade test claims:
// older than the first version that knows the autopilot configuration
// entry.
const oldVersion = "0.1.0"

// buildOldNops builds the code under test as version oldVersion, as a
// release before this one would be.
func buildOldNops(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		t.Fatalf("find the module root: %v", err)
	}
	out := filepath.Join(t.TempDir(), "nops-"+oldVersion)
	cmd := exec.Command("go", "build", "-ldflags", "-X github.com/nops-dev/nops/agent.Version="+oldVersion, "-o", out, "./cmd/nops")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if raw, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build nops %s: %v\n%s", oldVersion, err, raw)
	}
	return out
}

// writeProbe writes through the cluster (a pause, then a resume, of a job
// no one deploys) every 100ms, to any running server, and records the
// longest time no write succeeded.
type writeProbe struct {
	mu       sync.Mutex
	last     time.Time
	longest  time.Duration
	writes   int
	refusals []string
	stop     chan struct{}
	done     chan struct{}
}

func startWriteProbe(c *nopstest.ProcessCluster) *writeProbe {
	p := &writeProbe{last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			action := "pause"
			if n%2 == 1 {
				action = "resume"
			}
			ok := false
			var errs []string
			for _, i := range c.Running() {
				code, body, err := c.Server(i).Call(http.MethodPost, "/v1/job/default/upgrade-probe/"+action, map[string]string{"reason": "upgrade probe"}, nil)
				if err == nil && code == http.StatusOK {
					ok = true
					break
				}
				errs = append(errs, fmt.Sprintf("%s: %d %v %.100s", c.Server(i).Name, code, err, body))
			}
			now := time.Now()
			p.mu.Lock()
			if ok {
				if gap := now.Sub(p.last); gap > p.longest {
					p.longest = gap
				}
				p.last = now
				p.writes++
			} else if len(p.refusals) < 20 {
				p.refusals = append(p.refusals, now.Format("15:04:05.000")+" "+strings.Join(errs, "; "))
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *writeProbe) finish() (longest time.Duration, writes int, refusals []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if gap := time.Since(p.last); gap > p.longest {
		p.longest = gap
	}
	return p.longest, p.writes, p.refusals
}

// serverVersions returns the version each running server reports.
func serverVersions(t *testing.T, c *nopstest.ProcessCluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, i := range c.Running() {
		self, err := c.Server(i).Self()
		if err != nil {
			t.Fatal(err)
		}
		out[c.Server(i).Name] = self.Version
	}
	return out
}

// waitVoters waits until the Raft configuration has every server as a
// voter (a restarted server rejoins as a non-voter; autopilot promotes
// it once stable).
func waitVoters(t *testing.T, c *nopstest.ProcessCluster) {
	t.Helper()
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		leader, err := c.LeaderIndex()
		if err != nil {
			return false, err
		}
		var conf structs.RaftConfiguration
		if _, _, err := c.Server(leader).Call(http.MethodGet, "/v1/operator/raft/configuration", nil, &conf); err != nil {
			return false, err
		}
		voters := 0
		for _, s := range conf.Servers {
			if s.Voter {
				voters++
			}
		}
		return voters == c.Len() && len(conf.Servers) == c.Len(), fmt.Errorf("raft configuration %+v", conf.Servers)
	})
}

// A 3-server cluster of the older build is upgraded to this one, one
// server at a time, while deployments run: the autopilot configuration
// entry, new in this version, is refused until every server runs it, no
// state is lost, and writes are never refused for longer than an election.
func TestRollingUpgrade(t *testing.T) {
	newBin := testutil.NopsBinary(t)
	oldBin := buildOldNops(t)
	t.Setenv(testutil.EnvNopsBin, oldBin)
	cfgFile := filepath.Join(t.TempDir(), "autopilot.hcl")
	if err := os.WriteFile(cfgFile, []byte("autopilot {\n  server_stabilization_time = \"3s\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	version := 1
	job := func() string {
		return managedJob("web", structs.PolicyAuto, testutil.WithMeta("build", fmt.Sprint(version)))
	}
	f := newFixture(t, map[string]string{"jobs/web.nomad.hcl": job()}, "-config", cfgFile, "-drift-interval", "2s")
	c := f.cluster
	leader := c.Leader()
	first := c.Server(leader).WaitForDeployment(namespace, "web", deployTimeout, nopstest.InState(structs.StateCompleted))
	for name, v := range serverVersions(t, c) {
		if v != oldVersion {
			t.Fatalf("%s runs %s, want %s", name, v, oldVersion)
		}
	}

	apConf := structs.AutopilotConfiguration{CleanupDeadServers: true, LastContactThreshold: "500ms", MaxTrailingLogs: 500,
		MinQuorum: 3, ServerStabilizationTime: "3s"}
	code, body, _ := c.Server(leader).Call(http.MethodPut, "/v1/operator/autopilot/configuration", apConf, nil)
	if code != http.StatusConflict || !strings.Contains(string(body), "nops-1 ("+oldVersion+")") ||
		!strings.Contains(string(body), "0.2.0") {
		t.Fatalf("autopilot configuration on old servers: %d %s; want 409 naming the servers too old", code, body)
	}

	probe := startWriteProbe(c)
	deployments := []string{first.ID}
	// Followers first, the leader last, as an operator upgrades.
	order := append(c.Followers(), c.Leader())
	for step, i := range order {
		start := time.Now()
		version++
		f.repo.WriteFile("jobs/web.nomad.hcl", job())
		commit := f.repo.Commit(fmt.Sprintf("build %d", version))

		c.Stop(i)
		c.RestartWith(i, newBin)
		c.WaitForCluster()
		waitVoters(t, c)
		t.Logf("step %d: %s upgraded and a voter again in %s", step+1, c.Server(i).Name, time.Since(start).Round(time.Millisecond))

		if step < len(order)-1 {
			code, body, _ := c.Server(c.Leader()).Call(http.MethodPut, "/v1/operator/autopilot/configuration", apConf, nil)
			if code != http.StatusConflict {
				t.Fatalf("autopilot configuration with %d old servers: %d %s", len(order)-1-step, code, body)
			}
		}
		d := c.Server(c.Leader()).WaitForDeployment(namespace, "web", deployTimeout, func(d *structs.Deployment) error {
			if d.Commit != commit {
				return fmt.Errorf("deployment of commit %s, want %s (build %d)", d.Commit, commit, version)
			}
			return nopstest.InState(structs.StateCompleted)(d)
		})
		deployments = append(deployments, d.ID)
	}
	longest, writes, refusals := probe.finish()
	t.Logf("writes: %d succeeded; the longest time without a successful write was %s", writes, longest.Round(time.Millisecond))
	if longest > 10*time.Second {
		t.Errorf("no write succeeded for %s (more than an election); refusals:\n%s", longest, strings.Join(refusals, "\n"))
	}

	for name, v := range serverVersions(t, c) {
		if v != agent.Version {
			t.Errorf("%s runs %s after the upgrade, want %s", name, v, agent.Version)
		}
	}
	var got structs.AutopilotConfiguration
	leader = c.Leader()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		code, body, err := c.Server(leader).Call(http.MethodPut, "/v1/operator/autopilot/configuration", apConf, &got)
		return code == http.StatusOK, fmt.Errorf("autopilot configuration after the upgrade: %d %s %v", code, body, err)
	})
	for _, i := range c.Running() {
		var seen structs.AutopilotConfiguration
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			if _, _, err := c.Server(i).Call(http.MethodGet, "/v1/operator/autopilot/configuration", nil, &seen); err != nil {
				return false, err
			}
			return seen.MinQuorum == 3 && seen.ModifyIndex == got.ModifyIndex, fmt.Errorf("%s: %+v", c.Server(i).Name, seen)
		})
	}

	// No state lost: every server holds every deployment of the upgrade.
	sort.Strings(deployments)
	for _, i := range c.Running() {
		list, err := c.Server(i).Deployments(namespace, "web")
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, d := range list {
			have[d.ID] = true
		}
		for _, id := range deployments {
			if !have[id] {
				t.Errorf("%s lost deployment %s", c.Server(i).Name, id)
			}
		}
	}
}
