package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"

	"github.com/nops-dev/nops/reconcile/holds"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
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
	m := c.m
	var f apiFlags
	fs := newFlagSet("window list")
	f.register(m, fs)
	if _, code, ok := m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	list, _, err := api.Windows(ctx, nil)
	if err != nil {
		return m.fail(err)
	}
	if f.json {
		if list == nil {
			list = []*structs.SyncWindow{}
		}
		return m.printJSON(list)
	}
	if len(list) == 0 {
		fmt.Fprintln(m.stdout, "No sync windows")
		return exitOK
	}
	tw := m.table()
	fmt.Fprintln(tw, "Name\tKind\tSchedule\tDuration\tTimezone\tNamespaces\tJobs")
	for _, w := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.Name, w.Kind, w.Schedule, w.Duration, orDash(w.Timezone),
			globList(w.Namespaces), globList(w.Jobs))
	}
	tw.Flush()
	return exitOK
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
	var f apiFlags
	var file string
	fs := newFlagSet("window apply")
	f.register(m, fs)
	fs.StringVar(&file, "f", "", "")
	pos, code, ok := m.parse(c, fs, args, 0, 1, "at most one file")
	if !ok {
		return code
	}
	if file == "" && len(pos) == 1 {
		file = pos[0]
	} else if len(pos) == 1 {
		return m.usageError(c, fmt.Errorf("give the file once, with -f, not also as %q", pos[0]))
	}
	if file == "" {
		return m.usageError(c, errors.New("-f is required: the file of window blocks"))
	}
	specs, err := parseWindowFile(file)
	if err != nil {
		return m.fail(err)
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	var applied []*structs.SyncWindow
	for _, spec := range specs {
		w, err := api.PutWindow(ctx, spec)
		if err != nil {
			if len(applied) > 0 {
				fmt.Fprintf(m.stderr, "Applied before the error: %s\n", windowNames(applied))
			}
			return m.fail(fmt.Errorf("apply window %q: %w", spec.Name, err))
		}
		applied = append(applied, w)
		if !f.json {
			fmt.Fprintf(m.stdout, "Window %q applied: %s from %q (%s) for %s\n", w.Name, w.Kind, w.Schedule, w.Timezone, w.Duration)
		}
	}
	if f.json {
		return m.printJSON(applied)
	}
	return exitOK
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
func parseWindowFile(path string) ([]*client.WindowSpec, error) {
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
	var specs []*client.WindowSpec
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
func decodeWindowBlock(name string, body hcl.Body) (*client.WindowSpec, hcl.Diagnostics) {
	content, diags := body.Content(windowBlockSchema())
	spec := &client.WindowSpec{Name: name}
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
	m := c.m
	var f apiFlags
	fs := newFlagSet("window delete")
	f.register(m, fs)
	pos, code, ok := m.parse(c, fs, args, 1, 1, "a window name")
	if !ok {
		return code
	}
	api, err := m.client(&f)
	if err != nil {
		return m.fail(err)
	}
	if err := api.DeleteWindow(ctx, pos[0]); err != nil {
		return m.fail(fmt.Errorf("delete window %q: %w", pos[0], err))
	}
	if f.json {
		return m.printJSON(map[string]string{"deleted": pos[0]})
	}
	fmt.Fprintf(m.stdout, "Window %q deleted\n", pos[0])
	return exitOK
}
