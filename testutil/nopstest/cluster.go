package nopstest

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil"
)

// Cluster is a set of test servers that form one Raft cluster on
// 127.0.0.1 with -bootstrap-expect and -retry-join, as operators run them.
// Each server has fixed ports and a data dir of its own, so Kill and Restart
// bring it back on the same addresses with its Raft state, like a restarted
// process.
type Cluster struct {
	t    testing.TB
	opts []Option

	mu      sync.Mutex
	servers []*Server
	configs []*config.Config
}

// NewCluster prepares n servers that expect each other (-bootstrap-expect
// n, and each retry-joins the serf addresses of the others) without
// starting any; Start starts them one by one. Options apply to every server
// and run after the cluster settings, so a test can replace them (for
// example drop RetryJoin for a Consul block).
func NewCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("nopstest: a cluster needs at least one server, not %d", n)
	}
	ports := testutil.FreePorts(t, 3*n)
	c := &Cluster{t: t, opts: opts, servers: make([]*Server, n), configs: make([]*config.Config, n)}
	root := t.TempDir()
	for i := 0; i < n; i++ {
		cfg := Config(t, filepath.Join(root, fmt.Sprintf("server-%d", i)))
		cfg.NodeName = fmt.Sprintf("%s-%d", cfg.NodeName, i)
		cfg.HTTPPort, cfg.RPCPort, cfg.SerfPort = ports[3*i], ports[3*i+1], ports[3*i+2]
		cfg.BootstrapExpect = n
		for j := 0; j < n; j++ {
			if j != i {
				cfg.RetryJoin = append(cfg.RetryJoin, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*j+2])))
			}
		}
		c.configs[i] = cfg
	}
	return c
}

// StartCluster starts n servers that form a cluster, and waits for its
// leader.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := NewCluster(t, n, opts...)
	for i := 0; i < n; i++ {
		c.Start(i)
	}
	c.WaitForLeader(clusterLeaderTimeout)
	return c
}

// Size returns the number of servers of the cluster, running or not.
func (c *Cluster) Size() int { return len(c.configs) }

// Start starts server i on its ports and data dir (a restart when it ran
// before) and returns it. It does not wait for a leader.
func (c *Cluster) Start(i int) *Server {
	c.t.Helper()
	c.mu.Lock()
	if c.servers[i] != nil {
		c.mu.Unlock()
		c.t.Fatalf("nopstest: server %d is already running", i)
	}
	// Each start gets a copy: the server completes its configuration.
	cfg := *c.configs[i]
	cfg.RetryJoin = append([]string(nil), c.configs[i].RetryJoin...)
	c.mu.Unlock()
	// The options are applied by StartWith on every start; that is what
	// lets them replace the cluster settings.
	s := StartWith(c.t, &cfg, c.opts...)
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return s
}

// Kill stops server i as a crash would: no leave, no leadership transfer.
// Its peers see its connections cut at once.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s == nil {
		c.t.Fatalf("nopstest: server %d is not running", i)
	}
	s.Shutdown()
}

// Restart kills server i and starts it again on the same ports and data
// dir.
func (c *Cluster) Restart(i int) *Server {
	c.t.Helper()
	c.Kill(i)
	return c.Start(i)
}

// Server returns server i, or nil when it is not running.
func (c *Cluster) Server(i int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Config returns the configuration server i starts with.
func (c *Cluster) Config(i int) *config.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.configs[i]
}

// Index returns the position of s in the cluster, or -1.
func (c *Cluster) Index(s *Server) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cs := range c.servers {
		if cs != nil && s != nil && cs.Server == s.Server {
			return i
		}
	}
	return -1
}

// Servers returns the running servers, in index order.
func (c *Cluster) Servers() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Server
	for _, s := range c.servers {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Leader returns the running server that leads (its leadership
// established), or nil.
func (c *Cluster) Leader() *Server {
	for _, s := range c.Servers() {
		if s.IsLeader() {
			return s
		}
	}
	return nil
}

// Followers returns the running servers that do not lead.
func (c *Cluster) Followers() []*Server {
	var out []*Server
	for _, s := range c.Servers() {
		if !s.IsLeader() {
			out = append(out, s)
		}
	}
	return out
}

// WaitForLeader waits until exactly one running server leads and every
// running server knows it as the leader, and returns it.
func (c *Cluster) WaitForLeader(timeout time.Duration) *Server {
	c.t.Helper()
	var leader *Server
	testutil.WaitForResult(c.t, timeout, func() (bool, error) {
		var err error
		leader, err = c.agreedLeader()
		return err == nil, err
	})
	return leader
}

func (c *Cluster) agreedLeader() (*Server, error) {
	servers := c.Servers()
	if len(servers) == 0 {
		return nil, fmt.Errorf("no server is running")
	}
	var leaders []*Server
	for _, s := range servers {
		if s.IsLeader() {
			leaders = append(leaders, s)
		}
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("%d of %d running servers lead", len(leaders), len(servers))
	}
	want := leaders[0].NodeID()
	for _, s := range servers {
		if _, id := s.Leader(); id != want {
			return nil, fmt.Errorf("server %s knows leader %q, not %s", s.Config().NodeName, id, want)
		}
	}
	return leaders[0], nil
}

// WaitForPeers waits until the Raft configuration of every running server
// lists exactly the servers with the given node IDs, each a voter.
func (c *Cluster) WaitForPeers(timeout time.Duration, ids ...string) {
	c.t.Helper()
	testutil.WaitForResult(c.t, timeout, func() (bool, error) {
		for _, s := range c.Servers() {
			got, err := RaftServers(s)
			if err != nil {
				return false, err
			}
			if len(got) != len(ids) {
				return false, fmt.Errorf("server %s has %d raft peers, want %d: %v", s.Config().NodeName, len(got), len(ids), got)
			}
			for _, id := range ids {
				srv, ok := got[id]
				if !ok || srv.Suffrage != raft.Voter {
					return false, fmt.Errorf("server %s: %s is not a voter in %v", s.Config().NodeName, id, got)
				}
			}
		}
		return true, nil
	})
}

// NodeIDs returns the node IDs of the running servers.
func (c *Cluster) NodeIDs() []string {
	var out []string
	for _, s := range c.Servers() {
		out = append(out, s.NodeID())
	}
	return out
}

// RaftServers returns the Raft configuration a server holds, by node ID.
func RaftServers(s *Server) (map[string]raft.Server, error) {
	f := s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration of %s: %w", s.Config().NodeName, err)
	}
	out := map[string]raft.Server{}
	for _, srv := range f.Configuration().Servers {
		out[string(srv.ID)] = srv
	}
	return out, nil
}
