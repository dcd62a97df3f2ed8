package command

import (
	"context"
	"fmt"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// repoListCommand lists the repositories and what was last fetched.
type repoListCommand struct {
	m *runner
}

func (c *repoListCommand) Synopsis() string {
	return "List the git repositories: head, last fetch, errors"
}

func (c *repoListCommand) Help() string {
	return `Usage: nops repo list [options]

  Lists the git repositories the cluster watches, with the commit last
  fetched, when, how many job files it has, and fetch and parse errors.
` + apiFlagsHelp
}

func (c *repoListCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	fetch := func(api *client.Client) ([]*structs.RepoStatus, *client.QueryMeta, error) {
		return api.Repos().List(ctx, nil)
	}
	return runList(m, c, args, apiArgs{name: "repo list"}, fetch, table[*structs.RepoStatus]{
		header: "Name\tURL\tBranch\tPath\tHead\tFiles\tLast fetch\tErrors",
		row: func(r *structs.RepoStatus) string {
			errs := "-"
			switch {
			case r.FetchError != "":
				errs = "fetch: " + oneLine(r.FetchError)
			case len(r.ParseErrors) > 0:
				errs = fmt.Sprintf("%d parse errors: %s", len(r.ParseErrors), oneLine(r.ParseErrors[0]))
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s", r.Name, r.URL, r.Branch, r.Path, orDash(shortCommit(r.Head)),
				r.Files, m.ago(r.LastFetch), errs)
		},
		empty: "No repositories",
	})
}

// repoRefreshCommand asks the leader to fetch a repository now.
type repoRefreshCommand struct {
	m *runner
}

func (c *repoRefreshCommand) Synopsis() string { return "Fetch a git repository now" }

func (c *repoRefreshCommand) Help() string {
	return `Usage: nops repo refresh [options] <name>

  Asks the leader to fetch a repository now instead of at its next poll;
  a new commit starts a detection cycle.
` + apiFlagsHelp
}

func (c *repoRefreshCommand) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: "repo refresh", min: 1, max: 1, desc: "a repository name"}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (any, string, error) {
		name := pos[0]
		if _, err := api.Repos().Refresh(ctx, name); err != nil {
			return nil, "", fmt.Errorf("refresh repository %q: %w", name, err)
		}
		// Show the repository as the replicated state has it now.
		var status *structs.RepoStatus
		if repos, _, err := api.Repos().List(ctx, nil); err == nil {
			for _, r := range repos {
				if r.Name == name {
					status = r
				}
			}
		}
		out := map[string]any{"refreshed": name, "status": status}
		if status == nil {
			return out, fmt.Sprintf("Repository %q fetched", name), nil
		}
		head := "no commit yet"
		if status.Head != "" {
			head = "head " + shortCommit(status.Head)
		}
		msg := fmt.Sprintf("Repository %q fetched: %s, %d job files", name, head, status.Files)
		if status.FetchError != "" {
			msg += ", fetch error: " + oneLine(status.FetchError)
		}
		return out, msg, nil
	})
}

// orphansCommand lists the orphan jobs.
type orphansCommand struct {
	m *runner
}

func (c *orphansCommand) Synopsis() string {
	return "List jobs Nops deployed that git no longer declares"
}

func (c *orphansCommand) Help() string {
	return `Usage: nops orphans [options]

  Lists the orphan jobs: jobs Nops once deployed that are no longer declared
  in git but still exist in Nomad. Nops never stops them; stop them with
  "nomad job stop" when they are no longer wanted.

Options:
` + listClusterHelp + apiFlagsHelp
}

func (c *orphansCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var cluster string
	fetch := func(api *client.Client) ([]*structs.JobStatus, *client.QueryMeta, error) {
		return api.Jobs().InCluster(cluster).Orphans(ctx, nil)
	}
	return runList(m, c, args, apiArgs{name: "orphans", flags: clusterFlag(&cluster)}, fetch, table[*structs.JobStatus]{
		header: "Namespace\tJob\tRepository\tFile\tLast commit\tObserved",
		row: func(j *structs.JobStatus) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", j.Namespace, j.JobID, orDash(j.Repository), orDash(j.File),
				orDash(shortCommit(j.Commit)), m.ago(j.ObservedAt))
		},
		empty:   "No orphan jobs",
		cluster: func(j *structs.JobStatus) string { return j.Cluster },
	})
}
