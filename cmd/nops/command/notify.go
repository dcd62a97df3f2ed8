package command

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// notifyListCommand lists the notification outbox.
type notifyListCommand struct {
	m *runner
}

func (c *notifyListCommand) Synopsis() string {
	return "List the notification outbox: pending, delivered and dead"
}

func (c *notifyListCommand) Help() string {
	return `Usage: nops notify list [options]

  Lists the replicated notification outbox, oldest first: each
  notification, what it is about, and its delivery to each notify target
  (attempts, last error).

Options:

  -state=<state>
    Only notifications in this state: pending, delivered or dead.
` + apiFlagsHelp
}

func (c *notifyListCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var state string
	spec := apiArgs{
		name:  "notify list",
		flags: func(fs *flag.FlagSet) { fs.StringVar(&state, "state", "", "") },
		check: func([]string) error {
			if state != "" && !structs.NotificationState(state).Valid() {
				return fmt.Errorf("-state: %q is not pending, delivered or dead", state)
			}
			return nil
		},
	}
	fetch := func(api *client.Client) ([]*structs.Notification, *client.QueryMeta, error) {
		return api.Notifications().List(ctx, state, nil)
	}
	return runList(m, c, args, spec, fetch, table[*structs.Notification]{
		header: "ID\tKind\tObject\tState\tTargets\tTime",
		row: func(n *structs.Notification) string {
			var targets []string
			for _, t := range n.Targets {
				s := fmt.Sprintf("%s:%s/%d", t.Name, t.State, t.Attempts)
				if t.LastError != "" && t.State != structs.TargetDelivered {
					s += " (" + oneLine(t.LastError) + ")"
				}
				targets = append(targets, s)
			}
			object := n.Object
			if k := n.JobKey(); k != "" {
				object = k
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", n.ID, n.Kind, object, n.State,
				orDash(strings.Join(targets, ", ")), m.ago(n.Time))
		},
		empty: "No notifications",
	})
}

// notifyTargetsCommand lists the notify targets of a server.
type notifyTargetsCommand struct {
	m *runner
}

func (c *notifyTargetsCommand) Synopsis() string { return "List the notify targets" }

func (c *notifyTargetsCommand) Help() string {
	return `Usage: nops notify targets [options]

  Lists the notify blocks of the server asked: name, kind and filters
  (never URLs or secrets).
` + apiFlagsHelp
}

func (c *notifyTargetsCommand) Run(ctx context.Context, args []string) int {
	fetch := func(api *client.Client) ([]*structs.NotifyTarget, *client.QueryMeta, error) {
		t, err := api.Notifications().Targets(ctx)
		return t, nil, err
	}
	all := func(l []string) string {
		if len(l) == 0 {
			return "*"
		}
		return strings.Join(l, ",")
	}
	return runList(c.m, c, args, apiArgs{name: "notify targets"}, fetch, table[*structs.NotifyTarget]{
		header: "Name\tKind\tEvents\tNamespaces\tJobs",
		row: func(t *structs.NotifyTarget) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", t.Name, t.Kind, all(t.Events), all(t.Namespaces), all(t.Jobs))
		},
		empty: "No notify targets",
	})
}

// notifyTestCommand sends a test message through one target.
type notifyTestCommand struct {
	m *runner
}

func (c *notifyTestCommand) Synopsis() string { return "Send a test message through a notify target" }

func (c *notifyTestCommand) Help() string {
	return `Usage: nops notify test [options] <name>

  Has the leader send a test message through the notify target now, and
  reports whether the receiver accepted it. The test message does not go
  through the outbox and is not retried.
` + apiFlagsHelp
}

func (c *notifyTestCommand) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: "notify test", min: 1, max: 1, desc: "a notify target name"}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (any, string, error) {
		res, err := api.Notifications().Test(ctx, pos[0])
		if err != nil {
			return nil, "", fmt.Errorf("test notify target %q: %w", pos[0], err)
		}
		if !res.OK {
			return nil, "", fmt.Errorf("notify target %q did not accept the test message: %s", pos[0], res.Error)
		}
		return res, fmt.Sprintf("Notify target %q accepted the test message %s", pos[0], res.ID), nil
	})
}
