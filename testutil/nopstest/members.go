package nopstest

import (
	"encoding/base64"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
)

// FakeMember joins a serf member with the given tags to s's gossip, as an
// attacker with the gossip key would, waits until s sees it alive, and
// returns it; it leaves when the test ends.
func FakeMember(t testing.TB, s *Server, name string, tags map[string]string) *serf.Serf {
	t.Helper()
	sc := serf.DefaultConfig()
	sc.NodeName = name
	sc.Tags = tags
	sc.MemberlistConfig = memberlist.DefaultLocalConfig()
	sc.MemberlistConfig.BindAddr = "127.0.0.1"
	sc.MemberlistConfig.BindPort = 0
	sc.MemberlistConfig.Name = name
	if key := s.Config().Encrypt; key != "" {
		raw, err := base64.StdEncoding.DecodeString(key)
		if err != nil {
			t.Fatal(err)
		}
		sc.MemberlistConfig.SecretKey = raw
	}
	sc.LogOutput = io.Discard
	sc.MemberlistConfig.LogOutput = io.Discard
	sc.SnapshotPath = ""
	fake, err := serf.Create(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Shutdown() })
	if _, err := fake.Join([]string{s.SerfAddr()}, true); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		for _, m := range s.Members() {
			if m.Name == name && m.Status == serf.StatusAlive {
				return true, nil
			}
		}
		return false, fmt.Errorf("the server does not see member %s", name)
	})
	return fake
}

// MemberTags are the serf tags of a Nops server of region with node ID
// id at rpcAddr, for FakeMember.
func MemberTags(id, rpcAddr, region string) map[string]string {
	return map[string]string{structs.MemberTagRole: structs.MemberRoleNops, structs.MemberTagID: id,
		structs.MemberTagRPCAddr: rpcAddr, structs.MemberTagHTTPAddr: "127.0.0.1:1",
		structs.MemberTagBootstrapExpect: "1", structs.MemberTagVersion: agent.Version, structs.MemberTagRegion: region}
}
