package command

import (
	"context"
	"fmt"

	"github.com/nops-dev/nops/agent"
)

// versionCommand prints the version of this binary.
type versionCommand struct {
	m *runner
}

func (c *versionCommand) Synopsis() string { return "Print the version" }

func (c *versionCommand) Help() string {
	return `Usage: nops version [-json]

  Prints the version of this nops binary, the git commit it was built from
  and that commit's date. It does not contact a server.

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
		return c.m.printJSON(agent.Build())
	}
	fmt.Fprintln(c.m.stdout, agent.Build())
	return exitOK
}
