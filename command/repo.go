package command

import (
	"context"
	"fmt"

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
	var f apiFlags
	fs := newFlagSet("repo list")
	f.register(m, fs)
	if _, code, ok := m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	repos, _, err := api.Repos(ctx, nil)
	if err != nil {
		return m.fail(err)
	}
	if f.json {
		if repos == nil {
			repos = []*structs.RepoStatus{}
		}
		return m.printJSON(repos)
	}
	if len(repos) == 0 {
		fmt.Fprintln(m.stdout, "No repositories")
		return exitOK
	}
	tw := m.table()
	fmt.Fprintln(tw, "Name\tURL\tBranch\tPath\tHead\tFiles\tLast fetch\tErrors")
	for _, r := range repos {
		errs := "-"
		switch {
		case r.FetchError != "":
			errs = "fetch: " + oneLine(r.FetchError)
		case len(r.ParseErrors) > 0:
			errs = fmt.Sprintf("%d parse errors: %s", len(r.ParseErrors), oneLine(r.ParseErrors[0]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Name, r.URL, r.Branch, r.Path, orDash(shortCommit(r.Head)),
			r.Files, m.ago(r.LastFetch), errs)
	}
	tw.Flush()
	return exitOK
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
	m := c.m
	var f apiFlags
	fs := newFlagSet("repo refresh")
	f.register(m, fs)
	pos, code, ok := m.parse(c, fs, args, 1, 1, "a repository name")
	if !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	if err := api.RefreshRepo(ctx, pos[0]); err != nil {
		return m.fail(fmt.Errorf("refresh repository %q: %w", pos[0], err))
	}
	// Show the repository as the replicated state has it now.
	var status *structs.RepoStatus
	if repos, _, err := api.Repos(ctx, nil); err == nil {
		for _, r := range repos {
			if r.Name == pos[0] {
				status = r
			}
		}
	}
	if f.json {
		return m.printJSON(map[string]any{"refreshed": pos[0], "status": status})
	}
	if status == nil {
		fmt.Fprintf(m.stdout, "Repository %q fetched\n", pos[0])
		return exitOK
	}
	head := "no commit yet"
	if status.Head != "" {
		head = "head " + shortCommit(status.Head)
	}
	fmt.Fprintf(m.stdout, "Repository %q fetched: %s, %d job files", pos[0], head, status.Files)
	if status.FetchError != "" {
		fmt.Fprintf(m.stdout, ", fetch error: %s", oneLine(status.FetchError))
	}
	fmt.Fprintln(m.stdout)
	return exitOK
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
` + apiFlagsHelp
}

func (c *orphansCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var f apiFlags
	fs := newFlagSet("orphans")
	f.register(m, fs)
	if _, code, ok := m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	jobs, _, err := api.Orphans(ctx, nil)
	if err != nil {
		return m.fail(err)
	}
	if f.json {
		if jobs == nil {
			jobs = []*structs.JobStatus{}
		}
		return m.printJSON(jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(m.stdout, "No orphan jobs")
		return exitOK
	}
	tw := m.table()
	fmt.Fprintln(tw, "Namespace\tJob\tRepository\tFile\tLast commit\tObserved")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.Namespace, j.JobID, orDash(j.Repository), orDash(j.File),
			orDash(shortCommit(j.Commit)), m.ago(j.ObservedAt))
	}
	tw.Flush()
	return exitOK
}
