package nomadx

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestLowestBuild(t *testing.T) {
	member := func(build, region, status string) *api.AgentMember {
		return &api.AgentMember{Status: status, Tags: map[string]string{"build": build, "region": region}}
	}
	for _, tc := range []struct {
		name    string
		members []*api.AgentMember
		want    string
		wantErr bool
	}{
		{"one server", []*api.AgentMember{member("1.6.3", "global", "alive")}, "1.6.3", false},
		{"a rolling upgrade half done", []*api.AgentMember{member("1.6.4", "global", "alive"),
			member("1.6.3", "global", "alive"), member("1.6.10", "global", "alive")}, "1.6.3", false},
		{"a version is compared as one, not as text", []*api.AgentMember{member("1.6.10", "global", "alive"),
			member("1.6.9", "global", "alive")}, "1.6.9", false},
		{"a server gone and another region do not count", []*api.AgentMember{member("1.6.4", "global", "alive"),
			member("1.6.3", "global", "left"), member("1.5.0", "eu", "alive")}, "1.6.4", false},
		{"a build that is no version: every build", []*api.AgentMember{member("custom", "global", "alive"),
			member("1.6.3", "global", "alive")}, "1.6.3,custom", false},
		{"no alive server", []*api.AgentMember{member("1.6.3", "global", "failed")}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lowestBuild(&api.ServerMembers{ServerRegion: "global", Members: tc.members})
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("lowestBuild: %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
