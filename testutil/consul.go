package testutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

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

	proc *process
}

// StartConsul starts `consul agent -dev` bound to 127.0.0.1 on free ports,
// with DNS and gRPC disabled and its data under t.TempDir(), and returns once
// the agent has a leader and its own node is in the catalog. The agent is
// stopped in t.Cleanup; if the test failed, the tail of its log is printed.
func StartConsul(t testing.TB) *ConsulAgent {
	t.Helper()

	bin := ConsulBinary(t)
	root := t.TempDir()
	start := time.Now()
	var err error
	for attempt := 1; attempt <= agentStartAttempts; attempt++ {
		var a *ConsulAgent
		a, err = startConsul(bin, filepath.Join(root, fmt.Sprintf("consul-%d", attempt)))
		if err == nil {
			t.Cleanup(func() {
				// The tail before the shutdown is the part that explains
				// a failure.
				var tail string
				if t.Failed() {
					tail = tailFile(a.LogPath, logTailLines)
				}
				a.Stop()
				if tail != "" {
					t.Logf("testutil: consul agent %s log (%s), last %d lines before shutdown:\n%s", a.Addr, a.LogPath, logTailLines, tail)
				}
			})
			t.Logf("testutil: consul agent ready at %s in %s", a.Addr, time.Since(start).Round(time.Millisecond))
			return a
		}
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	t.Fatalf("testutil: starting consul agent: %v", err)
	return nil
}

func startConsul(bin, dir string) (*ConsulAgent, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating agent directory: %w", err)
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}

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

	a.Client, err = consulapi.NewClient(&consulapi.Config{Address: a.Addr})
	if err != nil {
		return nil, fmt.Errorf("creating API client: %w", err)
	}

	a.proc, err = startProcess("consul agent", a.LogPath, bin, args, agentEnv())
	if err != nil {
		return nil, err
	}
	if err := waitReady(a.proc, a.ready); err != nil {
		a.Stop()
		return nil, fmt.Errorf("%w\nlast lines of %s:\n%s", err, a.LogPath, tailFile(a.LogPath, logTailLines))
	}
	return a, nil
}

// ready reports whether the agent has a leader and its node in the catalog.
func (a *ConsulAgent) ready() (bool, error) {
	leader, err := a.Client.Status().Leader()
	if err != nil {
		return false, fmt.Errorf("reading leader: %w", err)
	}
	if leader == "" {
		return false, errors.New("no leader yet")
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
	a.proc.stop()
}
