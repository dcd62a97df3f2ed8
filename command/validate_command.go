package command

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// nomadPingTimeout bounds the check that Nomad is reachable.
const nomadPingTimeout = 3 * time.Second

// validateCommand checks the job files of a directory without a server.
type validateCommand struct {
	m *runner
}

func (c *validateCommand) Synopsis() string { return "Check the job files of a directory (offline)" }

func (c *validateCommand) Help() string {
	return `Usage: nops validate [options] <dir>

  Checks every *.nomad.hcl and *.nomad file under dir (recursively, with its
  <name>.vars.hcl variables file when there is one) as a Nops server would:
  the HCL syntax, the nops_* meta keys of each job (a hook must also be a
  parameterized batch job), and two files declaring the same job. When Nomad is reachable, each file is parsed by Nomad
  itself, so variables and functions resolve as in "nomad job run" and
  Nomad's parse errors are reported; otherwise only literal meta values are
  checked. It does not contact a Nops server. Exits 1 when any file has an
  error.

Options:

  -nomad-addr=<url>
    The Nomad agent that parses the files. Env: NOMAD_ADDR.
    Default: http://127.0.0.1:4646.

  -nomad-token=<token>
    Nomad ACL token. Env: NOMAD_TOKEN.

  -offline
    Do not try Nomad: check the syntax and literal values only.

  -json
    Print the result of every file as JSON.
`
}

// fileResult is the verdict on one job file.
type fileResult struct {
	File      string   `json:"file"`
	Variables string   `json:"variables,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	JobID     string   `json:"job_id,omitempty"`
	Role      string   `json:"role,omitempty"`
	CheckedBy string   `json:"checked_by"`
	Errors    []string `json:"errors"`
	// Unresolved lists the meta keys (and "type") whose values need Nomad
	// to be known.
	Unresolved []string `json:"unresolved_meta,omitempty"`
}

func (c *validateCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var addr, token string
	var offline, asJSON bool
	flags := newFlagSet("validate")
	envAddr, _ := m.lookupEnv("NOMAD_ADDR")
	envToken, _ := m.lookupEnv("NOMAD_TOKEN")
	flags.StringVar(&addr, "nomad-addr", envAddr, "")
	flags.StringVar(&token, "nomad-token", envToken, "")
	flags.BoolVar(&offline, "offline", false, "")
	flags.BoolVar(&asJSON, "json", false, "")
	pos, code, ok := m.parse(c, flags, args, 1, 1, "a directory")
	if !ok {
		return code
	}
	dir := pos[0]
	files, err := findJobFiles(dir)
	if err != nil {
		return m.fail(err)
	}
	if len(files) == 0 {
		return m.fail(fmt.Errorf("no *.nomad.hcl or *.nomad file under %s", dir))
	}

	var nomad *nomadx.Client
	checkedBy := "syntax"
	var note string
	if !offline {
		nomad, err = nomadx.New(nomadx.Config{Address: addr, Token: token}, hclog.NewNullLogger())
		if err != nil {
			return m.fail(err)
		}
		pctx, cancel := context.WithTimeout(ctx, nomadPingTimeout)
		err = nomad.Ping(pctx)
		cancel()
		if err != nil {
			note = fmt.Sprintf("Nomad is not reachable (%v): checked the HCL syntax and literal meta values only", err)
			nomad = nil
		} else {
			checkedBy = "nomad"
			note = "Parsed through Nomad at " + nomad.Address()
		}
	} else {
		note = "Offline: checked the HCL syntax and literal meta values only"
	}

	results := make([]*fileResult, 0, len(files))
	for _, rel := range files {
		results = append(results, c.check(ctx, nomad, dir, rel, checkedBy))
	}
	markDuplicates(results)

	failed := 0
	for _, r := range results {
		if len(r.Errors) > 0 {
			failed++
		}
	}
	if asJSON {
		if code := m.printJSON(map[string]any{"dir": dir, "checked_by": checkedBy, "note": note, "files": results}); code != exitOK {
			return code
		}
	} else {
		for _, r := range results {
			if len(r.Errors) == 0 {
				fmt.Fprintf(m.stdout, "ok     %s%s\n", r.File, describe(r))
				continue
			}
			fmt.Fprintf(m.stdout, "error  %s%s\n", r.File, describe(r))
			for _, e := range r.Errors {
				fmt.Fprintf(m.stdout, "         * %s\n", e)
			}
		}
		fmt.Fprintf(m.stdout, "\n%d files, %d with errors. %s.\n", len(results), failed, note)
	}
	if failed > 0 {
		return exitError
	}
	return exitOK
}

func describe(r *fileResult) string {
	if r.JobID == "" {
		return ""
	}
	s := " (" + structs.JobKey(r.Namespace, r.JobID)
	if r.Role != "" {
		s += ", " + r.Role
	}
	if len(r.Unresolved) > 0 {
		s += ", needs Nomad to check: " + strings.Join(r.Unresolved, ",")
	}
	return s + ")"
}

// check validates one file.
func (c *validateCommand) check(ctx context.Context, nomad *nomadx.Client, dir, rel, checkedBy string) *fileResult {
	res := &fileResult{File: rel, CheckedBy: checkedBy, Errors: []string{}}
	path := filepath.Join(dir, rel)
	src, err := os.ReadFile(path)
	if err != nil {
		res.Errors = append(res.Errors, fmt.Sprintf("read: %v", err))
		return res
	}
	var vars string
	if vp := varsFileOf(path); vp != "" {
		if b, err := os.ReadFile(vp); err == nil {
			vars = string(b)
			res.Variables, _ = filepath.Rel(dir, vp)
		} else if !errors.Is(err, fs.ErrNotExist) {
			res.Errors = append(res.Errors, fmt.Sprintf("read variables file: %v", err))
			return res
		}
	}
	facts, problems := literalFacts(rel, src)
	if len(problems) > 0 {
		res.Errors = append(res.Errors, problems...)
		return res
	}
	if nomad != nil {
		job, err := nomad.Parse(ctx, string(src), vars)
		if err != nil {
			// Nomad names the file it parsed "input.hcl".
			res.Errors = append(res.Errors, strings.ReplaceAll(err.Error(), "input.hcl:", rel+":"))
			return res
		}
		facts = nomadFacts(job)
	}
	if facts == nil {
		res.Errors = append(res.Errors, "no job block")
		return res
	}
	res.Namespace, res.JobID, res.Unresolved = facts.Namespace, facts.ID, facts.Unresolved
	res.Role = kindOf(facts)
	res.Errors = append(res.Errors, checkMetaKeys(rel, facts)...)
	return res
}

// markDuplicates reports two files that declare the same job: a server
// ignores both.
func markDuplicates(results []*fileResult) {
	byJob := map[string][]*fileResult{}
	for _, r := range results {
		if r.JobID != "" {
			k := structs.JobKey(r.Namespace, r.JobID)
			byJob[k] = append(byJob[k], r)
		}
	}
	for key, rs := range byJob {
		if len(rs) < 2 {
			continue
		}
		for _, r := range rs {
			var others []string
			for _, o := range rs {
				if o != r {
					others = append(others, o.File)
				}
			}
			r.Errors = append(r.Errors, fmt.Sprintf("job %s is also declared in %s: a server ignores both", key, strings.Join(others, ", ")))
		}
	}
}

// findJobFiles returns the job files under dir, relative to it, sorted.
func findJobFiles(dir string) ([]string, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("validate: %s is not a directory", dir)
	}
	var out []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if isJobFile(d.Name()) {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("validate: walk %s: %w", dir, err)
	}
	sort.Strings(out)
	return out, nil
}

func isJobFile(name string) bool {
	return strings.HasSuffix(name, ".nomad.hcl") || strings.HasSuffix(name, ".nomad")
}

// varsFileOf returns the variables file of a job file: web.nomad.hcl and
// web.nomad both have web.vars.hcl.
func varsFileOf(path string) string {
	base := filepath.Base(path)
	var name string
	switch {
	case strings.HasSuffix(base, ".nomad.hcl"):
		name = strings.TrimSuffix(base, ".nomad.hcl")
	case strings.HasSuffix(base, ".nomad"):
		name = strings.TrimSuffix(base, ".nomad")
	default:
		return ""
	}
	return filepath.Join(filepath.Dir(path), name+".vars.hcl")
}

// nomadFacts describes a job parsed by Nomad.
func nomadFacts(job *api.Job) *jobFacts {
	f := &jobFacts{Source: "nomad", Meta: map[string]string{}, Parameterized: job.ParameterizedJob != nil}
	if job.ID != nil {
		f.ID = *job.ID
	}
	f.Namespace = "default"
	if job.Namespace != nil && *job.Namespace != "" {
		f.Namespace = *job.Namespace
	}
	if job.Type != nil {
		f.Type = *job.Type
	}
	for k, v := range job.Meta {
		f.Meta[k] = v
	}
	return f
}

// literalFacts parses a job file's HCL syntax and reads the literal values
// of its job block. It returns syntax errors, each naming the file and the
// line, and nil facts when the file has no job block.
func literalFacts(name string, src []byte) (*jobFacts, []string) {
	file, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diagStrings(diags)
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, nil
	}
	var job *hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type != "job" {
			continue
		}
		if job != nil {
			return nil, []string{fmt.Sprintf("%s: a file declares one job; another starts here", b.DefRange())}
		}
		job = b
	}
	if job == nil {
		return nil, nil
	}
	if len(job.Labels) != 1 {
		return nil, []string{fmt.Sprintf("%s: a job block has one label, its ID", job.DefRange())}
	}
	f := &jobFacts{Source: "syntax", ID: job.Labels[0], Namespace: "default", Type: "service", Meta: map[string]string{}}
	attr := func(name string) (string, bool) {
		if a, ok := job.Body.Attributes[name]; ok {
			return literalString(a.Expr)
		}
		return "", false
	}
	if v, ok := attr("namespace"); ok && v != "" {
		f.Namespace = v
	}
	if v, ok := attr("type"); ok && v != "" {
		f.Type = v
	} else if _, set := job.Body.Attributes["type"]; set {
		f.Unresolved = append(f.Unresolved, "type")
	}
	if id, ok := attr("id"); ok && id != "" {
		f.ID = id
	}
	addMeta := func(key string, expr hclsyntax.Expression) {
		if v, ok := literalString(expr); ok {
			f.Meta[key] = v
		} else {
			f.Unresolved = append(f.Unresolved, key)
		}
	}
	for _, b := range job.Body.Blocks {
		switch b.Type {
		case "parameterized":
			f.Parameterized = true
		case "meta":
			for k, a := range b.Body.Attributes {
				addMeta(k, a.Expr)
			}
		}
	}
	if a, ok := job.Body.Attributes["meta"]; ok {
		if obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr); ok {
			for _, item := range obj.Items {
				k, kd := item.KeyExpr.Value(nil)
				if kd.HasErrors() || !k.IsKnown() || k.IsNull() || k.Type() != cty.String {
					continue
				}
				addMeta(k.AsString(), item.ValueExpr)
			}
		} else {
			f.Unresolved = append(f.Unresolved, "meta")
		}
	}
	sort.Strings(f.Unresolved)
	return f, nil
}

// literalString evaluates an expression with no variables or functions, and
// returns its value when it is a known string (or a number or bool, as
// Nomad converts meta values).
func literalString(expr hclsyntax.Expression) (string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || !v.IsWhollyKnown() || v.IsNull() {
		return "", false
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), true
	case cty.Number:
		return v.AsBigFloat().Text('f', -1), true
	case cty.Bool:
		if v.True() {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

func diagStrings(diags hcl.Diagnostics) []string {
	var out []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			out = append(out, d.Error())
		}
	}
	return out
}
