package nomadx

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/nomad/api"
)

// ServerVersion returns the version the Nomad servers of the agent's region
// run, in one request (GET /v1/agent/members, which needs node:read, and
// which a client agent forwards to a server): the lowest build of the alive
// servers. That is the version Nomad itself gates new behaviour on, and it
// changes once in a rolling upgrade, when its last server is upgraded,
// where the leader's version could move back and forth as leadership moves
// between upgraded servers and old ones. A build that is not a version
// (a custom one) makes the answer the sorted list of every build, so that
// any change of it is still a change.
func (c *Client) ServerVersion(ctx context.Context) (string, error) {
	var out api.ServerMembers
	if _, err := c.api.Raw().Query("/v1/agent/members", &out, c.queryOpts(ctx, "agent.members", "")); err != nil {
		return "", fmt.Errorf("read the Nomad servers' versions: %w", err)
	}
	return lowestBuild(&out)
}

// lowestBuild picks the lowest build among the alive servers of the
// answer's region.
func lowestBuild(m *api.ServerMembers) (string, error) {
	builds := map[string]bool{}
	for _, s := range m.Members {
		if s == nil || s.Status != "alive" || s.Tags["build"] == "" {
			continue
		}
		if m.ServerRegion != "" && s.Tags["region"] != m.ServerRegion {
			continue
		}
		builds[s.Tags["build"]] = true
	}
	if len(builds) == 0 {
		return "", errors.New("read the Nomad servers' versions: no alive server in the agent's region")
	}
	var lowest *version.Version
	var raw string
	all := make([]string, 0, len(builds))
	for b := range builds {
		all = append(all, b)
		v, err := version.NewVersion(b)
		if err != nil {
			raw = "?"
			continue
		}
		if lowest == nil || v.LessThan(lowest) {
			lowest = v
			if raw != "?" {
				raw = b
			}
		}
	}
	if raw == "?" {
		sort.Strings(all)
		return strings.Join(all, ","), nil
	}
	return raw, nil
}
