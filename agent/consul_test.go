package agent_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestConsul_Discovery forms a cluster of three servers that know nothing
// of each other but a Consul agent: each registers service nops with its
// ports and joins the servers it finds in the catalog. A graceful leave
// deregisters the server and takes it out of the Raft configuration.
func TestConsul_Discovery(t *testing.T) {
	consul := testutil.StartConsul(t)
	c := nopstest.NewCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.RetryJoin = nil
		cfg.Consul = &config.ConsulConfig{Address: consul.Addr, ServiceName: "nops", AutoJoin: true}
	}))
	for i := 0; i < c.Size(); i++ {
		c.Start(i)
	}
	c.WaitForLeader(60 * time.Second)
	ids := c.NodeIDs()
	c.WaitForPeers(30*time.Second, ids...)

	byID := map[string]int{}
	for i := 0; i < c.Size(); i++ {
		byID[c.Server(i).NodeID()] = i
	}
	entries, _, err := consul.Client.Catalog().Service("nops", "", nil)
	if err != nil {
		t.Fatalf("consul catalog: %v", err)
	}
	if len(entries) != 3 {
		t.Fatalf("catalog lists %d nops services, want 3", len(entries))
	}
	for _, e := range entries {
		i, ok := byID[e.ServiceMeta["node_id"]]
		if !ok {
			t.Fatalf("catalog entry of an unknown server: %+v", e.ServiceMeta)
		}
		cfg := c.Config(i)
		if e.ServiceAddress != "127.0.0.1" || e.ServicePort != cfg.HTTPPort {
			t.Errorf("server %d registered at %s:%d, want 127.0.0.1:%d", i, e.ServiceAddress, e.ServicePort, cfg.HTTPPort)
		}
		for key, want := range map[string]int{"http_port": cfg.HTTPPort, "rpc_port": cfg.RPCPort, "serf_port": cfg.SerfPort} {
			if got := e.ServiceMeta[key]; got != strconv.Itoa(want) {
				t.Errorf("server %d registered %s=%s, want %d", i, key, got, want)
			}
		}
	}

	// A graceful leave of a follower: out of the catalog, out of Raft.
	f := c.Followers()[0]
	gone := f.NodeID()
	f.Leave()
	c.Kill(c.Index(f))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		entries, _, err := consul.Client.Catalog().Service("nops", "", nil)
		if err != nil {
			return false, err
		}
		for _, e := range entries {
			if e.ServiceMeta["node_id"] == gone {
				return false, fmt.Errorf("the server that left is still in the catalog")
			}
		}
		if len(entries) != 2 {
			return false, fmt.Errorf("catalog lists %d nops services, want 2", len(entries))
		}
		return true, nil
	})
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.WaitForLeader(20 * time.Second)
	call(t, leader, "POST", "/v1/pause", []byte(`{"reason":"two left"}`)).ok(t, "write after a leave", nil)
}
