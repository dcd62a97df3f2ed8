package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

const (
	// WaitTimeout bounds the Wait* helpers of NomadAgent: how long a mock
	// job may take to reach the state a test waits for.
	WaitTimeout = 2 * time.Minute
)

// nomadAgentConfig is the configuration every test agent gets, on top of
// -dev. The cloud fingerprinters are denied because they abort the client
// when there is no cloud metadata service; only the drivers tests use are
// loaded (java, docker and qemu cost startup time and find nothing here);
// raw_exec is enabled for tests that run real commands; Consul integration is off so that a Consul agent
// on the default port (a developer's, or one from another test) is never
// touched.
const nomadAgentConfig = `
data_dir             = %q
disable_update_check = true
log_level            = "INFO"

ports {
  http = %d
  rpc  = %d
  serf = %d
}

client {
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
    "driver.allowlist"     = "mock_driver,raw_exec,exec"
  }
}

plugin "raw_exec" {
  config {
    enabled = true
  }
}

consul {
  auto_advertise   = false
  server_auto_join = false
  client_auto_join = false
}
`

// NomadAgent is a Nomad dev agent (server and client in one process) private
// to one test.
type NomadAgent struct {
	// Addr is the HTTP address, "http://127.0.0.1:<port>", suitable for
	// NOMAD_ADDR or -nomad-addr.
	Addr string

	// Client is an API client for Addr, with the default namespace and no
	// token, or the management token when the agent runs WithACL.
	Client *nomadapi.Client

	// ManagementToken is the secret ID of the management token that
	// bootstrapped the ACL system of an agent started WithACL; empty
	// otherwise.
	ManagementToken string

	HTTPPort int
	RPCPort  int
	SerfPort int

	// NodeID is the ID of the agent's client node.
	NodeID string

	// Dir holds the agent's configuration file, data directory (with the
	// client's state, alloc and plugin directories) and log.
	Dir string

	// LogPath is the file the agent's stdout and stderr are written to.
	LogPath string

	proc *Process
}

// NomadOption changes the agent StartNomad starts.
type NomadOption func(*nomadOptions)

type nomadOptions struct {
	extraConfig []string
	acl         bool
}

// WithNomadConfig adds HCL to the agent's configuration, for example
// `acl { enabled = true }`, or `log_level = "DEBUG"` when INFO does not
// explain a failure. It is written to its own file, loaded after the default
// one, so its settings win.
func WithNomadConfig(hcl string) NomadOption {
	return func(o *nomadOptions) {
		o.extraConfig = append(o.extraConfig, hcl)
	}
}

// StartNomad starts `nomad agent -dev -bind=127.0.0.1` on free ports, with
// its data under t.TempDir(), and returns once the agent has a leader and a
// ready, eligible client node with a healthy mock_driver. The agent is
// stopped in t.Cleanup; if the test failed, the tail of its log is printed.
func StartNomad(t testing.TB, opts ...NomadOption) *NomadAgent {
	t.Helper()

	bin := NomadBinary(t)
	var o nomadOptions
	for _, opt := range opts {
		opt(&o)
	}

	return startAgent(t, "nomad", 3, func(dir string, ports []int) (*NomadAgent, error) {
		return startNomad(bin, dir, ports, o)
	})
}

func startNomad(bin, dir string, ports []int, o nomadOptions) (*NomadAgent, error) {
	a := &NomadAgent{
		Addr:     fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		HTTPPort: ports[0],
		RPCPort:  ports[1],
		SerfPort: ports[2],
		Dir:      dir,
		LogPath:  filepath.Join(dir, "nomad.log"),
	}

	configPath := filepath.Join(dir, "agent.hcl")
	config := fmt.Sprintf(nomadAgentConfig, filepath.Join(dir, "data"), a.HTTPPort, a.RPCPort, a.SerfPort)
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("writing agent config: %w", err)
	}
	args := []string{"agent", "-dev", "-bind=127.0.0.1", "-config=" + configPath}
	extras := o.extraConfig
	if o.acl {
		extras = append([]string{nomadACLConfig}, extras...)
	}
	for i, extra := range extras {
		path := filepath.Join(dir, fmt.Sprintf("extra-%d.hcl", i))
		if err := os.WriteFile(path, []byte(extra), 0o644); err != nil {
			return nil, fmt.Errorf("writing agent config: %w", err)
		}
		args = append(args, "-config="+path)
	}

	var err error
	a.Client, err = nomadapi.NewClient(&nomadapi.Config{Address: a.Addr})
	if err != nil {
		return nil, fmt.Errorf("creating API client: %w", err)
	}

	ready := a.ready
	if o.acl {
		ready = a.readyWithACL
	}
	a.proc, err = startAgentProcess("nomad agent", a.LogPath, bin, args, ready)
	if err != nil {
		unmountUnder(dir)
		return nil, err
	}
	return a, nil
}

func (a *NomadAgent) describe() (string, string) { return a.Addr, a.LogPath }

// Pid returns the process ID of the agent, for benchmarks that read its
// CPU time.
func (a *NomadAgent) Pid() int { return a.proc.Pid() }

// ready reports whether the agent has a leader and a ready client node whose
// mock_driver is healthy.
func (a *NomadAgent) ready() (bool, error) {
	if err := hasLeader(a.Client.Status().Leader); err != nil {
		return false, err
	}

	nodes, _, err := a.Client.Nodes().List(nil)
	if err != nil {
		return false, fmt.Errorf("listing nodes: %w", err)
	}
	if len(nodes) != 1 {
		return false, fmt.Errorf("%d client nodes registered, want 1", len(nodes))
	}
	node := nodes[0]
	if node.Status != nomadapi.NodeStatusReady {
		return false, fmt.Errorf("node %s status %q", node.ID, node.Status)
	}
	if node.SchedulingEligibility != nomadapi.NodeSchedulingEligible {
		return false, fmt.Errorf("node %s scheduling eligibility %q", node.ID, node.SchedulingEligibility)
	}
	driver := node.Drivers["mock_driver"]
	if driver == nil || !driver.Detected || !driver.Healthy {
		return false, fmt.Errorf("node %s: mock_driver not detected and healthy yet", node.ID)
	}
	a.NodeID = node.ID
	return true, nil
}

// Stop stops the agent (SIGINT, then SIGKILL after a grace period) and
// removes the mounts it may have left. It is safe to call more than once,
// for tests that need Nomad to go away; t.Cleanup calls it anyway.
func (a *NomadAgent) Stop() {
	a.proc.Stop()
	unmountUnder(a.Dir)
}

// ParseJob parses a job specification through the agent's
// /v1/jobs/parse endpoint, with canonicalization.
func (a *NomadAgent) ParseJob(t testing.TB, hcl string) *nomadapi.Job {
	t.Helper()
	job, err := a.Client.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: hcl, Canonicalize: true})
	if err != nil {
		t.Fatalf("testutil: parsing job: %v\n%s", err, hcl)
	}
	return job
}

// RegisteredJob is the result of NomadAgent.RegisterJobHCL.
type RegisteredJob struct {
	Namespace      string
	ID             string
	EvalID         string
	JobModifyIndex uint64
	Job            *nomadapi.Job
}

// RegisterJobHCL parses a job specification through the agent and registers
// it.
func (a *NomadAgent) RegisterJobHCL(t testing.TB, hcl string) *RegisteredJob {
	t.Helper()
	job := a.ParseJob(t, hcl)
	resp, _, err := a.Client.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: *job.Namespace})
	if err != nil {
		t.Fatalf("testutil: registering job %q: %v", *job.ID, err)
	}
	return &RegisteredJob{
		Namespace:      *job.Namespace,
		ID:             *job.ID,
		EvalID:         resp.EvalID,
		JobModifyIndex: resp.JobModifyIndex,
		Job:            job,
	}
}

// WaitForDeployment waits until the Nomad deployment created by the register
// of job reaches status want (one of the nomadapi.DeploymentStatus* values),
// and returns it. It fails the test at once if the deployment ends in another
// terminal status, and after WaitTimeout otherwise.
func (a *NomadAgent) WaitForDeployment(t testing.TB, job *RegisteredJob, want string) *nomadapi.Deployment {
	t.Helper()
	return a.waitDeployment(t, job, func(d *nomadapi.Deployment) (bool, error) {
		if d.Status == want {
			return true, nil
		}
		err := fmt.Errorf("deployment %s of job %q is %q (%s), want %q", d.ID, job.ID, d.Status, d.StatusDescription, want)
		if isTerminalDeploymentStatus(d.Status) {
			return false, stopPolling(err)
		}
		return false, err
	})
}

// waitDeployment polls the Nomad deployment created by the register of job
// until ok accepts it (or stops the polling), and returns it.
func (a *NomadAgent) waitDeployment(t testing.TB, job *RegisteredJob, ok func(*nomadapi.Deployment) (bool, error)) *nomadapi.Deployment {
	t.Helper()
	var d *nomadapi.Deployment
	a.wait(t, func() (bool, error) {
		var err error
		if d, err = a.deploymentOf(job); err != nil {
			return false, err
		}
		return ok(d)
	})
	return d
}

// WaitForCanariesHealthy waits until the Nomad deployment created by the
// register of job has, in every task group that wants canaries, as many
// healthy canaries as it wants, and is waiting for a promotion. It returns
// the deployment.
func (a *NomadAgent) WaitForCanariesHealthy(t testing.TB, job *RegisteredJob) *nomadapi.Deployment {
	t.Helper()
	return a.waitDeployment(t, job, func(d *nomadapi.Deployment) (bool, error) {
		if isTerminalDeploymentStatus(d.Status) {
			return false, stopPolling(fmt.Errorf("deployment %s of job %q is %q (%s) while waiting for canaries", d.ID, job.ID, d.Status, d.StatusDescription))
		}
		groups := 0
		for name, g := range d.TaskGroups {
			if g.DesiredCanaries == 0 {
				continue
			}
			groups++
			if g.Promoted {
				return false, stopPolling(fmt.Errorf("deployment %s of job %q: group %q is already promoted", d.ID, job.ID, name))
			}
			if g.HealthyAllocs < g.DesiredCanaries {
				return false, fmt.Errorf("deployment %s of job %q: group %q has %d healthy canaries of %d", d.ID, job.ID, name, g.HealthyAllocs, g.DesiredCanaries)
			}
		}
		if groups == 0 {
			return false, stopPolling(fmt.Errorf("deployment %s of job %q has no canaries", d.ID, job.ID))
		}
		return true, nil
	})
}

// deploymentOf returns the Nomad deployment that the register of job
// created, matched by the job modify index, or an error if there is none
// yet.
func (a *NomadAgent) deploymentOf(job *RegisteredJob) (*nomadapi.Deployment, error) {
	deployments, _, err := a.Client.Jobs().Deployments(job.ID, true, &nomadapi.QueryOptions{Namespace: job.Namespace})
	if err != nil {
		return nil, fmt.Errorf("listing deployments of job %q: %w", job.ID, err)
	}
	for _, d := range deployments {
		if d.JobModifyIndex == job.JobModifyIndex {
			return d, nil
		}
	}
	return nil, fmt.Errorf("no deployment yet for job %q at modify index %d", job.ID, job.JobModifyIndex)
}

// WaitForAllocs waits until exactly n allocations of the job have client
// status clientStatus (one of the nomadapi.AllocClientStatus* values), and
// returns them.
func (a *NomadAgent) WaitForAllocs(t testing.TB, namespace, jobID, clientStatus string, n int) []*nomadapi.AllocationListStub {
	t.Helper()
	var matched []*nomadapi.AllocationListStub
	a.wait(t, func() (bool, error) {
		allocs, _, err := a.Client.Jobs().Allocations(jobID, true, &nomadapi.QueryOptions{Namespace: namespace})
		if err != nil {
			return false, fmt.Errorf("listing allocations of job %q: %w", jobID, err)
		}
		matched = matched[:0]
		var states []string
		for _, alloc := range allocs {
			states = append(states, alloc.ClientStatus)
			if alloc.ClientStatus == clientStatus {
				matched = append(matched, alloc)
			}
		}
		if len(matched) != n {
			return false, fmt.Errorf("job %q has %d allocations %q, want %d (all: %s)", jobID, len(matched), clientStatus, n, strings.Join(states, ","))
		}
		return true, nil
	})
	return matched
}

// WaitForJobStatus waits until the job's status is want ("pending",
// "running" or "dead") and returns the job.
func (a *NomadAgent) WaitForJobStatus(t testing.TB, namespace, jobID, want string) *nomadapi.Job {
	t.Helper()
	var job *nomadapi.Job
	a.wait(t, func() (bool, error) {
		var err error
		job, _, err = a.Client.Jobs().Info(jobID, &nomadapi.QueryOptions{Namespace: namespace})
		if err != nil {
			return false, fmt.Errorf("reading job %q: %w", jobID, err)
		}
		if *job.Status != want {
			return false, fmt.Errorf("job %q is %q, want %q", jobID, *job.Status, want)
		}
		return true, nil
	})
	return job
}

// wait polls fn until WaitTimeout, failing the test at once when fn returns
// an error made by stopPolling, or when the agent exits.
func (a *NomadAgent) wait(t testing.TB, fn func() (bool, error)) {
	t.Helper()
	if err := waitReadyTimeout(a.proc, WaitTimeout, fn); err != nil {
		t.Fatalf("testutil: %v", err)
	}
}

func isTerminalDeploymentStatus(status string) bool {
	switch status {
	case nomadapi.DeploymentStatusSuccessful, nomadapi.DeploymentStatusFailed, nomadapi.DeploymentStatusCancelled:
		return true
	}
	return false
}
