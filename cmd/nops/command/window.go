package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// windowListCommand lists the sync windows.
type windowListCommand struct {
	m *runner
}

func (c *windowListCommand) Synopsis() string { return "List the sync windows" }

func (c *windowListCommand) Help() string {
	return `Usage: nops window list [options]

  Lists the sync windows of the cluster.
` + apiFlagsHelp
}

func (c *windowListCommand) Run(ctx context.Context, args []string) int {
	fetch := func(api *client.Client) ([]*structs.SyncWindow, *client.QueryMeta, error) {
		return api.Windows().List(ctx, nil)
	}
	return runList(c.m, c, args, apiArgs{name: "window list"}, fetch, table[*structs.SyncWindow]{
		header: "Name\tKind\tSchedule\tDuration\tTimezone\tNamespaces\tJobs",
		row: func(w *structs.SyncWindow) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", w.Name, w.Kind, w.Schedule, w.Duration, orDash(w.Timezone),
				globList(w.Namespaces), globList(w.Jobs))
		},
		empty: "No sync windows",
	})
}

// windowApplyCommand creates or replaces the sync windows of a file.
type windowApplyCommand struct {
	m *runner
}

func (c *windowApplyCommand) Synopsis() string { return "Create or replace sync windows from a file" }

func (c *windowApplyCommand) Help() string {
	return `Usage: nops window apply -f <file> [options]

  Creates or replaces every sync window declared in an HCL (or JSON, by the
  .json extension) file:

    window "nightly-freeze" {
      kind       = "deny"          # allow | deny
      schedule   = "0 22 * * *"    # 5-field cron: when the window starts
      duration   = "8h"            # how long it stays active
      timezone   = "Europe/Paris"  # IANA name; default UTC
      namespaces = ["default"]     # globs; empty matches every namespace
      jobs       = ["web-*"]       # globs; empty matches every job
    }

  The whole file is checked before anything is sent: an unknown attribute or
  a bad value is an error naming the file and the line.

Options:

  -f=<file>
    The file of window blocks. Required.
` + apiFlagsHelp
}

func (c *windowApplyCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var file string
	var windows []*structs.WindowSpec
	spec := apiArgs{
		name: "window apply", max: 1, desc: "at most one file",
		flags: func(fs *flag.FlagSet) { fs.StringVar(&file, "f", "", "") },
		check: func(pos []string) error {
			switch {
			case len(pos) == 1 && file == "":
				file = pos[0]
			case len(pos) == 1:
				return fmt.Errorf("give the file once, with -f, not also as %q", pos[0])
			case file == "":
				return errors.New("-f is required: the file of window blocks")
			}
			return nil
		},
		load: func([]string) (err error) {
			windows, err = parseWindowFile(file)
			return err
		},
	}
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		var applied []*structs.SyncWindow
		for _, ws := range windows {
			w, err := api.Windows().Put(ctx, ws)
			if err != nil {
				if len(applied) > 0 {
					fmt.Fprintf(m.stderr, "Applied before the error: %s\n", windowNames(applied))
				}
				return m.fail(fmt.Errorf("apply window %q: %w", ws.Name, err))
			}
			applied = append(applied, w)
			if !asJSON {
				fmt.Fprintf(m.stdout, "Window %q applied: %s from %q (%s) for %s\n", w.Name, w.Kind, w.Schedule, w.Timezone, w.Duration)
			}
		}
		if asJSON {
			return m.printJSON(applied)
		}
		return exitOK
	})
}

func windowNames(ws []*structs.SyncWindow) string {
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	return strings.Join(names, ", ")
}

// windowBlockSchema is the body of a window block.
func windowBlockSchema() *hcl.BodySchema {
	return &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "kind", Required: true},
		{Name: "schedule", Required: true},
		{Name: "duration", Required: true},
		{Name: "timezone"},
		{Name: "namespaces"},
		{Name: "jobs"},
	}}
}

// windowFileSchema is the top level of a window file: window blocks only.
func windowFileSchema() *hcl.BodySchema {
	return &hcl.BodySchema{
		Blocks: []hcl.BlockHeaderSchema{{Type: "window", LabelNames: []string{"name"}}},
	}
}

// windowFileError lists every problem of a window file, each naming the
// file and the line.
type windowFileError struct {
	File     string
	Problems []string
}

func (e *windowFileError) Error() string {
	return fmt.Sprintf("invalid window file %s:\n  * %s", e.File, strings.Join(e.Problems, "\n  * "))
}

// parseWindowFile reads the window blocks of an HCL or JSON file, strictly,
// and checks each window as the server would.
func parseWindowFile(path string) ([]*structs.WindowSpec, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read window file: %w", err)
	}
	p := hclparse.NewParser()
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(strings.ToLower(path), ".json") {
		file, diags = p.ParseJSON(src, path)
	} else {
		file, diags = p.ParseHCL(src, path)
	}
	ferr := &windowFileError{File: path}
	addDiags := func(ds hcl.Diagnostics) {
		for _, d := range ds {
			if d.Severity == hcl.DiagError {
				ferr.Problems = append(ferr.Problems, d.Error())
			}
		}
	}
	if diags.HasErrors() {
		addDiags(diags)
		return nil, ferr
	}
	content, diags := file.Body.Content(windowFileSchema())
	addDiags(diags)
	var specs []*structs.WindowSpec
	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		name := b.Labels[0]
		where := b.DefRange.String()
		if prev, dup := seen[name]; dup {
			ferr.Problems = append(ferr.Problems, fmt.Sprintf("%s: window %q is declared twice (first at line %d)", where, name, prev.Start.Line))
			continue
		}
		seen[name] = b.DefRange
		spec, ds := decodeWindowBlock(name, b.Body)
		if ds.HasErrors() {
			addDiags(ds)
			continue
		}
		tz := spec.Timezone
		if tz == "" {
			tz = "UTC"
		}
		for _, problem := range holds.Validate(&structs.SyncWindow{
			Name: name, Kind: structs.WindowKind(spec.Kind), Schedule: spec.Schedule, Duration: spec.Duration,
			Timezone: tz, Namespaces: spec.Namespaces, Jobs: spec.Jobs,
		}) {
			ferr.Problems = append(ferr.Problems, fmt.Sprintf("%s: window %q: %s", where, name, problem))
		}
		specs = append(specs, spec)
	}
	if len(ferr.Problems) > 0 {
		return nil, ferr
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("window file %s declares no window block", path)
	}
	return specs, nil
}

// decodeWindowBlock decodes the body of one window block strictly: a
// missing or unknown attribute, or a value of the wrong type, is an error at
// its line. Values are literals: no variables or functions.
func decodeWindowBlock(name string, body hcl.Body) (*structs.WindowSpec, hcl.Diagnostics) {
	content, diags := body.Content(windowBlockSchema())
	spec := &structs.WindowSpec{Name: name}
	for attrName, a := range content.Attributes {
		v, ds := a.Expr.Value(nil)
		if ds.HasErrors() {
			diags = append(diags, ds...)
			continue
		}
		switch attrName {
		case "kind", "schedule", "duration", "timezone":
			var s string
			if d := decodeValue(a, v, cty.String, &s); d != nil {
				diags = append(diags, d)
				continue
			}
			switch attrName {
			case "kind":
				spec.Kind = s
			case "schedule":
				spec.Schedule = s
			case "duration":
				spec.Duration = s
			case "timezone":
				spec.Timezone = s
			}
		case "namespaces", "jobs":
			var l []string
			if d := decodeValue(a, v, cty.List(cty.String), &l); d != nil {
				diags = append(diags, d)
				continue
			}
			if attrName == "namespaces" {
				spec.Namespaces = l
			} else {
				spec.Jobs = l
			}
		}
	}
	return spec, diags
}

// decodeValue converts an attribute's value to want and stores it in out,
// or returns a diagnostic at the attribute.
func decodeValue(a *hcl.Attribute, v cty.Value, want cty.Type, out any) *hcl.Diagnostic {
	bad := func(detail string) *hcl.Diagnostic {
		return &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Incorrect attribute value type",
			Detail:   fmt.Sprintf("Inappropriate value for attribute %q: %s.", a.Name, detail),
			Subject:  a.Expr.Range().Ptr(),
		}
	}
	if v.IsNull() {
		return bad("must not be null")
	}
	cv, err := convert.Convert(v, want)
	if err != nil {
		return bad(err.Error())
	}
	if err := gocty.FromCtyValue(cv, out); err != nil {
		return bad(err.Error())
	}
	return nil
}

// windowDeleteCommand deletes a sync window.
type windowDeleteCommand struct {
	m *runner
}

func (c *windowDeleteCommand) Synopsis() string { return "Delete a sync window" }

func (c *windowDeleteCommand) Help() string {
	return `Usage: nops window delete [options] <name>

  Deletes a sync window.
` + apiFlagsHelp
}

func (c *windowDeleteCommand) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: "window delete", min: 1, max: 1, desc: "a window name"}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (any, string, error) {
		if err := api.Windows().Delete(ctx, pos[0]); err != nil {
			return nil, "", fmt.Errorf("delete window %q: %w", pos[0], err)
		}
		return map[string]string{"deleted": pos[0]}, fmt.Sprintf("Window %q deleted", pos[0]), nil
	})
}
