package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// autopilotGetConfigCommand shows the autopilot configuration.
type autopilotGetConfigCommand struct {
	m *runner
}

func (c *autopilotGetConfigCommand) Synopsis() string { return "Show the autopilot configuration" }

func (c *autopilotGetConfigCommand) Help() string {
	return `Usage: nops operator autopilot get-config [options]

  Shows the autopilot configuration in force: the one set with set-config,
  stored in Raft, or else the autopilot block of the servers' configuration
  (then its modify index is 0).
` + apiFlagsHelp
}

func (c *autopilotGetConfigCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	return m.runAPI(c, args, apiArgs{name: "operator autopilot get-config"}, func(api *client.Client, _ []string, asJSON bool) int {
		conf, err := api.Operator().AutopilotGetConfig(ctx)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(conf)
		}
		printAutopilotConfig(m, conf)
		return exitOK
	})
}

func printAutopilotConfig(m *runner, conf *structs.AutopilotConfiguration) {
	tw := m.tabWriter()
	fmt.Fprintf(tw, "CleanupDeadServers\t%t\n", conf.CleanupDeadServers)
	fmt.Fprintf(tw, "LastContactThreshold\t%s\n", conf.LastContactThreshold)
	fmt.Fprintf(tw, "MaxTrailingLogs\t%d\n", conf.MaxTrailingLogs)
	fmt.Fprintf(tw, "MinQuorum\t%d\n", conf.MinQuorum)
	fmt.Fprintf(tw, "ServerStabilizationTime\t%s\n", conf.ServerStabilizationTime)
	fmt.Fprintf(tw, "ModifyIndex\t%d\n", conf.ModifyIndex)
	tw.Flush()
}

// autopilotSetConfigCommand changes the autopilot configuration.
type autopilotSetConfigCommand struct {
	m *runner
}

func (c *autopilotSetConfigCommand) Synopsis() string { return "Change the autopilot configuration" }

func (c *autopilotSetConfigCommand) Help() string {
	return `Usage: nops operator autopilot set-config [options]

  Changes the autopilot configuration of the cluster. Settings not given
  keep their current value. The change is stored in Raft and applies on
  every server from then on, over the autopilot block of their
  configuration files. It needs every server at version 0.2.0 or later.

Options:

  -cleanup-dead-servers=<true|false>
    Remove failed servers from Raft automatically, never below
    -min-quorum voters and never a majority at once.

  -last-contact-threshold=<duration>
    How long a server may go without contact with the leader and stay
    healthy.

  -max-trailing-logs=<n>
    How many Raft entries a server may trail the leader by and stay healthy.

  -min-quorum=<n>
    The fewest voters dead-server cleanup leaves.

  -server-stabilization-time=<duration>
    How long a new server must stay healthy before it becomes a voter.
` + apiFlagsHelp
}

func (c *autopilotSetConfigCommand) Run(ctx context.Context, args []string) int {
	var cleanup, contact, trailing, quorum, stabilization string
	set := map[string]*string{
		"cleanup-dead-servers": &cleanup, "last-contact-threshold": &contact, "max-trailing-logs": &trailing,
		"min-quorum": &quorum, "server-stabilization-time": &stabilization,
	}
	spec := apiArgs{
		name: "operator autopilot set-config",
		flags: func(fs *flag.FlagSet) {
			for name, p := range set {
				fs.StringVar(p, name, "", "")
			}
		},
		check: func([]string) error {
			var problems []string
			any := false
			for name, p := range set {
				if *p == "" {
					continue
				}
				any = true
				var err error
				switch name {
				case "cleanup-dead-servers":
					_, err = strconv.ParseBool(*p)
				case "last-contact-threshold", "server-stabilization-time":
					var d time.Duration
					if d, err = time.ParseDuration(*p); err == nil && d <= 0 {
						err = errors.New("must be greater than zero")
					}
				default:
					_, err = strconv.ParseUint(*p, 10, 64)
				}
				if err != nil {
					problems = append(problems, fmt.Sprintf("-%s: invalid value %q", name, *p))
				}
			}
			if !any {
				problems = append(problems, "give at least one setting to change")
			}
			if len(problems) > 0 {
				return errors.New(strings.Join(problems, "; "))
			}
			return nil
		},
	}
	return c.m.runWrite(c, args, spec, func(api *client.Client, _ []string) (any, string, error) {
		conf, err := api.Operator().AutopilotGetConfig(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("read the autopilot configuration: %w", err)
		}
		if cleanup != "" {
			conf.CleanupDeadServers, _ = strconv.ParseBool(cleanup)
		}
		if contact != "" {
			conf.LastContactThreshold = contact
		}
		if trailing != "" {
			conf.MaxTrailingLogs, _ = strconv.ParseUint(trailing, 10, 64)
		}
		if quorum != "" {
			n, _ := strconv.ParseUint(quorum, 10, 64)
			conf.MinQuorum = uint(n)
		}
		if stabilization != "" {
			conf.ServerStabilizationTime = stabilization
		}
		// Compare-and-set: a change made meanwhile by another operator is
		// not overwritten.
		cas := conf.ModifyIndex
		out, err := api.Operator().AutopilotSetConfig(ctx, conf, &cas)
		if err != nil {
			return nil, "", fmt.Errorf("set the autopilot configuration: %w", err)
		}
		return out, fmt.Sprintf("Configuration updated (index %d)", out.ModifyIndex), nil
	})
}

// autopilotHealthCommand shows the servers' health.
type autopilotHealthCommand struct {
	m *runner
}

func (c *autopilotHealthCommand) Synopsis() string { return "Show the health of the servers" }

func (c *autopilotHealthCommand) Help() string {
	return `Usage: nops operator autopilot health [options]

  Shows the health of every Raft server as the leader's autopilot sees it:
  its gossip status, version, whether it votes, its last contact with the
  leader, its last Raft index and term, whether it is healthy and since
  when. It exits 2 when the cluster is not healthy.
` + apiFlagsHelp
}

func (c *autopilotHealthCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	return m.runAPI(c, args, apiArgs{name: "operator autopilot health"}, func(api *client.Client, _ []string, asJSON bool) int {
		h, err := api.Operator().AutopilotHealth(ctx)
		if err != nil {
			return m.fail(err)
		}
		code := exitOK
		if !h.Healthy {
			code = exitUsage
		}
		if asJSON {
			if rc := m.printJSON(h); rc != exitOK {
				return rc
			}
			return code
		}
		fmt.Fprintf(m.stdout, "Healthy: %t\nFailure tolerance: %d\n\n", h.Healthy, h.FailureTolerance)
		table[structs.AutopilotServerHealth]{
			header: "Node\tID\tAddress\tSerf\tVersion\tState\tVoter\tHealthy\tLastContact\tLastTerm\tLastIndex\tStableSince",
			row: func(s structs.AutopilotServerHealth) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%t\t%t\t%s\t%d\t%d\t%s", s.Name, s.ID, s.Address, s.SerfStatus,
					s.Version, s.RaftState, s.Voter, s.Healthy, s.LastContact, s.LastTerm, s.LastIndex, s.StableSince.Format(time.RFC3339))
			},
		}.print(m, h.Servers)
		return code
	})
}
