package reconcile_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// TestTaskAPI_NopsRunsAsANomadJob runs docs/nops.nomad.hcl, the job file
// the docs ship, unchanged (only its variables are given, as `nomad job run
// -var` gives them): the raw_exec driver, the built nops binary, and
// dynamic ports, since the three servers share the one client of a Nomad
// dev agent with ACLs. The job's variable holds what the docs tell an
// operator to write, made by the nops binary itself: `nops tls ca create`,
// `nops tls cert create -server`, `nops operator gossip keygen`, and a
// Nomad token of docs/nomad-policy.hcl.
//
// The three allocations find each other through the Nomad service their
// template reads, elect a leader and answer, over mutual TLS, with three
// voters; `nops acl bootstrap` gives the management token. Nops talks to
// Nomad through each task's Task API socket: it deploys a managed job from
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
	vars := fmt.Sprintf("repository = %q\nnops_binary = %q\ndriver = \"raw_exec\"\nhttp_port = 0\nrpc_port = 0\nserf_port = 0\n",
		repo.URL()+"#main:"+jobsDir, bin)
	job, err := nomad.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(jobHCL), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse docs/nops.nomad.hcl: %v", err)
	}

	// The material of the variable, as the docs make it.
	pki := t.TempDir()
	runNops(t, bin, pki, "tls", "ca", "create")
	runNops(t, bin, pki, "tls", "cert", "create", "-server")
	runNops(t, bin, pki, "tls", "cert", "create", "-cli")
	items := nomadapi.VariableItems{"encrypt": strings.TrimSpace(runNops(t, bin, pki, "operator", "gossip", "keygen"))}
	for name, file := range map[string]string{"ca": "nops-agent-ca.pem", "cert": "global-server-nops.pem", "key": "global-server-nops-key.pem"} {
		pem, err := os.ReadFile(filepath.Join(pki, file))
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

	// The job is stopped and its tasks gone before the agent stops, so no
	// nops process outlives the test.
	t.Cleanup(func() { stopNopsJob(t, nomad, allocDir) })
	if _, _, err := nomad.Client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register the nops job: %v", err)
	}

	// The three servers' API addresses, from the job's service "nops".
	var addrs []string
	testutil.WaitForResult(t, 2*time.Minute, func() (bool, error) {
		regs, _, err := nomad.Client.Services().Get("nops", nil)
		if err != nil {
			return false, err
		}
		addrs = addrs[:0]
		for _, r := range regs {
			addrs = append(addrs, fmt.Sprintf("https://%s:%d", r.Address, r.Port))
		}
		if len(addrs) != 3 {
			return false, fmt.Errorf("%d registrations of the nops service, want 3", len(addrs))
		}
		return true, nil
	})
	api := newMTLSClient(t, pki)

	// The cluster forms: ACL bootstrap through any server, then every
	// server answers with three voters and one leader.
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	testutil.WaitForResult(t, 2*time.Minute, func() (bool, error) {
		err := api.do("POST", addrs[0]+"/v1/acl/bootstrap", &boot)
		return err == nil, err
	})
	api.token = boot.SecretID
	// ACLs are on: without the token the operator API refuses.
	if err := (&mtlsClient{http: api.http}).do("GET", addrs[0]+"/v1/operator/raft/configuration", nil); err == nil {
		t.Errorf("%s answered the Raft configuration without a token", addrs[0])
	}
	for _, addr := range addrs {
		testutil.WaitForResult(t, time.Minute, func() (bool, error) {
			var cfg structs.RaftConfiguration
			if err := api.do("GET", addr+"/v1/operator/raft/configuration", &cfg); err != nil {
				return false, err
			}
			voters, leaders := 0, 0
			for _, s := range cfg.Servers {
				if s.Voter {
					voters++
				}
				if s.Leader {
					leaders++
				}
			}
			if voters != 3 || leaders != 1 {
				return false, fmt.Errorf("%s: %d voters and %d leaders in %+v", addr, voters, leaders, cfg.Servers)
			}
			return true, nil
		})
	}
	// Without a client certificate the API refuses the connection.
	if err := (&mtlsClient{http: plainTLSClient(t, pki)}).do("GET", addrs[1]+"/v1/health", nil); err == nil {
		t.Errorf("%s answered a client without a certificate", addrs[1])
	}

	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		var d struct {
			Status *structs.JobStatus `json:"status"`
		}
		if err := api.do("GET", addrs[1]+"/v1/job/default/web", &d); err != nil {
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
	if err := api.do("POST", addrs[2]+"/v1/repo/repo/refresh", nil); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	testutil.WaitForResult(t, 90*time.Second, func() (bool, error) {
		j := lookupNomadJob(t, nomad, "web")
		if j == nil || j.Meta["release"] != "2" {
			return false, fmt.Errorf("web not at release 2 yet")
		}
		return true, nil
	})
	allocs, _, err := nomad.Client.Jobs().Allocations("nops", false, nil)
	if err != nil || len(allocs) != 3 {
		t.Fatalf("allocations of nops: %d %v", len(allocs), err)
	}
	for _, stub := range allocs {
		a, _, err := nomad.Client.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ts := a.TaskStates["nops"]; a.ClientStatus != nomadapi.AllocClientStatusRunning || ts == nil || ts.Restarts != 0 {
			t.Fatalf("the nops task of %s restarted or stopped: %s %+v", a.ID, a.ClientStatus, ts)
		}
	}
	// They run as production servers, not -dev.
	var self structs.AgentSelf
	if err := api.do("GET", addrs[0]+"/v1/agent/self", &self); err != nil || self.Dev {
		t.Fatalf("agent self: %+v %v", self, err)
	}
}

// runNops runs the nops binary in dir and returns its standard output.
func runNops(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nops %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// mtlsClient calls the Nops API over TLS with the CLI certificate of
// `nops tls cert create -cli` and, once set, a token.
type mtlsClient struct {
	http  *http.Client
	token string
}

func newMTLSClient(t *testing.T, pki string) *mtlsClient {
	t.Helper()
	c := plainTLSClient(t, pki)
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "global-cli-nops.pem"), filepath.Join(pki, "global-cli-nops-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	return &mtlsClient{http: c}
}

// plainTLSClient trusts the CA of pki and presents no certificate.
func plainTLSClient(t *testing.T, pki string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(pki, "nops-agent-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in nops-agent-ca.pem")
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// do sends a request and decodes a 200 answer into out (when not nil).
func (c *mtlsClient) do(method, url string, out any) error {
	var body io.Reader
	if method != "GET" {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("X-Nops-Token", c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// stopNopsJob purges the nops job and waits until its allocations stopped.
// On failure it prints the tasks' logs.
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
