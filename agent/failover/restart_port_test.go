package failover_test

import (
	"net"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestRestart_WaitsForATakenPort: a server restarted while another process
// holds its RPC port for a moment (a CI run saw one taken a second after a
// kill) starts once the port is free again, on its own ports, rather than
// failing the test.
func TestRestart_WaitsForATakenPort(t *testing.T) {
	nomad := testutil.StartNomad(t)
	c := nopstest.StartProcessCluster(t, 1, nomad.Addr, "http://127.0.0.1:1/jobs.git#main:jobs", "-insecure-rpc")
	p := c.Server(0)
	c.Kill(0)
	l, err := net.Listen("tcp", p.RPCAddr)
	if err != nil {
		t.Fatalf("hold the RPC port of the killed server: %v", err)
	}
	go func() {
		time.Sleep(time.Second)
		_ = l.Close()
	}()
	c.Restart(0)
	if !p.Running() {
		t.Fatal("the restarted server does not run")
	}
	if _, err := p.Self(); err != nil {
		t.Fatalf("the restarted server does not answer: %v", err)
	}
}
