package agent_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestRecover_LostQuorumWithPeersJSON loses two of three servers for good:
// the survivor elects no leader and takes no write; with a peers.json
// listing only itself it restarts as a one-server cluster with every
// acknowledged write, takes writes again, and applies the file once.
func TestRecover_LostQuorumWithPeersJSON(t *testing.T) {
	c, leader := startBareCluster(t)
	for i := 0; i < 3; i++ {
		if code, body := leader.Do("PUT", fmt.Sprintf("/v1/window/w%d", i),
			`{"kind":"deny","schedule":"0 1 * * *","duration":"1h"}`, nil); code != 200 {
			t.Fatalf("window %d: %d %s", i, code, body)
		}
	}
	survivor := c.Followers()[0]
	si := c.Index(survivor)
	for i := 0; i < c.Size(); i++ {
		if i != si {
			c.Kill(i)
		}
	}
	// Without a quorum the survivor takes no write.
	if code, _ := survivor.Do("PUT", "/v1/window/lost", `{"kind":"deny","schedule":"0 1 * * *","duration":"1h"}`, nil); code == 200 {
		t.Fatal("a write was acknowledged without a quorum")
	}
	id, addr := survivor.NodeID(), survivor.RPCAddr()
	c.Kill(si)

	raftDir := filepath.Join(c.Config(si).DataDir, "raft")
	peers, _ := json.Marshal([]map[string]any{{"id": id, "address": addr, "non_voter": false}})
	if err := os.WriteFile(filepath.Join(raftDir, "peers.json"), peers, 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.Start(si)
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		return s.IsLeader(), fmt.Errorf("the recovered server does not lead")
	})
	for i := 0; i < 3; i++ {
		if w, err := s.State().Window(fmt.Sprintf("w%d", i)); err != nil || w == nil {
			t.Fatalf("acknowledged window w%d lost in the recovery: %v", i, err)
		}
	}
	if w, _ := s.State().Window("lost"); w != nil {
		t.Fatal("the unacknowledged write was applied")
	}
	if code, body := s.Do("POST", "/v1/pause", `{"reason":"after recovery"}`, nil); code != 200 {
		t.Fatalf("write after recovery: %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(raftDir, "peers.json")); !os.IsNotExist(err) {
		t.Fatalf("peers.json still there after the recovery: %v", err)
	}
	if _, err := os.Stat(filepath.Join(raftDir, "peers.info")); err != nil {
		t.Fatalf("peers.json not renamed to peers.info: %v", err)
	}
	var cfg struct {
		Servers []struct{ ID string } `json:"servers"`
	}
	s.Do("GET", "/v1/operator/raft/configuration", nil, &cfg)
	if len(cfg.Servers) != 1 || cfg.Servers[0].ID != id {
		t.Fatalf("raft configuration after recovery: %+v", cfg)
	}
}

// TestRecover_BadPeersJSON refuses to start with a peers.json it cannot
// read, naming the file and the problem, and changes nothing.
func TestRecover_BadPeersJSON(t *testing.T) {
	dir := t.TempDir()
	s := nopstest.Start(t, dir, nopstest.WithoutReconcilers())
	s.Shutdown()
	raftDir := filepath.Join(dir, "raft")
	for name, body := range map[string]string{
		"not json":      `{"id":`,
		"empty list":    `[]`,
		"no address":    `[{"id":"a"}]`,
		"duplicate ids": `[{"id":"a","address":"127.0.0.1:1"},{"id":"a","address":"127.0.0.1:2"}]`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(raftDir, "peers.json"), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			srv, err := agent.New(nopstest.Config(t, dir), nopstest.Logger("bad-peers"), agent.Options{})
			if err == nil {
				srv.Shutdown()
			}
			if err == nil || !strings.Contains(err.Error(), "peers.json") {
				t.Fatalf("error %v does not name peers.json", err)
			}
		})
	}
}
