package command

import (
	"context"
	"fmt"
	"io"
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
	var f apiFlags
	var filter client.DeploymentFilter
	var limit int
	var verbose bool
	fs := newFlagSet("deployment list")
	f.register(m, fs)
	fs.StringVar(&filter.Namespace, "namespace", "", "")
	fs.StringVar(&filter.JobID, "job", "", "")
	fs.StringVar(&filter.State, "state", "", "")
	fs.IntVar(&limit, "limit", 0, "")
	fs.BoolVar(&verbose, "verbose", false, "")
	if _, code, ok := m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	if filter.State != "" && !structs.DeploymentState(filter.State).Valid() {
		return m.usageError(c, fmt.Errorf("-state: %q is not a deployment state (want one of %s)", filter.State, stateList()))
	}
	if limit < 0 {
		return m.usageError(c, fmt.Errorf("-limit: must not be negative, got %d", limit))
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	list, _, err := api.Deployments(ctx, filter, &client.QueryOptions{Limit: limit})
	if err != nil {
		return m.fail(err)
	}
	if f.json {
		if list == nil {
			list = []*structs.Deployment{}
		}
		return m.printJSON(list)
	}
	if len(list) == 0 {
		fmt.Fprintln(m.stdout, "No deployments")
		return exitOK
	}
	tw := m.table()
	fmt.Fprintln(tw, "ID\tNamespace\tJob\tState\tPolicy\tCommit\tCreated")
	for _, d := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(d.ID, verbose), d.Namespace, d.JobID, d.State,
			orDash(string(d.Policy)), orDash(shortCommit(d.Commit)), m.ago(d.CreatedAt))
	}
	tw.Flush()
	return exitOK
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

  Shows one deployment: its state, hooks and hook runs, decisions, the
  (redacted) plan diff seen at detection, and its events. The ID may be a
  unique prefix of at least 4 characters. With -json, prints the deployment
  as the API returns it.

Options:

  -verbose
    Show full IDs.
` + apiFlagsHelp
}

func (c *deploymentStatusCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var f apiFlags
	var verbose bool
	fs := newFlagSet("deployment status")
	f.register(m, fs)
	fs.BoolVar(&verbose, "verbose", false, "")
	pos, code, ok := m.parse(c, fs, args, 1, 1, "a deployment ID")
	if !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	d, _, err := api.Deployment(ctx, pos[0], nil)
	if err != nil {
		return m.fail(err)
	}
	if f.json {
		return m.printJSON(d)
	}
	events, _, err := api.DeploymentEvents(ctx, d.ID, nil)
	if err != nil {
		return m.fail(err)
	}
	m.printDeployment(d, verbose)
	m.printEvents("Events", events, false)
	return exitOK
}

func (m *runner) printDeployment(d *structs.Deployment, verbose bool) {
	state := fmt.Sprintf("%s since %s", d.State, m.timeAgo(d.StateEnteredAt))
	pairs := []string{
		"ID", d.ID,
		"Job", structs.JobKey(d.Namespace, d.JobID),
		"Repository", orDash(d.Repository),
		"File", orDash(d.File),
		"Commit", orDash(d.Commit),
		"Policy", orDash(string(d.Policy)),
		"State", state,
		"Spec hash", orDash(d.SpecHash),
		"Created", m.timeAgo(d.CreatedAt),
		"Updated", m.timeAgo(d.UpdatedAt),
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
	m.kv(pairs...)

	if len(d.Hooks) > 0 {
		fmt.Fprintln(m.stdout, "\nHooks")
		tw := m.table()
		fmt.Fprintln(tw, "Phase\tPosition\tHook\tRevision job\tTimeout")
		for _, h := range d.Hooks {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", h.Phase, h.Position, h.Name, h.RevisionJobID, h.Timeout)
		}
		tw.Flush()
	}
	if len(d.HookRuns) > 0 {
		fmt.Fprintln(m.stdout, "\nHook runs")
		tw := m.table()
		fmt.Fprintln(tw, "Phase\tPosition\tHook\tState\tDispatched job\tStarted\tFinished\tError")
		for _, r := range d.HookRuns {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Phase, r.Position, r.Hook, r.State,
				orDash(r.DispatchedJobID), m.ago(r.StartedAt), m.ago(r.FinishedAt), orDash(oneLine(r.Error)))
		}
		tw.Flush()
	}
	if len(d.Decisions) > 0 {
		fmt.Fprintln(m.stdout, "\nDecisions")
		tw := m.table()
		fmt.Fprintln(tw, "Time\tDecision\tActor\tComment")
		for _, dec := range d.Decisions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", formatTime(dec.Time), dec.Kind, dec.Actor, orDash(oneLine(dec.Comment)))
		}
		tw.Flush()
	}
	fmt.Fprintln(m.stdout, "\nDiff (redacted)")
	if strings.TrimSpace(d.Diff) == "" {
		fmt.Fprintln(m.stdout, "  (none recorded)")
	} else {
		for _, line := range strings.Split(strings.TrimRight(d.Diff, "\n"), "\n") {
			fmt.Fprintln(m.stdout, "  "+line)
		}
	}
}

// printEvents prints a titled table of events; an empty title prints the
// table alone.
func (m *runner) printEvents(title string, events []*structs.Event, withObject bool) {
	if title != "" {
		fmt.Fprintf(m.stdout, "\n%s\n", title)
	}
	if len(events) == 0 {
		fmt.Fprintln(m.stdout, "No events")
		return
	}
	tw := m.table()
	m.eventRows(tw, events, withObject, true)
	tw.Flush()
}

// eventRows writes event rows, with a header when header is set.
func (m *runner) eventRows(tw io.Writer, events []*structs.Event, withObject, header bool) {
	if header {
		if withObject {
			fmt.Fprintln(tw, "Seq\tTime\tKind\tObject\tChange\tActor\tMessage")
		} else {
			fmt.Fprintln(tw, "Seq\tTime\tChange\tActor\tMessage")
		}
	}
	for _, e := range events {
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
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, formatTime(e.Time), e.Kind, e.Object, change,
				orDash(e.Actor), orDash(oneLine(e.Message)))
		} else {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, formatTime(e.Time), change, orDash(e.Actor), orDash(oneLine(e.Message)))
		}
	}
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
  its register. The server refuses (409) when the deployment is not pending
  or its job is paused. Your user and host are recorded as the actor.

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
	m := c.m
	var f apiFlags
	var text string
	fs := newFlagSet("deployment " + c.verb())
	f.register(m, fs)
	if c.approve {
		fs.StringVar(&text, "comment", "", "")
	} else {
		fs.StringVar(&text, "reason", "", "")
	}
	pos, code, ok := m.parse(c, fs, args, 1, 1, "a deployment ID")
	if !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	var d *structs.Deployment
	if c.approve {
		d, err = api.Approve(ctx, pos[0], text)
	} else {
		d, err = api.Reject(ctx, pos[0], text)
	}
	if err != nil {
		return m.fail(fmt.Errorf("%s deployment %s: %w", c.verb(), pos[0], err))
	}
	if f.json {
		return m.printJSON(d)
	}
	done := "rejected"
	if c.approve {
		done = "approved"
	}
	fmt.Fprintf(m.stdout, "Deployment %s of %s %s: now %s\n", shortID(d.ID, false), structs.JobKey(d.Namespace, d.JobID), done, d.State)
	return exitOK
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
	m := c.m
	var f apiFlags
	fs := newFlagSet("deployment promote")
	f.register(m, fs)
	pos, code, ok := m.parse(c, fs, args, 1, 1, "a deployment ID")
	if !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	if err := api.Promote(ctx, pos[0]); err != nil {
		return m.fail(fmt.Errorf("promote deployment %s: %w", pos[0], err))
	}
	d, _, err := api.Deployment(ctx, pos[0], nil)
	if err != nil {
		return m.fail(fmt.Errorf("promoted; read deployment %s: %w", pos[0], err))
	}
	if f.json {
		return m.printJSON(d)
	}
	fmt.Fprintf(m.stdout, "Deployment %s of %s: canaries promoted, now %s\n", shortID(d.ID, false), structs.JobKey(d.Namespace, d.JobID), d.State)
	return exitOK
}
