package command

import (
	"context"
	"fmt"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// serverMembersCommand lists the servers gossip knows, as
// "nomad server members" does.
type serverMembersCommand struct {
	m *runner
}

func (c *serverMembersCommand) Synopsis() string { return "List the servers gossip knows" }

func (c *serverMembersCommand) Help() string {
	return `Usage: nops server members [options]

  Lists the members of the servers' gossip (serf), as the server asked sees
  them: name, gossip address, status, region, version, Raft ID and, for a
  member every membership decision ignores, why (it claims the node ID of a
  Raft peer it is not: an impostor, or a server that moved without
  remove-peer).
` + apiFlagsHelp
}

func (c *serverMembersCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	return m.runAPI(c, args, apiArgs{name: "server members"}, func(api *client.Client, _ []string, asJSON bool) int {
		members, _, err := api.Agent().Members(ctx, nil)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(members)
		}
		table[structs.Member]{
			header: "Name\tAddress\tStatus\tRegion\tVersion\tID\tRefused",
			row: func(s structs.Member) string {
				refused := s.Refused
				if refused == "" {
					refused = "-"
				}
				return fmt.Sprintf("%s\t%s:%d\t%s\t%s\t%s\t%s\t%s", s.Name, s.Addr, s.Port, s.Status,
					s.Tags[structs.MemberTagRegion], s.Tags[structs.MemberTagVersion], s.Tags[structs.MemberTagID], refused)
			},
		}.print(m, members)
		return exitOK
	})
}
