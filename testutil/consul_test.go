package testutil

import (
	"testing"

	consulapi "github.com/hashicorp/consul/api"
)

func TestStartConsul_CatalogReachable(t *testing.T) {
	t.Parallel()
	consul := StartConsul(t)

	reg := &consulapi.AgentServiceRegistration{
		ID:      "nops-1",
		Name:    "nops",
		Address: "127.0.0.1",
		Port:    4650,
		Meta:    map[string]string{"serf_port": "4652"},
	}
	if err := consul.Client.Agent().ServiceRegister(reg); err != nil {
		t.Fatalf("registering service: %v", err)
	}

	var services []*consulapi.CatalogService
	WaitForResult(t, WaitTimeout, func() (bool, error) {
		var err error
		services, _, err = consul.Client.Catalog().Service("nops", "", nil)
		if err != nil {
			return false, err
		}
		return len(services) == 1, nil
	})
	s := services[0]
	if s.ServiceID != "nops-1" || s.ServicePort != 4650 || s.ServiceMeta["serf_port"] != "4652" || s.Node != consul.NodeName {
		t.Fatalf("catalog service = %+v", s)
	}
}
