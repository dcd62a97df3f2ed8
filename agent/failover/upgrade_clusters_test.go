package failover_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// singleClusterDataDir is the data dir of a single server written by the
// release before many Nomad clusters (commit d4351c9, built with `go build
// ./cmd/nops` at that commit), as `tar -czf` of the data dir (node ID,
// serf keyring, Raft log and snapshots). That server ran as `nops serve`
// through nopstest.StartProcessCluster (node nops-1, -insecure-rpc,
// -raft-snapshot-threshold 16, -raft-snapshot-interval 1s) against a
// Nomad dev agent and a git repository (-repo <url>#main:jobs, named
// "repo") holding jobs web, api, worker (policy auto), db (policy
// approval) and broken (policy auto, a task that fails). It left:
//
//   - completed deployments of web, worker and api (two of api: a later
//     commit scaled it), a deployment of db pending approval and a failed
//     deployment of broken, which blocks broken;
//   - a pause of worker ("frozen before the upgrade"), in the last Raft
//     snapshot (snapshot format 3, without clusters);
//   - a deny window "leap-day", written after that snapshot: in the log
//     only.
const singleClusterDataDir = "testdata/single-cluster-d4351c9.tar.gz"

// TestUpgrade_SingleClusterDataDir: the current build, started on the
// data dir of a single-cluster release, keeps every deployment, pause,
// block and window it wrote, each in cluster "default" (SPEC section 16),
// from its snapshot and from its log; job routes answer without
// ?cluster=, and new writes go through.
//
// The server runs against a fresh Nomad agent and a repository it cannot
// fetch, so that no detection changes what the old release left: what the
// test reads is the upgraded state, not a new cycle's.
func TestUpgrade_SingleClusterDataDir(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if raw, err := exec.Command("tar", "-C", dataDir, "-xzf", singleClusterDataDir).CombinedOutput(); err != nil {
		t.Fatalf("extract %s: %v\n%s", singleClusterDataDir, err, raw)
	}
	rpcPort := raftPort(t, dataDir)
	nomad := testutil.StartNomad(t)
	// The old server's data dir in place of the cluster's fresh one, and
	// its Raft address, as an operator upgrades a server in place.
	setup := func(p *nopstest.Process, args []string) ([]string, error) {
		out := slices.Clone(args)
		for flag, v := range map[string]string{"-data-dir": dataDir, "-rpc-port": strconv.Itoa(rpcPort)} {
			i := slices.Index(out, flag)
			if i < 0 || i+1 >= len(out) {
				return nil, fmt.Errorf("no %s in %v", flag, args)
			}
			out[i+1] = v
		}
		p.RPCPort, p.RPCAddr = rpcPort, fmt.Sprintf("127.0.0.1:%d", rpcPort)
		return out, nil
	}
	// A closed port: every fetch fails at once.
	repo := "http://127.0.0.1:1/jobs.git#main:jobs"
	c := nopstest.StartProcessClusterWith(t, 1, nomad.Addr, repo, setup, "-insecure-rpc")
	s := c.Server(c.Leader())
	call := func(method, path string, body, out any) {
		t.Helper()
		code, raw, err := s.Call(method, path, body, out)
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s %s: %d %s %v", method, path, code, raw, err)
		}
	}

	var deps []*structs.Deployment
	call("GET", "/v1/deployments", nil, &deps)
	got := map[string][]structs.DeploymentState{}
	for _, d := range deps {
		if d.Cluster != structs.DefaultCluster {
			t.Errorf("deployment %s of %s has cluster %q, want %q", d.ID, d.JobID, d.Cluster, structs.DefaultCluster)
		}
		got[d.JobID] = append(got[d.JobID], d.State)
	}
	want := map[string][]structs.DeploymentState{
		"web":    {structs.StateCompleted},
		"worker": {structs.StateCompleted},
		"api":    {structs.StateCompleted, structs.StateCompleted},
		"db":     {structs.StatePendingApproval},
		"broken": {structs.StateFailed},
	}
	for id, states := range want {
		if !slices.Equal(got[id], states) {
			t.Errorf("deployments of %s: %v, want %v", id, got[id], states)
		}
	}
	if len(got) != len(want) {
		t.Errorf("deployments of jobs %v, want those of %d jobs", got, len(want))
	}
	// The list filtered by cluster holds them all.
	var inDefault []*structs.Deployment
	call("GET", "/v1/deployments?cluster=default", nil, &inDefault)
	if len(inDefault) != len(deps) {
		t.Errorf("%d deployments in cluster default, %d in all", len(inDefault), len(deps))
	}

	// Job routes without ?cluster=: the pause, the block, the pending
	// approval.
	job := func(id string) *structs.JobDetail {
		t.Helper()
		var d structs.JobDetail
		call("GET", "/v1/job/default/"+id, nil, &d)
		if d.Status == nil || d.Status.Cluster != structs.DefaultCluster {
			t.Fatalf("job %s: status %+v, want one of cluster default", id, d.Status)
		}
		return &d
	}
	if d := job("worker"); d.Pause == nil || d.Pause.Reason != "frozen before the upgrade" || d.Pause.Cluster != structs.DefaultCluster {
		t.Errorf("worker's pause: %+v, want the old release's, in cluster default", d.Pause)
	}
	if d := job("broken"); d.Block == nil || d.Block.Cluster != structs.DefaultCluster || !d.Status.Blocked {
		t.Errorf("broken's block: %+v (blocked %t), want the failed deployment's, in cluster default", d.Block, d.Status.Blocked)
	}
	if d := job("db"); d.ActiveDeployment == nil || d.ActiveDeployment.State != structs.StatePendingApproval || d.ActiveDeployment.Cluster != structs.DefaultCluster {
		t.Errorf("db's active deployment: %+v, want pending approval in cluster default", d.ActiveDeployment)
	}
	if d := job("web"); d.LastDeployment == nil || d.LastDeployment.State != structs.StateCompleted || d.Pause != nil || d.Block != nil {
		t.Errorf("web: last deployment %+v, pause %+v, block %+v", d.LastDeployment, d.Pause, d.Block)
	}

	var pauses []*structs.Pause
	call("GET", "/v1/pauses", nil, &pauses)
	if len(pauses) != 1 || pauses[0].JobID != "worker" || pauses[0].Cluster != structs.DefaultCluster {
		t.Errorf("pauses: %+v, want worker's in cluster default", pauses)
	}
	// The window, written after the last snapshot: from the log.
	var w structs.SyncWindow
	call("GET", "/v1/window/leap-day", nil, &w)
	if w.Kind != structs.WindowDeny || w.Schedule != "0 3 29 2 *" {
		t.Errorf("window leap-day: %+v", w)
	}

	// A new write: pause another job, without ?cluster=.
	call("POST", "/v1/job/default/web/pause", map[string]string{"reason": "after the upgrade"}, nil)
	if d := job("web"); d.Pause == nil || d.Pause.Reason != "after the upgrade" || d.Pause.Cluster != structs.DefaultCluster {
		t.Errorf("web's new pause: %+v, want one in cluster default", d.Pause)
	}
	call("GET", "/v1/pauses", nil, &pauses)
	if len(pauses) != 2 {
		t.Errorf("pauses after the new one: %+v, want worker's and web's", pauses)
	}
}

// raftPort returns the port of the Raft address the data dir's newest
// snapshot names for its one server.
func raftPort(t *testing.T, dataDir string) int {
	t.Helper()
	metas, err := filepath.Glob(filepath.Join(dataDir, "raft", "snapshots", "*", "meta.json"))
	if err != nil || len(metas) == 0 {
		t.Fatalf("no Raft snapshot in %s: %v", dataDir, err)
	}
	raw, err := os.ReadFile(metas[len(metas)-1])
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Configuration struct{ Servers []struct{ Address string } }
	}
	if err := json.Unmarshal(raw, &meta); err != nil || len(meta.Configuration.Servers) != 1 {
		t.Fatalf("snapshot meta %s: %v, servers %+v", metas[len(metas)-1], err, meta.Configuration.Servers)
	}
	_, port, err := net.SplitHostPort(meta.Configuration.Servers[0].Address)
	n, err2 := strconv.Atoi(port)
	if err != nil || err2 != nil {
		t.Fatalf("Raft address %q: %v %v", meta.Configuration.Servers[0].Address, err, err2)
	}
	return n
}
