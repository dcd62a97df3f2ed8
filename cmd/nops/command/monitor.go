package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/rpc/client"
)

// monitorCommand streams a server's logs.
type monitorCommand struct {
	m *runner
}

func (c *monitorCommand) Synopsis() string { return "Stream the logs of a server" }

func (c *monitorCommand) Help() string {
	return `Usage: nops monitor [-log-level=<level>] [-server=<node>] [options]

  Streams the logs of a server, at the level asked whatever the level the
  server logs at, until interrupted. The server asked (-address) forwards
  the stream of another server named with -server. A client that reads too
  slowly loses lines rather than slowing the server; the stream says how
  many. Known secrets are redacted.

Options:

  -log-level=<level>
    trace, debug, info, warn or error. Default: info.

  -server=<node>
    The node name or ID of the server whose logs to stream. Default: the
    server asked.

  -log-json
    Stream the log lines as JSON.
` + apiFlagsHelp
}

func (c *monitorCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var level, server string
	var logJSON bool
	spec := apiArgs{
		name: "monitor",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&level, "log-level", "info", "")
			fs.StringVar(&server, "server", "", "")
			fs.BoolVar(&logJSON, "log-json", false, "")
		},
		check: func([]string) error {
			switch l := hclog.LevelFromString(level); l {
			case hclog.NoLevel, hclog.Off:
				return fmt.Errorf("-log-level: %q is not one of trace, debug, info, warn, error", level)
			}
			return nil
		},
	}
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, _ bool) int {
		stream, err := api.Agent().Monitor(ctx, server, level, logJSON)
		if err != nil {
			return m.fail(err)
		}
		defer stream.Close()
		if _, err := io.Copy(m.stdout, stream); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			return m.fail(fmt.Errorf("the log stream broke: %w", err))
		}
		return exitOK
	})
}
