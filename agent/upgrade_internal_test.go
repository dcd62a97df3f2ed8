package agent

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	version "github.com/hashicorp/go-version"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"

	agenthttp "github.com/nops-dev/nops/agent/http"
	"github.com/nops-dev/nops/structs"
)

func member(name, ver, region string, status serf.MemberStatus) serf.Member {
	return serf.Member{Name: name, Status: status, Tags: map[string]string{
		structs.MemberTagRole: structs.MemberRoleNops, structs.MemberTagID: name + "-id", structs.MemberTagVersion: ver, structs.MemberTagRegion: region,
	}}
}

func TestServersMeetMinimumVersion(t *testing.T) {
	min := version.Must(version.NewVersion("0.2.0"))
	for _, tc := range []struct {
		name    string
		members []serf.Member
		old     []string
	}{
		{"all new", []serf.Member{member("a", "0.2.0", "global", serf.StatusAlive), member("b", "0.3.1", "global", serf.StatusAlive)}, nil},
		// A pre-release of the minimum counts as the minimum: a build of the
		// code that introduced the type knows it.
		{"dev build", []serf.Member{member("a", "0.2.0-dev", "global", serf.StatusAlive)}, nil},
		{"one old", []serf.Member{member("a", "0.2.0", "global", serf.StatusAlive), member("b", "0.1.9", "global", serf.StatusAlive)}, []string{"b (0.1.9)"}},
		// A failed server may come back: it counts. A server that left
		// does not, nor one of another region, nor what is not a server.
		{"failed old", []serf.Member{member("a", "0.1.0", "global", serf.StatusFailed)}, []string{"a (0.1.0)"}},
		{"left old", []serf.Member{member("a", "0.1.0", "global", serf.StatusLeft)}, nil},
		{"other region", []serf.Member{member("a", "0.1.0", "eu", serf.StatusAlive)}, nil},
		{"not a server", []serf.Member{{Name: "x", Status: serf.StatusAlive, Tags: map[string]string{structs.MemberTagVersion: "0.0.1"}}}, nil},
		// A version that does not parse is too old.
		{"garbage version", []serf.Member{member("a", "latest", "global", serf.StatusAlive), member("b", "", "global", serf.StatusAlive)},
			[]string{"a (latest)", "b ()"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := serversMeetMinimumVersion(structs.AutopilotSetConfigRequestType, min, tc.members, "global")
			if tc.old == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var tooOld *ServersTooOldError
			if !errors.As(err, &tooOld) || !errors.Is(err, structs.ErrConflict) {
				t.Fatalf("error %v is not a ServersTooOldError conflict", err)
			}
			if strings.Join(tooOld.Servers, ",") != strings.Join(tc.old, ",") {
				t.Fatalf("too old: %v, want %v", tooOld.Servers, tc.old)
			}
			if agenthttp.StatusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), "AutopilotSetConfig needs every server at version 0.2.0") {
				t.Fatalf("error %q (status %d)", err, agenthttp.StatusOf(err))
			}
		})
	}
}

// TestAllServersTagged: the proposer packs writes into batch entries only
// while every server that is or may come back (alive or failed) of the
// region says it applies them; a build of the same version that does not
// say so holds it back.
func TestAllServersTagged(t *testing.T) {
	tagged := func(name string, status serf.MemberStatus) serf.Member {
		m := member(name, "0.2.0-dev", "global", status)
		m.Tags[structs.MemberTagBatch] = "1"
		return m
	}
	for _, tc := range []struct {
		name    string
		members []serf.Member
		want    bool
	}{
		{"all tagged", []serf.Member{tagged("a", serf.StatusAlive), tagged("b", serf.StatusAlive)}, true},
		{"one untagged", []serf.Member{tagged("a", serf.StatusAlive), member("b", "0.2.0-dev", "global", serf.StatusAlive)}, false},
		{"failed untagged", []serf.Member{tagged("a", serf.StatusAlive), member("b", "0.2.0-dev", "global", serf.StatusFailed)}, false},
		{"left untagged", []serf.Member{tagged("a", serf.StatusAlive), member("b", "0.2.0-dev", "global", serf.StatusLeft)}, true},
		{"other region untagged", []serf.Member{tagged("a", serf.StatusAlive), member("b", "0.2.0-dev", "eu", serf.StatusAlive)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := allServersTagged(tc.members, "global", structs.MemberTagBatch); got != tc.want {
				t.Fatalf("allServersTagged = %v, want %v", got, tc.want)
			}
		})
	}
	// Every server of the Raft configuration must be a tagged member:
	// gossip may not have found a peer yet, or may have reaped it.
	members := []serf.Member{tagged("a", serf.StatusAlive), tagged("b", serf.StatusAlive), member("c", "0.2.0-dev", "global", serf.StatusAlive)}
	cfg := func(ids ...string) raft.Configuration {
		var c raft.Configuration
		for _, id := range ids {
			c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":4647")})
		}
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  raft.Configuration
		want bool
	}{
		{"all tagged", cfg("a-id", "b-id"), true},
		{"a peer gossip does not know", cfg("a-id", "b-id", "d-id"), false},
		{"a peer without the tag", cfg("a-id", "c-id"), false},
	} {
		if got := raftServersTagged(tc.cfg, members, structs.MemberTagBatch); got != tc.want {
			t.Errorf("%s: raftServersTagged = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Before gossip runs, nothing is known of the others.
	if canBatch(nil, nil, "global") {
		t.Fatal("a server without gossip packs batch entries")
	}
}

// TestRequestMinVersion: the requests that carry the approval rules in
// older message types wait for every server to apply the rules; the same
// message types without them do not.
func TestRequestMinVersion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   any
		needs bool
	}{
		{"one approval", &structs.DeploymentCreateRequest{Deployment: &structs.Deployment{ApprovalsRequired: 1}}, false},
		{"two approvals", &structs.DeploymentCreateRequest{Deployment: &structs.Deployment{ApprovalsRequired: 2}}, true},
		{"an approval TTL", &structs.DeploymentCreateRequest{Deployment: &structs.Deployment{ApprovalTTL: time.Hour}}, true},
		{"an approval", &structs.DeploymentDecisionRequest{Decision: structs.DecisionApprove}, false},
		{"an approval under forbid_self", &structs.DeploymentDecisionRequest{Decision: structs.DecisionApprove, ForbidSelf: true}, true},
		{"a move to applying", &structs.DeploymentTransitionRequest{To: structs.StateApplying}, false},
		{"an expiry", &structs.DeploymentTransitionRequest{To: structs.StateExpired}, true},
		{"another request", &structs.PauseRequest{}, false},
	} {
		v := requestMinVersion(tc.req)
		if got := v != nil; got != tc.needs {
			t.Errorf("%s: needs a version: %v, want %v", tc.name, got, tc.needs)
			continue
		}
		if v == nil {
			continue
		}
		err := serversMeetMinimumVersion(structs.DeploymentCreateRequestType, v,
			[]serf.Member{member("a", "0.2.0", "global", serf.StatusAlive), member("b", "0.1.4", "global", serf.StatusAlive)}, "global")
		var tooOld *ServersTooOldError
		if !errors.As(err, &tooOld) || strings.Join(tooOld.Servers, ",") != "b (0.1.4)" {
			t.Errorf("%s with a 0.1.4 server: %v, want it named too old", tc.name, err)
		}
	}
}
