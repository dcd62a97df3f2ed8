package testutil

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
)

// ConsulAgent is a Consul dev agent (a single server) private to one test.
type ConsulAgent struct {
	// Addr is the HTTP address, "127.0.0.1:<port>", as Consul clients and
	// the `consul { address }` setting expect it.
	Addr string

	// Client is an API client for Addr, with no token.
	Client *consulapi.Client

	HTTPPort    int
	ServerPort  int
	SerfLANPort int
	SerfWANPort int

	// NodeName is the agent's node name, unique to the test.
	NodeName string

	// Dir holds the agent's data directory and log.
	Dir string

	// LogPath is the file the agent's stdout and stderr are written to.
	LogPath string

	proc *Process
}

// StartConsul starts `consul agent -dev` bound to 127.0.0.1 on free ports,
// with DNS and gRPC disabled and its data under t.TempDir(), and returns once
// the agent has a leader and its own node is in the catalog. The agent is
// stopped in t.Cleanup; if the test failed, the tail of its log is printed.
func StartConsul(t testing.TB) *ConsulAgent {
	t.Helper()

	bin := ConsulBinary(t)
	return startAgent(t, "consul", 4, func(dir string, ports []int) (*ConsulAgent, error) {
		return startConsul(bin, dir, ports)
	})
}

func startConsul(bin, dir string, ports []int) (*ConsulAgent, error) {
	a := &ConsulAgent{
		Addr:        fmt.Sprintf("127.0.0.1:%d", ports[0]),
		HTTPPort:    ports[0],
		ServerPort:  ports[1],
		SerfLANPort: ports[2],
		SerfWANPort: ports[3],
		NodeName:    fmt.Sprintf("consul-test-%d", ports[0]),
		Dir:         dir,
		LogPath:     filepath.Join(dir, "consul.log"),
	}
	args := []string{
		"agent", "-dev",
		"-bind=127.0.0.1",
		"-client=127.0.0.1",
		"-node=" + a.NodeName,
		"-data-dir=" + filepath.Join(dir, "data"),
		"-http-port=" + strconv.Itoa(a.HTTPPort),
		"-server-port=" + strconv.Itoa(a.ServerPort),
		"-serf-lan-port=" + strconv.Itoa(a.SerfLANPort),
		"-serf-wan-port=" + strconv.Itoa(a.SerfWANPort),
		"-dns-port=-1",
		"-grpc-port=-1",
		"-grpc-tls-port=-1",
		"-disable-host-node-id",
		"-hcl=connect { enabled = false }",
		"-hcl=disable_update_check = true",
		"-log-level=info",
	}

	var err error
	a.Client, err = consulapi.NewClient(&consulapi.Config{Address: a.Addr})
	if err != nil {
		return nil, fmt.Errorf("creating API client: %w", err)
	}

	a.proc, err = startAgentProcess("consul agent", a.LogPath, bin, args, a.ready)
	if err != nil {
		return nil, err
	}
	return a, nil
}

func (a *ConsulAgent) describe() (string, string) { return a.Addr, a.LogPath }

// ready reports whether the agent has a leader and its node in the catalog.
func (a *ConsulAgent) ready() (bool, error) {
	if err := hasLeader(a.Client.Status().Leader); err != nil {
		return false, err
	}
	node, _, err := a.Client.Catalog().Node(a.NodeName, nil)
	if err != nil {
		return false, fmt.Errorf("reading catalog node %q: %w", a.NodeName, err)
	}
	if node == nil || node.Node == nil {
		return false, fmt.Errorf("node %q not in the catalog yet", a.NodeName)
	}
	return true, nil
}

// Stop stops the agent (SIGINT, then SIGKILL after a grace period). It is
// safe to call more than once; t.Cleanup calls it anyway.
func (a *ConsulAgent) Stop() {
	a.proc.Stop()
}
