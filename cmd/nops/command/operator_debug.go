package command

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nops-dev/nops/cmd/nops/command/debugbundle"
	"github.com/nops-dev/nops/rpc/client"
)

// operatorDebugCommand gathers a debug bundle of the cluster.
type operatorDebugCommand struct {
	m *runner
}

func (c *operatorDebugCommand) Synopsis() string { return "Gather a debug bundle of every server" }

func (c *operatorDebugCommand) Help() string {
	return `Usage: nops operator debug [-duration=<d>] [-output=<dir>] [-log-level=<level>] [options]

  Gathers what is needed to debug the cluster into one .tar.gz, as Nomad's
  operator debug does. From the cluster: the members, the Raft
  configuration, the autopilot configuration and health. From every server
  (through the server asked): its agent self and configuration, its
  metrics, its goroutine stacks and heap profile (when the server runs
  with enable_debug = true), and its logs for -duration. Secrets the
  servers know (Nomad token, gossip keys, repository credentials) are
  redacted by the servers before anything leaves them.

  The bundle's index.txt lists what was gathered and what failed.

Options:

  -duration=<d>
    How long to record the servers' logs. Default: 30s.

  -log-level=<level>
    The level of the recorded logs. Default: debug.

  -output=<dir>
    The directory the bundle is written to. Default: the current directory.
` + apiFlagsHelp
}

func (c *operatorDebugCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var duration time.Duration
	var output, level string
	spec := apiArgs{
		name: "operator debug",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&duration, "duration", 30*time.Second, "")
			fs.StringVar(&output, "output", ".", "")
			fs.StringVar(&level, "log-level", "debug", "")
		},
		check: func([]string) error {
			if duration <= 0 || duration > time.Hour {
				return fmt.Errorf("-duration: must be between 0 and 1h, got %s", duration)
			}
			if info, err := os.Stat(output); err != nil || !info.IsDir() {
				return fmt.Errorf("-output: %q is not a directory", output)
			}
			return nil
		},
	}
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		b, err := debugbundle.Gather(ctx, api, debugbundle.Options{Duration: duration, LogLevel: level, Progress: m.stderr})
		if err != nil {
			return m.fail(err)
		}
		file, err := b.Write(output)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(map[string]any{"bundle": file, "servers": b.Servers, "index": b.Index})
		}
		fmt.Fprintf(m.stdout, "Created debug bundle %s\n", file)
		return exitOK
	})
}
