package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// exitChanges is the exit code of `nops preview` when something would
// change, as `nomad job plan -detailed-exitcode` says so; a usage error
// is 1 there, so that CI tells the two apart.
const exitChanges = 2

// previewCommand shows what Nops would do with a repository at a ref.
type previewCommand struct {
	m *runner
}

func (c *previewCommand) Synopsis() string {
	return "Show what Nops would deploy from a branch, tag or commit"
}

func (c *previewCommand) Help() string {
	return `Usage: nops preview [options] -repository <name> -ref <ref>

  Shows what Nops would do if the repository's followed branch were at ref
  (a branch or tag name, or a full commit hash): for every managed job whose
  spec at ref differs from the live cluster, the redacted plan diff, the
  file diff against the followed branch, the policy, and any hold, block,
  dependency or validation error that would stop it; and the jobs the ref
  adds and removes. Nothing is written and nothing is registered. Jobs the
  token may not read are left out.

  Exit code: 0 when nothing would change, 2 when something would (as
  "nomad job plan" does), 1 on an error.

Options:

  -repository=<name>
    The watched repository, by its configured name. Required.

  -ref=<ref>
    A branch or tag of the repository's remote, or a full commit hash.
    Required.
` + apiFlagsHelp
}

func (c *previewCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var repo, ref string
	ran := false
	spec := apiArgs{name: "preview", max: 0,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&repo, "repository", "", "")
			fs.StringVar(&ref, "ref", "", "")
		},
		check: func([]string) error {
			if strings.TrimSpace(repo) == "" || strings.TrimSpace(ref) == "" {
				return errors.New("-repository and -ref are required")
			}
			return nil
		},
	}
	code := m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		ran = true
		p, err := api.Preview(ctx, repo, ref)
		if err != nil {
			return m.fail(fmt.Errorf("preview %s at %s: %w", repo, ref, err))
		}
		if asJSON {
			if code := m.printJSON(p); code != exitOK {
				return code
			}
		} else {
			c.print(p)
		}
		if p.Changes {
			return exitChanges
		}
		return exitOK
	})
	if !ran && code == exitUsage {
		// Exit code 2 means changes here.
		return exitError
	}
	return code
}

// print prints a preview for a reader.
func (c *previewCommand) print(p *structs.Preview) {
	w := c.m.stdout
	against := "the followed branch, not fetched yet"
	if p.BranchCommit != "" {
		against = fmt.Sprintf("branch %s at %s", orDash(p.Branch), shortCommit(p.BranchCommit))
	}
	fmt.Fprintf(w, "Preview of %s at %s (commit %s), against %s\n", p.Repository, p.Ref, shortCommit(p.Commit), against)
	for _, j := range p.Jobs {
		fmt.Fprintf(w, "\n%s job %s (%s, policy %s)\n", changeMark(j.Change), structs.JobKey(j.Cluster, j.Namespace, j.JobID), j.Change, orDash(string(j.Policy)))
		fmt.Fprintf(w, "  File:     %s\n", j.File)
		stops := false
		for _, s := range [][2]string{{"Hold", j.Hold}, {"Blocked", j.Blocked}, {"Waiting", j.WaitingFor}} {
			if s[1] != "" {
				fmt.Fprintf(w, "  %-9s %s\n", s[0]+":", s[1])
				stops = true
			}
		}
		for _, e := range j.Errors {
			fmt.Fprintf(w, "  Error:    %s\n", oneLine(e))
			stops = true
		}
		if !stops {
			fmt.Fprintf(w, "  Would deploy: nothing stops it (policy %s)\n", orDash(string(j.Policy)))
		}
		if j.Diff != "" {
			fmt.Fprintf(w, "  Plan (%s):\n%s", j.PlanType, indent(j.Diff, "    "))
		}
		if j.FileDiff != "" {
			fmt.Fprintf(w, "  File diff:\n%s", indent(j.FileDiff, "    "))
		}
	}
	if len(p.Removed) > 0 {
		fmt.Fprintln(w, "\nRemoved at this ref (Nops never stops a job: these would become orphans):")
		for _, j := range p.Removed {
			fmt.Fprintf(w, "  - job %s  %s\n", structs.JobKey(j.Cluster, j.Namespace, j.JobID), j.File)
		}
	}
	if len(p.Errors) > 0 {
		fmt.Fprintln(w, "\nFiles that are not valid jobs:")
		for _, e := range p.Errors {
			fmt.Fprintf(w, "  %s\n", oneLine(e))
		}
	}
	if !p.Changes {
		fmt.Fprintln(w, "\nNo changes: every managed job at this ref runs as declared.")
		return
	}
	fmt.Fprintf(w, "\n%d job(s) would change, %d removed, %d invalid file(s).\n", len(p.Jobs), len(p.Removed), len(p.Errors))
}

// changeMark is the sign of a change, as a plan shows it.
func changeMark(change string) string {
	switch change {
	case structs.PreviewAdded:
		return "+"
	case structs.PreviewRemoved:
		return "-"
	}
	return "+/-"
}

// indent prefixes every line of text, which ends with a newline.
func indent(text, prefix string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}
