package command

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// jobStatusCommand shows one managed job.
type jobStatusCommand struct {
	m *runner
}

func (c *jobStatusCommand) Synopsis() string {
	return "Show a managed job: sync, hold, block, deployments"
}

func (c *jobStatusCommand) Help() string {
	return `Usage: nops job status [options] <job>

  Shows the observed status of a managed job: its sync state and drift,
  its hold and block, its errors, and its active and last deployments.

Options:

  -namespace=<ns>
    The job's Nomad namespace. Default: default.
` + jobClusterHelp + apiFlagsHelp
}

func (c *jobStatusCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var ns, cluster string
	spec := apiArgs{name: "job status", min: 1, max: 1, desc: "a job ID", flags: func(fs *flag.FlagSet) {
		namespaceFlag(&ns)(fs)
		clusterFlag(&cluster)(fs)
	}}
	return m.runAPI(c, args, spec, func(api *client.Client, pos []string, asJSON bool) int {
		key := structs.JobKey(cluster, ns, pos[0])
		job, _, err := api.Jobs().InCluster(cluster).Info(ctx, ns, pos[0], nil)
		if err != nil {
			return m.fail(fmt.Errorf("job %s: %w", key, err))
		}
		if job.Status != nil {
			// The job's own cluster, which the server resolved.
			key = structs.JobKey(job.Status.Cluster, ns, pos[0])
		}
		if asJSON {
			return m.printJSON(job)
		}
		c.print(key, job)
		return exitOK
	})
}

// namespaceFlag registers the -namespace flag of the job commands.
func namespaceFlag(ns *string) func(fs *flag.FlagSet) {
	return func(fs *flag.FlagSet) { fs.StringVar(ns, "namespace", "default", "") }
}

// print prints the status of the job key.
func (c *jobStatusCommand) print(key string, job *structs.JobDetail) {
	m := c.m
	pairs := []string{"Job", key}
	if s := job.Status; s != nil {
		sync := string(s.Sync)
		if s.DriftSummary != "" {
			sync += ": " + oneLine(s.DriftSummary)
		}
		pairs = append(pairs,
			"Repository", orDash(s.Repository),
			"File", orDash(s.File),
			"Commit", orDash(s.Commit),
			"Policy", orDash(string(s.Policy)),
			"Sync", orDash(sync),
			"Hold", orDash(s.Hold),
			"Waiting", orDash(s.WaitingFor),
			"Orphan", yesNo(s.Orphan),
			"Observed", m.timeAgo(s.ObservedAt),
		)
	}
	if p := job.Pause; p != nil {
		who := "this job"
		switch {
		case p.Global:
			who = "every job"
		case p.JobID == "" && p.Cluster != "":
			who = "every job of cluster " + p.Cluster
		}
		pairs = append(pairs, "Paused", fmt.Sprintf("%s, by %s %s: %s", who, orDash(p.Actor), m.ago(p.CreatedAt), orDash(p.Reason)))
	}
	if b := job.Block; b != nil {
		text := fmt.Sprintf("after deployment %s", shortID(b.DeploymentID, false))
		if b.Retried {
			text += fmt.Sprintf(" (retried by %s: no longer holds)", orDash(b.RetriedBy))
		} else if b.Expired {
			text = fmt.Sprintf("no: the approval of deployment %s expired; the next commit, a live change or a retry creates a new one",
				shortID(b.DeploymentID, false))
		} else if b.AfterRegister {
			text += " failed after its register: until the spec changes or a retry"
		} else {
			text += ": until the spec or the live job changes, or a retry"
		}
		pairs = append(pairs, "Blocked", text)
	} else {
		pairs = append(pairs, "Blocked", "no")
	}
	if job.LastReconciled != nil {
		pairs = append(pairs, "Last reconciled", m.timeAgo(*job.LastReconciled))
	}
	m.kv(pairs...)
	if s := job.Status; s != nil && len(s.Errors) > 0 {
		fmt.Fprintln(m.stdout, "\nErrors")
		for _, e := range s.Errors {
			fmt.Fprintf(m.stdout, "  * %s\n", oneLine(e))
		}
	}
	deployments := table[*structs.Deployment]{
		header: "ID\tState\tCommit\tCreated\tUpdated\tError",
		row: func(d *structs.Deployment) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", shortID(d.ID, false), d.State, orDash(shortCommit(d.Commit)),
				m.ago(d.CreatedAt), m.ago(d.UpdatedAt), orDash(oneLine(d.Error)))
		},
		empty: "  none",
	}
	for _, sec := range []struct {
		title string
		d     *structs.Deployment
	}{{"Active deployment", job.ActiveDeployment}, {"Last deployment", job.LastDeployment}} {
		fmt.Fprintf(m.stdout, "\n%s\n", sec.title)
		var list []*structs.Deployment
		if sec.d != nil {
			list = append(list, sec.d)
		}
		deployments.print(m, list)
	}
}

// jobAction is what a jobActionCommand does.
type jobAction string

const (
	jobRetry     jobAction = "retry"
	jobPause     jobAction = "pause"
	jobResume    jobAction = "resume"
	jobDeployNow jobAction = "deploy-now"
)

// jobActionCommand retries, pauses, resumes or deploys now one job.
type jobActionCommand struct {
	m      *runner
	action jobAction
}

func (c *jobActionCommand) Synopsis() string {
	switch c.action {
	case jobRetry:
		return "Lift the block of a job after a failed, rejected or expired deployment"
	case jobPause:
		return "Pause a job: no new deployment starts for it"
	case jobResume:
		return "Resume a paused job"
	}
	return "Lift a closed sync window for the job's next deployment"
}

func (c *jobActionCommand) Help() string {
	var desc, opts string
	switch c.action {
	case jobRetry:
		desc = `  Lifts the block a failed or rejected deployment, or an expired approval,
  left on the job, so the next detection cycle creates a deployment again. When the live job already
  matches git, that deployment skips the register, waits for health and runs
  the post-hooks again.`
	case jobPause:
		desc = `  Pauses one job: its drift still shows, but no deployment is created for
  it, a deployment waiting to start is superseded and approvals are refused.
  A deployment already running finishes.`
		opts = "\n  -reason=<text>\n    Why the job is paused. Required.\n"
	case jobResume:
		desc = `  Ends the pause of one job; detection runs again from git.`
		opts = "\n  -reason=<text>\n    Why the job is resumed. Required.\n"
	case jobDeployNow:
		desc = `  Lifts a closed sync window for exactly one deployment of the job: the next
  deployment detection creates for it may wait for approval and run while
  the window stays closed. It does not lift a pause.`
	}
	return fmt.Sprintf(`Usage: nops job %s [options] <job>

%s

Options:

  -namespace=<ns>
    The job's Nomad namespace. Default: default.
%s%s%s`, c.action, desc, jobClusterHelp, opts, apiFlagsHelp)
}

func (c *jobActionCommand) Run(ctx context.Context, args []string) int {
	var ns, cluster, reason string
	withReason := c.action == jobPause || c.action == jobResume
	spec := apiArgs{
		name: "job " + string(c.action), min: 1, max: 1, desc: "a job ID",
		flags: func(fs *flag.FlagSet) {
			namespaceFlag(&ns)(fs)
			clusterFlag(&cluster)(fs)
			if withReason {
				fs.StringVar(&reason, "reason", "", "")
			}
		},
		check: func([]string) error {
			if withReason {
				return requireReason(reason)
			}
			return nil
		},
	}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (out any, msg string, err error) {
		key := structs.JobKey(cluster, ns, pos[0])
		jobs := api.Jobs().InCluster(cluster)
		switch c.action {
		case jobRetry:
			var b *structs.Block
			b, err = jobs.Retry(ctx, ns, pos[0])
			res := map[string]any{"namespace": ns, "job_id": pos[0], "retried": true}
			if b != nil {
				// The job's own cluster, which the server resolved.
				cluster = structs.ClusterName(b.Cluster)
				key = structs.JobKey(cluster, ns, pos[0])
			}
			if cluster != "" {
				res["cluster"] = cluster
			}
			out, msg = res, "Job "+key+": block lifted; the next detection cycle may deploy it again"
		case jobPause:
			out, err = jobs.Pause(ctx, ns, pos[0], reason)
			msg = "Job " + key + " paused"
		case jobResume:
			out, err = jobs.Resume(ctx, ns, pos[0], reason)
			msg = "Job " + key + " resumed"
		case jobDeployNow:
			var lift *structs.WindowLift
			lift, err = jobs.DeployNow(ctx, ns, pos[0])
			if lift != nil {
				key = lift.Key()
			}
			out, msg = lift, "Job "+key+": its next deployment lifts a closed sync window"
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s job %s: %w", c.action, key, err)
		}
		return out, msg, nil
	})
}

// pauseAllCommand pauses or resumes every job.
type pauseAllCommand struct {
	m     *runner
	pause bool
}

func (c *pauseAllCommand) name() string {
	if c.pause {
		return "pause"
	}
	return "resume"
}

func (c *pauseAllCommand) Synopsis() string {
	if c.pause {
		return "Pause every job, or every job of one Nomad cluster"
	}
	return "Resume every job after nops pause"
}

func (c *pauseAllCommand) Help() string {
	if c.pause {
		return `Usage: nops pause -reason=<text> [options]

  Pauses every job: drift still shows, but no deployment is created, a
  deployment waiting to start is superseded and approvals are refused. A
  deployment already running finishes. Pauses of single jobs stay.

Options:

  -reason=<text>
    Why every job is paused. Required.

  -cluster=<name>
    Pause every job of this Nomad cluster alone; "nops resume -cluster"
    ends that pause. Jobs of other clusters go on deploying.
` + apiFlagsHelp
	}
	return `Usage: nops resume -reason=<text> [options]

  Ends the pause of every job set by "nops pause". Pauses of single jobs stay
  (see "nops job resume"). Detection runs again from git.

Options:

  -reason=<text>
    Why every job is resumed. Required.

  -cluster=<name>
    End the pause of every job of this Nomad cluster set by
    "nops pause -cluster" instead.
` + apiFlagsHelp
}

func (c *pauseAllCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var reason, cluster string
	spec := apiArgs{
		name: c.name(),
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&reason, "reason", "", "")
			clusterFlag(&cluster)(fs)
		},
		check: func([]string) error { return requireReason(reason) },
	}
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		var pauses []*structs.Pause
		var err error
		jobs := api.Jobs().InCluster(cluster)
		if c.pause {
			pauses, err = jobs.PauseAll(ctx, reason)
		} else {
			pauses, err = jobs.ResumeAll(ctx, reason)
		}
		which := "every job"
		if cluster != "" {
			which = "every job of cluster " + cluster
		}
		if err != nil {
			return m.fail(fmt.Errorf("%s %s: %w", c.name(), which, err))
		}
		if asJSON {
			return printJSONList(m, pauses)
		}
		if c.pause {
			fmt.Fprintf(m.stdout, "%s is paused\n", upperFirst(which))
		} else {
			fmt.Fprintf(m.stdout, "%s is resumed\n", upperFirst(which))
		}
		m.printPauses(pauses)
		return exitOK
	})
}

// printPauses prints the current pauses.
func (m *runner) printPauses(pauses []*structs.Pause) {
	if len(pauses) == 0 {
		fmt.Fprintln(m.stdout, "No pauses in effect")
		return
	}
	fmt.Fprintln(m.stdout, "\nPauses in effect")
	pauseTable(m).print(m, pauses)
}

// pauseTable is the table of pauses.
func pauseTable(m *runner) table[*structs.Pause] {
	return table[*structs.Pause]{
		header: "Job\tActor\tSince\tReason",
		row: func(p *structs.Pause) string {
			job := p.Key
			switch {
			case p.Global:
				job = "* (every job)"
			case p.JobID == "" && p.Cluster != "":
				job = p.Cluster + ":* (every job of the cluster)"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s", job, orDash(p.Actor), m.timeAgo(p.CreatedAt), orDash(oneLine(p.Reason)))
		},
	}
}

// upperFirst returns s with its first letter in upper case.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
