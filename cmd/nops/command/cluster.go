package command

import (
	"context"
	"flag"
	"fmt"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// clusterListCommand lists the Nomad clusters Nops deploys to (SPEC
// section 16).
type clusterListCommand struct {
	m *runner
}

func (c *clusterListCommand) Synopsis() string {
	return "List the Nomad clusters: address, reachability, version, jobs"
}

func (c *clusterListCommand) Help() string {
	return `Usage: nops cluster list [options]

  Lists the Nomad clusters Nops deploys to, as the leader sees them: the
  address, whether the cluster answered its last request and when it last
  did, its Nomad version, whether its job event stream is up, its managed
  jobs, how many drift and its active deployments. A cluster that does not
  answer shows its last error. With one Nomad cluster (no nomad blocks),
  it is named "default".
` + apiFlagsHelp
}

func (c *clusterListCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	fetch := func(api *client.Client) ([]*structs.ClusterStatus, *client.QueryMeta, error) {
		return api.Clusters().List(ctx, nil)
	}
	return runList(m, c, args, apiArgs{name: "cluster list"}, fetch, table[*structs.ClusterStatus]{
		header: "Name\tAddress\tReachable\tVersion\tStream\tJobs\tDrifted\tActive\tLast contact",
		row: func(cs *structs.ClusterStatus) string {
			reachable := yesNo(cs.Reachable)
			if !cs.Reachable && cs.Error != "" {
				reachable = "no: " + oneLine(cs.Error)
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s", cs.Name, cs.Address, reachable, orDash(cs.NomadVersion),
				upDown(cs.EventStream), cs.Jobs, cs.Drifted, cs.Active, m.ago(cs.LastContact))
		},
		empty: "No Nomad clusters",
	})
}

// upDown renders whether a stream is up.
func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// clusterFlag registers the -cluster flag of the commands on jobs: the
// Nomad cluster of the job, or of the items listed.
func clusterFlag(cluster *string) func(fs *flag.FlagSet) {
	return func(fs *flag.FlagSet) { fs.StringVar(cluster, "cluster", "", "") }
}

// jobClusterHelp documents -cluster on a command about one job.
const jobClusterHelp = `
  -cluster=<name>
    The job's Nomad cluster. Needed only when the same namespace and job ID
    exist in more than one cluster (see "nops cluster list").
`

// listClusterHelp documents -cluster on a list.
const listClusterHelp = `
  -cluster=<name>
    Only the items of this Nomad cluster (see "nops cluster list").
`

// isOtherCluster reports whether a Nomad cluster's name is neither empty
// (no cluster) nor the default cluster's, as tables decide whether to
// show a cluster column.
func isOtherCluster(cluster string) bool {
	return cluster != "" && cluster != structs.DefaultCluster
}
