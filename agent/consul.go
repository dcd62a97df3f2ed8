package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"

	consulapi "github.com/hashicorp/consul/api"
)

// setupConsul registers this server as service nops in the local Consul
// agent and adds the Consul catalog as a source of servers to join.
func (m *membership) setupConsul() error {
	cc := m.s.config.Consul
	cfg := consulapi.DefaultConfig()
	if cc.Address != "" {
		cfg.Address = cc.Address
	}
	if cc.Token != "" {
		cfg.Token = cc.Token
	}
	client, err := consulapi.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("consul client: %w", err)
	}
	name := cc.ServiceName
	if name == "" {
		name = "nops"
	}
	s := m.s
	reg := consulRegistration(s, name, int(m.serf.Memberlist().LocalNode().Port))
	id := reg.ID
	err = client.Agent().ServiceRegister(reg)
	if err != nil {
		// The agent may come up later; the join loop keeps trying.
		m.logger.Warn("consul service registration failed; will retry", "error", err)
	}
	registered := err == nil
	register := func() {
		if !registered {
			if err := client.Agent().ServiceRegister(reg); err == nil {
				registered = true
				m.logger.Info("registered in consul", "service", name)
			}
		}
	}
	m.consulDeregister = func() {
		if err := client.Agent().ServiceDeregister(id); err != nil {
			m.logger.Warn("consul deregister", "error", err)
		}
	}
	if !cc.AutoJoin {
		// No discovery, but the registration is still retried by the
		// join loop until the agent takes it.
		m.discover = append(m.discover, func(context.Context) ([]string, error) {
			register()
			return nil, nil
		})
		return nil
	}
	m.discover = append(m.discover, func(ctx context.Context) ([]string, error) {
		register()
		q := (&consulapi.QueryOptions{}).WithContext(ctx)
		entries, _, err := client.Catalog().Service(name, "", q)
		if err != nil {
			return nil, fmt.Errorf("consul catalog: %w", err)
		}
		return consulPeers(entries, s.nodeID), nil
	})
	return nil
}

// consulRegistration is the service a server registers in Consul: its
// HTTP port as the service's, the serf and RPC ports in its meta.
func consulRegistration(s *Server, name string, serfPort int) *consulapi.AgentServiceRegistration {
	httpPort := s.httpLn.Addr().(*net.TCPAddr).Port
	_, rpcPort, _ := net.SplitHostPort(s.rpcAddr)
	return &consulapi.AgentServiceRegistration{
		ID: name + "-" + s.nodeID, Name: name, Address: s.config.Advertise, Port: httpPort,
		Tags: []string{"nops-server"},
		Meta: map[string]string{
			"node_id": s.nodeID, "serf_port": strconv.Itoa(serfPort), "rpc_port": rpcPort,
			"http_port": strconv.Itoa(httpPort), "version": Version,
		},
		// The check asks only whether the process answers, so a cluster
		// without a leader still finds its servers. Every 10s is enough
		// for discovery; a server down for three days is deregistered, as
		// it will not come back under its node ID.
		Check: &consulapi.AgentServiceCheck{
			TCP:      net.JoinHostPort(s.config.Advertise, strconv.Itoa(serfPort)),
			Interval: "10s", Timeout: "2s",
			DeregisterCriticalServiceAfter: "72h",
		},
	}
}

// consulPeers returns the serf addresses of the catalog's servers, this
// one (selfID) left out.
func consulPeers(entries []*consulapi.CatalogService, selfID string) []string {
	var out []string
	for _, e := range entries {
		if e.ServiceMeta["node_id"] == selfID {
			continue
		}
		addr := e.ServiceAddress
		if addr == "" {
			addr = e.Address
		}
		if p := e.ServiceMeta["serf_port"]; p != "" {
			out = append(out, net.JoinHostPort(addr, p))
		}
	}
	return out
}
