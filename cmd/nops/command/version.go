package command

import (
	"context"
	"fmt"
	"runtime"

	"github.com/nops-dev/nops/agent"
)

// versionCommand prints the version of this binary.
type versionCommand struct {
	m *runner
}

func (c *versionCommand) Synopsis() string { return "Print the version" }

func (c *versionCommand) Help() string {
	return `Usage: nops version [-json]

  Prints the version of this nops binary. It does not contact a server.

Options:

  -json
    Print the version as JSON.
`
}

func (c *versionCommand) Run(_ context.Context, args []string) int {
	fs := newFlagSet("version")
	asJSON := fs.Bool("json", false, "")
	if _, code, ok := c.m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	if *asJSON {
		return c.m.printJSON(map[string]string{"version": agent.Version, "go": runtime.Version()})
	}
	fmt.Fprintf(c.m.stdout, "Nops v%s (%s)\n", agent.Version, runtime.Version())
	return exitOK
}
