package command

import (
	"context"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// nops serve with the node name of a server of the cluster it joins stops
// with exit code 1 and says which server has the name.
func TestServe_DuplicateNodeNameExits(t *testing.T) {
	first := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) { c.NodeName = "dup" }))
	c := newCLI(t, nil)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		serve := &serveCommand{m: c.meta(&stdout, &stderr), shutdownTimeout: 10 * time.Second}
		done <- serve.Run(context.Background(), []string{"-node", "dup", "-data-dir", t.TempDir(), "-bootstrap-expect", "1",
			"-bind", "127.0.0.1", "-advertise", "127.0.0.1", "-http-port", "0", "-rpc-port", "0", "-serf-port", "0",
			"-encrypt", nopstest.GossipKey, "-insecure-rpc", "-retry-join", first.SerfAddr(), "-nomad-addr", "http://" + testutil.ClosedAddress(t)})
	}()
	select {
	case code := <-done:
		if code != exitError {
			t.Fatalf("serve exited %d, want 1\nstderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a server with a duplicate node name kept running")
	}
	mustContain(t, "stderr", stderr.String(), "Error: node name conflict: node name dup is already used by node ID "+first.NodeID())
}
