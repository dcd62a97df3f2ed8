package command

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// deploymentListCommand lists deployments, newest first.
type deploymentListCommand struct {
	m *runner
}

func (c *deploymentListCommand) Synopsis() string { return "List deployments, newest first" }

func (c *deploymentListCommand) Help() string {
	return `Usage: nops deployment list [options]

  Lists deployments, newest first.

Options:

  -namespace=<ns>
    Only deployments of jobs in this namespace.
` + listClusterHelp + `
  -job=<id>
    Only deployments of this job.

  -state=<state>
    Only deployments in this state: ` + stateList() + `.

  -limit=<n>
    Show at most n deployments. Default: all.

  -verbose
    Show full IDs.
` + apiFlagsHelp
}

func stateList() string {
	var s []string
	for _, st := range structs.AllStates {
		s = append(s, string(st))
	}
	return strings.Join(s, ", ")
}

func (c *deploymentListCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var filter client.DeploymentFilter
	var limit int
	var verbose bool
	spec := apiArgs{
		name: "deployment list",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&filter.Namespace, "namespace", "", "")
			clusterFlag(&filter.Cluster)(fs)
			fs.StringVar(&filter.JobID, "job", "", "")
			fs.StringVar(&filter.State, "state", "", "")
			fs.IntVar(&limit, "limit", 0, "")
			fs.BoolVar(&verbose, "verbose", false, "")
		},
		check: func([]string) error {
			if filter.State != "" && !structs.DeploymentState(filter.State).Valid() {
				return fmt.Errorf("-state: %q is not a deployment state (want one of %s)", filter.State, stateList())
			}
			return checkLimit(limit)
		},
	}
	fetch := func(api *client.Client) ([]*structs.Deployment, *client.QueryMeta, error) {
		return api.Deployments().List(ctx, filter, &client.QueryOptions{Limit: limit})
	}
	return runList(m, c, args, spec, fetch, table[*structs.Deployment]{
		header: "ID\tNamespace\tJob\tState\tPolicy\tCommit\tCreated",
		row: func(d *structs.Deployment) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", shortID(d.ID, verbose), d.Namespace, d.JobID, d.State,
				orDash(string(d.Policy)), orDash(shortCommit(d.Commit)), m.ago(d.CreatedAt))
		},
		empty:   "No deployments",
		cluster: func(d *structs.Deployment) string { return d.Cluster },
	})
}

// deploymentStatusCommand shows one deployment with its hooks, decisions,
// diff and events.
type deploymentStatusCommand struct {
	m *runner
}

func (c *deploymentStatusCommand) Synopsis() string {
	return "Show a deployment: hook runs, decisions, diff and events"
}

func (c *deploymentStatusCommand) Help() string {
	return `Usage: nops deployment status [options] <id>

  Shows one deployment: its commit (subject, author, link), state, hooks
  and hook runs, decisions, the (redacted) plan diff seen at detection, and
  its events. The ID may be a unique prefix of at least 4 characters. With
  -json, prints the deployment as the API returns it.

Options:

  -diff
    Also show the file diff: the (redacted) unified diff of the job file
    and its variables file since the job's last completed deployment.

  -verbose
    Show full IDs, the whole commit message, and the file diff.
` + apiFlagsHelp
}

func (c *deploymentStatusCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var verbose, fileDiff bool
	spec := apiArgs{
		name: "deployment status", min: 1, max: 1, desc: "a deployment ID",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&verbose, "verbose", false, "")
			fs.BoolVar(&fileDiff, "diff", false, "")
		},
	}
	return m.runAPI(c, args, spec, func(api *client.Client, pos []string, asJSON bool) int {
		d, _, err := api.Deployments().Info(ctx, pos[0], nil)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(d)
		}
		events, _, err := api.Deployments().Events(ctx, d.ID, nil)
		if err != nil {
			return m.fail(err)
		}
		m.printDeployment(d, verbose, fileDiff || verbose)
		m.printEvents("Events", events, false)
		return exitOK
	})
}

func (m *runner) printDeployment(d *structs.Deployment, verbose, fileDiff bool) {
	m.kv(m.deploymentPairs(d, verbose)...)
	m.deploymentTables(d)
	if body := structs.CommitBody(d.CommitMessage); verbose && body != "" {
		fmt.Fprintln(m.stdout, "\nCommit message")
		m.indented(body)
	}
	m.deploymentDiffs(d, fileDiff)
}

// deploymentPairs returns the fields of a deployment's summary, as label
// and value pairs, those without a value left out.
func (m *runner) deploymentPairs(d *structs.Deployment, verbose bool) []string {
	state := fmt.Sprintf("%s since %s", d.State, m.timeAgo(d.StateEnteredAt))
	pairs := []string{
		"ID", d.ID,
		"Job", structs.JobKey(d.Cluster, d.Namespace, d.JobID),
		"Repository", orDash(d.Repository),
		"File", orDash(d.File),
		"Commit", orDash(d.Commit),
		"Subject", orDash(d.CommitSubject()),
		"Author", orDash(d.CommitAuthor),
	}
	if d.CommitCommitter != "" && d.CommitCommitter != d.CommitAuthor {
		pairs = append(pairs, "Committer", d.CommitCommitter)
	}
	if d.CommitSigner != "" {
		pairs = append(pairs, "Signed by", d.CommitSigner)
	}
	if !d.CommitTime.IsZero() {
		pairs = append(pairs, "Committed", m.timeAgo(d.CommitTime))
	}
	if d.CommitURL != "" {
		pairs = append(pairs, "Link", d.CommitURL)
	}
	pairs = append(pairs,
		"Policy", orDash(string(d.Policy)),
		"State", state,
		"Spec hash", orDash(d.SpecHash),
		"Created", m.timeAgo(d.CreatedAt),
		"Updated", m.timeAgo(d.UpdatedAt),
	)
	if d.Policy == structs.PolicyApproval {
		pairs = append(pairs, "Approvals", m.approvals(d))
	}
	if at := d.ApprovalExpiresAt(); !at.IsZero() {
		pairs = append(pairs, "Expires", m.timeAgo(at))
	}
	if d.LiftedWindow {
		pairs = append(pairs, "Deploy now", "lifts a closed sync window, by "+orDash(d.LiftedBy))
	}
	if d.SkipRegister {
		pairs = append(pairs, "Retry", "the live job already matched git: no register")
	}
	if !d.RegisterStartedAt.IsZero() {
		pairs = append(pairs, "Register started", m.timeAgo(d.RegisterStartedAt))
	}
	if d.NomadEvalID != "" {
		pairs = append(pairs, "Nomad evaluation", shortID(d.NomadEvalID, verbose))
	}
	if d.NomadDeploymentID != "" {
		pairs = append(pairs, "Nomad deployment", shortID(d.NomadDeploymentID, verbose))
	}
	if d.Registered {
		pairs = append(pairs, "Job version", fmt.Sprint(d.JobVersion))
	}
	if !d.HealthDeadline.IsZero() {
		pairs = append(pairs, "Healthy by", m.timeAgo(d.HealthDeadline))
	}
	if d.Error != "" {
		pairs = append(pairs, "Error", oneLine(d.Error))
	}
	return pairs
}

// deploymentTables prints a deployment's hooks, hook runs and decisions.
func (m *runner) deploymentTables(d *structs.Deployment) {
	table[structs.FrozenHook]{
		header: "Phase\tPosition\tHook\tRevision job\tTimeout",
		row: func(h structs.FrozenHook) string {
			return fmt.Sprintf("%s\t%d\t%s\t%s\t%s", h.Phase, h.Position, h.Name, h.RevisionJobID, h.Timeout)
		},
	}.section(m, "Hooks", d.Hooks)
	table[structs.HookRun]{
		header: "Phase\tPosition\tHook\tState\tDispatched job\tStarted\tFinished\tError",
		row: func(r structs.HookRun) string {
			return fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s", r.Phase, r.Position, r.Hook, r.State,
				orDash(r.DispatchedJobID), m.ago(r.StartedAt), m.ago(r.FinishedAt), orDash(oneLine(r.Error)))
		},
	}.section(m, "Hook runs", d.HookRuns)
	table[structs.Decision]{
		header: "Time\tDecision\tActor\tComment",
		row: func(dec structs.Decision) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s", formatTime(dec.Time), dec.Kind, dec.Actor, orDash(oneLine(dec.Comment)))
		},
	}.section(m, "Decisions", d.Decisions)
}

// deploymentDiffs prints a deployment's plan diff, and its file diff (with
// -diff) or the file diff's size.
func (m *runner) deploymentDiffs(d *structs.Deployment, fileDiff bool) {
	fmt.Fprintln(m.stdout, "\nDiff (redacted)")
	if strings.TrimSpace(d.Diff) == "" {
		fmt.Fprintln(m.stdout, "  (none recorded)")
	} else {
		m.indented(d.Diff)
	}
	switch {
	case fileDiff:
		fmt.Fprintln(m.stdout, "\nFile diff (redacted)")
		switch {
		case d.FileDiff == "" && d.CommitMessage == "":
			fmt.Fprintln(m.stdout, "  (none recorded)")
		case d.FileDiff == "":
			fmt.Fprintln(m.stdout, "  (no change of the job's files since its last completed deployment)")
		default:
			m.indented(d.FileDiff)
		}
	case d.FileDiff != "":
		added, removed := structs.FileDiffCounts(d.FileDiff)
		fmt.Fprintf(m.stdout, "\nFile diff: +%d -%d lines (show it with -diff)\n", added, removed)
	}
}

// indented prints a text's lines indented by two spaces.
func (m *runner) indented(text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintln(m.stdout, "  "+line)
	}
}

// approvals says how many approvals a deployment has of those it needs,
// and who gave them when: "1 of 2 (alice at 2025-05-01 09:00:00 UTC (5m
// ago))".
func (m *runner) approvals(d *structs.Deployment) string {
	given := d.ApprovalsGiven()
	text := fmt.Sprintf("%d of %d", len(given), d.RequiredApprovals())
	var who []string
	for _, a := range given {
		who = append(who, a.Actor+" at "+m.timeAgo(a.Time))
	}
	if len(who) > 0 {
		text += " (" + strings.Join(who, ", ") + ")"
	}
	return text
}

// printEvents prints a titled table of events; an empty title prints the
// table alone.
func (m *runner) printEvents(title string, events []*structs.Event, withObject bool) {
	if title != "" {
		fmt.Fprintf(m.stdout, "\n%s\n", title)
	}
	m.eventTable(withObject).print(m, events)
}

// eventTable is the table of events, with the object of each or without.
func (m *runner) eventTable(withObject bool) table[*structs.Event] {
	t := table[*structs.Event]{header: "Seq\tTime\tChange\tActor\tMessage", empty: "No events"}
	if withObject {
		t.header = "Seq\tTime\tKind\tObject\tChange\tActor\tMessage"
		t.cluster = func(e *structs.Event) string { return e.Cluster }
	}
	t.row = func(e *structs.Event) string {
		change := "-"
		switch {
		case e.From != "" && e.To != "":
			change = e.From + " -> " + e.To
		case e.To != "":
			change = "-> " + e.To
		case e.From != "":
			change = e.From + " ->"
		}
		if withObject {
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s", e.Seq, formatTime(e.Time), e.Kind, e.Object, change,
				orDash(e.Actor), orDash(oneLine(e.Message)))
		}
		return fmt.Sprintf("%d\t%s\t%s\t%s\t%s", e.Seq, formatTime(e.Time), change, orDash(e.Actor), orDash(oneLine(e.Message)))
	}
	return t
}

// deploymentDecideCommand approves or rejects a deployment.
type deploymentDecideCommand struct {
	m       *runner
	approve bool
}

func (c *deploymentDecideCommand) verb() string {
	if c.approve {
		return "approve"
	}
	return "reject"
}

func (c *deploymentDecideCommand) Synopsis() string {
	if c.approve {
		return "Approve a deployment waiting for approval"
	}
	return "Reject a deployment waiting for approval"
}

func (c *deploymentDecideCommand) Help() string {
	if c.approve {
		return `Usage: nops deployment approve [options] <id>

  Approves a deployment in pending_approval: it goes on to its pre-hooks or
  its register once it has the approvals its job's nops_approvals asks for,
  each from a distinct identity; until then it waits, with yours recorded.
  The server refuses (409) when the deployment is not pending, its job is
  paused, its approval TTL ran out or you already approved it, and (403)
  under approval { forbid_self } when you wrote its commit. Your user and
  host are recorded as the actor.

Options:

  -comment=<text>
    A comment recorded with the decision.
` + apiFlagsHelp
	}
	return `Usage: nops deployment reject [options] <id>

  Rejects a deployment in pending_approval. The job stays blocked on this
  spec until it changes or someone retries it. Your user and host are
  recorded as the actor.

Options:

  -reason=<text>
    Why, recorded with the decision.
` + apiFlagsHelp
}

func (c *deploymentDecideCommand) Run(ctx context.Context, args []string) int {
	var text string
	spec := apiArgs{
		name: "deployment " + c.verb(), min: 1, max: 1, desc: "a deployment ID",
		flags: func(fs *flag.FlagSet) {
			if c.approve {
				fs.StringVar(&text, "comment", "", "")
			} else {
				fs.StringVar(&text, "reason", "", "")
			}
		},
	}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (any, string, error) {
		var d *structs.Deployment
		var err error
		done := "rejected"
		if c.approve {
			d, err = api.Deployments().Approve(ctx, pos[0], text)
			done = "approved"
		} else {
			d, err = api.Deployments().Reject(ctx, pos[0], text)
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s deployment %s: %w", c.verb(), pos[0], err)
		}
		msg := fmt.Sprintf("Deployment %s of %s %s: now %s", shortID(d.ID, false), structs.JobKey(d.Cluster, d.Namespace, d.JobID), done, d.State)
		if c.approve && d.State == structs.StatePendingApproval {
			msg += fmt.Sprintf(", with %d of %d approvals", len(d.ApprovalsGiven()), d.RequiredApprovals())
		}
		return d, msg, nil
	})
}

// deploymentPromoteCommand promotes the canaries of a deployment.
type deploymentPromoteCommand struct {
	m *runner
}

func (c *deploymentPromoteCommand) Synopsis() string { return "Promote the canaries of a deployment" }

func (c *deploymentPromoteCommand) Help() string {
	return `Usage: nops deployment promote [options] <id>

  Promotes the canaries of a deployment that wait for a person's promotion.
  Its apply timeout restarts in full after the promotion.
` + apiFlagsHelp
}

func (c *deploymentPromoteCommand) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: "deployment promote", min: 1, max: 1, desc: "a deployment ID"}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (any, string, error) {
		if _, err := api.Deployments().Promote(ctx, pos[0]); err != nil {
			return nil, "", fmt.Errorf("promote deployment %s: %w", pos[0], err)
		}
		d, _, err := api.Deployments().Info(ctx, pos[0], nil)
		if err != nil {
			return nil, "", fmt.Errorf("promoted; read deployment %s: %w", pos[0], err)
		}
		return d, fmt.Sprintf("Deployment %s of %s: canaries promoted, now %s", shortID(d.ID, false), structs.JobKey(d.Cluster, d.Namespace, d.JobID), d.State), nil
	})
}

// deploymentSkipRequirementsCommand lets a deployment that waits for its
// cluster's promotion order (SPEC section 16) start without it.
type deploymentSkipRequirementsCommand struct {
	m *runner
}

func (c *deploymentSkipRequirementsCommand) Synopsis() string {
	return "Let a deployment start without its cluster's promotion order"
}

func (c *deploymentSkipRequirementsCommand) Help() string {
	return `Usage: nops deployment skip-requirements -reason=<text> [options] <id>

  Lets a deployment that waits in detected for the clusters its cluster
  requires (nomad "prod" { requires = ["staging"], bake = "30m" }) start
  without them: a failure there, or a bake not over yet, no longer holds
  it. It then goes on as its policy says (an approval policy still asks
  for approval). Needs the deploy capability on the job; the reason and
  your user and host are recorded in the deployment's events. The server
  refuses (409) a deployment that is no longer detected.

Options:

  -reason=<text>
    Why the deployment may skip the promotion order. Required.
` + apiFlagsHelp
}

func (c *deploymentSkipRequirementsCommand) Run(ctx context.Context, args []string) int {
	var reason string
	spec := apiArgs{
		name: "deployment skip-requirements", min: 1, max: 1, desc: "a deployment ID",
		flags: func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "") },
	}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (any, string, error) {
		if strings.TrimSpace(reason) == "" {
			return nil, "", fmt.Errorf("skip requirements of deployment %s: -reason is required: say why it may skip its cluster's promotion order", pos[0])
		}
		d, err := api.Deployments().SkipRequirements(ctx, pos[0], reason)
		if err != nil {
			return nil, "", fmt.Errorf("skip requirements of deployment %s: %w", pos[0], err)
		}
		return d, fmt.Sprintf("Deployment %s of %s skips the promotion order of cluster %s: now %s",
			shortID(d.ID, false), structs.JobKey(d.Cluster, d.Namespace, d.JobID), structs.ClusterName(d.Cluster), d.State), nil
	})
}
