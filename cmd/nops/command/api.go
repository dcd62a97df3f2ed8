package command

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/nops-dev/nops/rpc/client"
)

// apiArgs is what a client command accepts besides the API flags.
type apiArgs struct {
	// name is the command's name ("repo list"), for its flag set.
	name string
	// min and max bound the number of positional arguments (max < 0: no
	// bound); desc says what they are, for usage errors.
	min, max int
	desc     string
	// flags, when set, registers the command's own flags.
	flags func(fs *flag.FlagSet)
	// check, when set, checks the parsed flags and arguments before any
	// request: an error is a usage error.
	check func(pos []string) error
	// load, when set, reads the local input the command sends (a file)
	// before the client is built: an error fails the command.
	load func(pos []string) error
}

// runAPI runs the part every client command shares: it parses args as spec
// says, checks them, loads the local input, builds the API client and hands
// it to do with the positional arguments and whether -json was given. do
// returns the exit code.
func (m *runner) runAPI(c command, args []string, spec apiArgs, do func(api *client.Client, pos []string, asJSON bool) int) int {
	var f apiFlags
	fs := newFlagSet(spec.name)
	f.register(m, fs)
	if spec.flags != nil {
		spec.flags(fs)
	}
	pos, code, ok := m.parse(c, fs, args, spec.min, spec.max, spec.desc)
	if !ok {
		return code
	}
	if spec.check != nil {
		if err := spec.check(pos); err != nil {
			return m.usageError(c, err)
		}
	}
	if spec.load != nil {
		if err := spec.load(pos); err != nil {
			return m.fail(err)
		}
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	return do(api, pos, f.json)
}

// runWrite runs a command that makes one change: do makes it and returns
// what -json prints and the line printed otherwise, or an error that names
// the change.
func (m *runner) runWrite(c command, args []string, spec apiArgs, do func(api *client.Client, pos []string) (out any, msg string, err error)) int {
	return m.runAPI(c, args, spec, func(api *client.Client, pos []string, asJSON bool) int {
		out, msg, err := do(api, pos)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(out)
		}
		fmt.Fprintln(m.stdout, msg)
		return exitOK
	})
}

// runList runs a command that lists objects: fetch reads them, and they
// are printed as t says.
func runList[T any](m *runner, c command, args []string, spec apiArgs, fetch func(api *client.Client) ([]T, *client.QueryMeta, error), t table[T]) int {
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		items, _, err := fetch(api)
		if err != nil {
			return m.fail(err)
		}
		return t.list(m, items, asJSON)
	})
}

// table is how a list of T prints as a table.
type table[T any] struct {
	// header is the column names, tab-separated.
	header string
	// row returns the cells of one item, tab-separated.
	row func(T) string
	// empty is printed instead of a table without rows; when it is "" the
	// header is printed alone.
	empty string
	// cluster, when set, returns the Nomad cluster of an item ("" for
	// none, shown as "-"): a Cluster column leads the table when any item
	// is of a cluster other than the default one (a server of one Nomad
	// cluster shows none).
	cluster func(T) string
}

// print prints items as the table on stdout.
func (t table[T]) print(m *runner, items []T) {
	if len(items) == 0 && t.empty != "" {
		fmt.Fprintln(m.stdout, t.empty)
		return
	}
	withCluster := false
	if t.cluster != nil {
		for _, item := range items {
			if isOtherCluster(t.cluster(item)) {
				withCluster = true
				break
			}
		}
	}
	tw := m.tabWriter()
	if t.header != "" {
		if withCluster {
			fmt.Fprint(tw, "Cluster\t")
		}
		fmt.Fprintln(tw, t.header)
	}
	for _, item := range items {
		if withCluster {
			fmt.Fprint(tw, orDash(t.cluster(item))+"\t")
		}
		fmt.Fprintln(tw, t.row(item))
	}
	tw.Flush()
}

// section prints items as the table under a title, after a blank line;
// nothing when there are none.
func (t table[T]) section(m *runner, title string, items []T) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(m.stdout, "\n%s\n", title)
	t.print(m, items)
}

// list prints items as a JSON array (never null) or as the table.
func (t table[T]) list(m *runner, items []T, asJSON bool) int {
	if asJSON {
		return printJSONList(m, items)
	}
	t.print(m, items)
	return exitOK
}

// printJSONList prints items as a JSON array: [] when there are none, never
// null.
func printJSONList[T any](m *runner, items []T) int {
	if items == nil {
		items = []T{}
	}
	return m.printJSON(items)
}

// requireReason checks the -reason of a command that records why.
func requireReason(reason string) error {
	if strings.TrimSpace(reason) == "" {
		return errors.New("-reason is required: say why, it is recorded with who did it")
	}
	return nil
}

// checkLimit checks a -limit flag.
func checkLimit(limit int) error {
	if limit < 0 {
		return fmt.Errorf("-limit: must not be negative, got %d", limit)
	}
	return nil
}
