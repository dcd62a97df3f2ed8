package reconcile_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestTaskAPI_NopsRunsAsANomadJob runs the built nops binary as a Nomad job
// (raw_exec), from the job file shipped in docs/, in a Nomad with ACLs. Nops
// is given no address and no token: it talks to Nomad through its task's
// Task API socket, with an ACL token of the shipped policy that its task
// renders from the job's own Nomad Variable. It deploys a managed job from
// a git repository; then the token is rotated (a new one in the variable,
// the old one deleted) and the next commit deploys with no restart.
func TestTaskAPI_NopsRunsAsANomadJob(t *testing.T) {
	t.Parallel()
	bin := testutil.NopsBinary(t)
	// A unix socket path is limited to about 100 bytes: the allocations
	// live under a short directory, not under t.TempDir().
	allocDir, err := os.MkdirTemp("/tmp", "nwi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(allocDir) })
	nomad := testutil.StartNomad(t, testutil.WithACL(), testutil.WithNomadConfig(fmt.Sprintf("client {\n  alloc_dir = %q\n}\n", allocDir)))

	repo := testutil.NewGitRepo(t)
	commitFiles(repo, "jobs", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("release", "1"))...),
	})
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	jobHCL, err := os.ReadFile(filepath.Join(root, "docs", "nops.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	ports := testutil.FreePorts(t, 3)
	vars := fmt.Sprintf(`
repository  = %q
nops_binary = %q
driver      = "raw_exec"
http_port   = %d
serve_args  = ["-data-dir", "$${NOMAD_ALLOC_DIR}/data", "-bootstrap-expect", "1", "-bind", "127.0.0.1", "-advertise", "127.0.0.1",
               "-rpc-port", "%d", "-serf-port", "%d", "-log-level", "debug", "-drift-interval", "1h"]
`, repo.URL()+"#main:"+jobsDir, bin, ports[0], ports[1], ports[2])
	job, err := nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(jobHCL), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse docs/nops.nomad.hcl: %v", err)
	}
	// The variable holds what the job renders: the Nomad token, and the
	// gossip key and RPC TLS material a server needs outside -dev.
	pki := nopstest.NewTLS(t, "")
	items := nomadapi.VariableItems{"encrypt": nopstest.GossipKey}
	for name, file := range map[string]string{"ca": pki.CAFile, "cert": pki.ServerCertFile, "key": pki.ServerKeyFile} {
		pem, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		items[name] = string(pem)
	}
	setToken := func(name string) {
		items["token"] = nomad.ACLToken(t, name, nomadPolicy(t), "")
		v := &nomadapi.Variable{Path: "nomad/jobs/nops", Items: items}
		if _, _, err := nomad.Client.Variables().Update(v, nil); err != nil {
			t.Fatalf("write the token variable: %v", err)
		}
	}
	setToken("nops")

	// The job is stopped and its task gone before the agent stops, so no
	// nops process outlives the test.
	t.Cleanup(func() { stopNopsJob(t, nomad, allocDir) })
	if _, _, err := nomad.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register the nops job: %v", err)
	}

	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		var d struct {
			Status *structs.JobStatus `json:"status"`
		}
		if err := getJSON(base+"/v1/job/default/web", &d); err != nil {
			return false, err
		}
		if d.Status == nil || d.Status.Sync != structs.SyncInSync {
			return false, fmt.Errorf("web status: %+v", d.Status)
		}
		return true, nil
	})
	web := lookupNomadJob(t, nomad, "web")
	if web == nil || web.Meta["release"] != "1" {
		t.Fatalf("Nomad job web: %+v", web)
	}

	allocs, _, err := nomad.Client.Jobs().Allocations("nops", false, nil)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations of nops: %v %v", allocs, err)
	}
	allocID := allocs[0].ID

	// Rotation: a new token in the variable, the old one deleted.
	setToken("nops-2")
	list, _, err := nomad.Client.ACLTokens().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range list {
		if tok.Name == "nops" {
			if _, err := nomad.Client.ACLTokens().Delete(tok.AccessorID, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The next commit deploys with the new token.
	commitFiles(repo, "release 2", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyAuto, testutil.WithMeta("release", "2"))...),
	})
	// The repository of -repo is named "repo".
	if code, err := post(base + "/v1/repo/repo/refresh"); err != nil || code != 200 {
		t.Fatalf("refresh: %d %v", code, err)
	}
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		j := lookupNomadJob(t, nomad, "web")
		if j == nil || j.Meta["release"] != "2" {
			return false, fmt.Errorf("web not at release 2 yet")
		}
		return true, nil
	})
	a, _, err := nomad.Client.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ts := a.TaskStates["nops"]; a.ClientStatus != nomadapi.AllocClientStatusRunning || ts == nil || ts.Restarts != 0 {
		t.Fatalf("the nops task restarted or stopped: %s %+v", a.ClientStatus, ts)
	}
	// It ran as a production server: gossip encrypted, RPC over mutual TLS.
	var self structs.AgentSelf
	if err := getJSON(base+"/v1/agent/self", &self); err != nil || self.Dev {
		t.Fatalf("agent self: %+v %v", self, err)
	}
}

// stopNopsJob purges the nops job and waits until its allocation stopped.
// On failure it prints the task's log.
func stopNopsJob(t *testing.T, nomad *testutil.NomadAgent, allocDir string) {
	allocs, _, _ := nomad.Client.Jobs().Allocations("nops", true, nil)
	if t.Failed() {
		for _, a := range allocs {
			for _, stream := range []string{"stderr", "stdout"} {
				p := filepath.Join(allocDir, a.ID, "alloc", "logs", "nops."+stream+".0")
				t.Logf("nops task %s (%s):\n%s", stream, a.ID, testutil.TailFile(p, 60))
			}
		}
	}
	if _, _, err := nomad.Client.Jobs().Deregister("nops", true, nil); err != nil {
		t.Errorf("stop the nops job: %v", err)
		return
	}
	testutil.WaitForResult(t, time.Minute, func() (bool, error) {
		for _, a := range allocs {
			info, _, err := nomad.Client.Allocations().Info(a.ID, nil)
			if err != nil {
				return false, err
			}
			if info.ClientStatus == nomadapi.AllocClientStatusRunning || info.ClientStatus == nomadapi.AllocClientStatusPending {
				return false, fmt.Errorf("allocation %s of nops is %s", a.ID, info.ClientStatus)
			}
		}
		return true, nil
	})
}

func post(url string) (int, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
