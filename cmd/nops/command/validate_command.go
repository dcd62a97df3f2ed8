package command

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"

	"github.com/nops-dev/nops/reconcile/gitwatch"
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

  Judges the job files under dir as a Nops server judges the same files
  committed to a repository whose path is dir, and prints a verdict per file
  and per job:

    - which files are job files: every *.nomad.hcl and *.nomad file under dir
      (recursively; regular files only, no symbolic links, nothing of a
      nested repository), each with its <name>.vars.hcl variables file;
    - whether each file parses (through Nomad when it is reachable, with the
      variables file, so variables and functions resolve as in
      "nomad job run"; else its HCL syntax and literal values only);
    - the nops_* meta keys of each job (SPEC section 2);
    - two files declaring one job (a server ignores both);
    - the hooks a managed job names: each must be declared by a file in the
      job's namespace and be a parameterized batch job that Nops can
      dispatch (it may require no dispatch meta but nops_deployment,
      nops_job, nops_commit and nops_phase, and no payload).

  A job's problems are worded as a server shows them on the job's status.
  Jobs of every namespace are judged (a server judges only its -namespaces);
  hooks are looked for under dir only (a server also finds them in its other
  repositories); nothing a server learns from a plan is checked. It does not
  contact a Nops server. Exits 1 when any file or job has an error.

Options:

  -nomad-addr=<url>
    The Nomad agent that parses the files. Env: NOMAD_ADDR.
    Default: http://127.0.0.1:4646.

  -nomad-token=<token>
    Nomad ACL token. Env: NOMAD_TOKEN.

  -offline
    Do not try Nomad: check the syntax and literal values only.

  -json
    Print the result of every file, and the verdict of every job, as JSON.
`
}

// fileResult is the verdict on one job file: its parse errors and the
// problems of the job it declares.
type fileResult struct {
	File      string   `json:"file"`
	Variables string   `json:"variables,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	JobID     string   `json:"job_id,omitempty"`
	Role      string   `json:"role,omitempty"`
	CheckedBy string   `json:"checked_by"`
	Errors    []string `json:"errors"`
	// Unresolved lists the meta keys (and "type", "parameterized.*") whose
	// values need Nomad to be known: read offline, they were not judged.
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
	files, err := gitwatch.ReadDir(dir)
	if err != nil {
		return m.fail(fmt.Errorf("validate: %w", err))
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

	parsed := make([]*parsedFile, 0, len(files))
	results := make([]*fileResult, 0, len(files))
	for _, f := range files {
		p, err := readJob(ctx, nomad, f, checkedBy)
		if err != nil {
			return m.fail(err)
		}
		parsed = append(parsed, p)
		results = append(results, p.res)
	}
	jobs := judge(parsed)

	failed, invalid := 0, 0
	for _, r := range results {
		if len(r.Errors) > 0 {
			failed++
		}
	}
	for _, v := range jobs {
		if !v.Valid {
			invalid++
		}
	}
	if asJSON {
		if code := m.printJSON(map[string]any{"dir": dir, "checked_by": checkedBy, "note": note, "files": results, "jobs": jobs}); code != exitOK {
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
		if len(jobs) > 0 {
			fmt.Fprintln(m.stdout, "\nJobs:")
		}
		for _, v := range jobs {
			verdict := "valid  "
			if !v.Valid {
				verdict = "invalid"
			}
			role := v.Role
			if role == "" {
				role = "job"
			}
			fmt.Fprintf(m.stdout, "%s  %s (%s: %s)\n", verdict, structs.JobKey(v.Namespace, v.JobID), role, strings.Join(v.Files, ", "))
		}
		fmt.Fprintf(m.stdout, "\n%d files, %d with errors; %d jobs, %d invalid. %s.\n", len(results), failed, len(jobs), invalid, note)
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

// readJob reads the job of one file: through Nomad when nomad is set, as a
// server does, else from the file's literal HCL. A file Nomad refuses gets
// the parse error a server shows on the repository's status (with the file
// named in place of Nomad's "input.hcl"). It returns an error, not a
// verdict, when Nomad gave none (unreachable, or a permission denied).
func readJob(ctx context.Context, nomad *nomadx.Client, f gitwatch.JobFile, checkedBy string) (*parsedFile, error) {
	res := &fileResult{File: f.Path, Variables: f.VarsPath, CheckedBy: checkedBy, Errors: []string{}}
	p := &parsedFile{res: res}
	if nomad != nil {
		job, err := nomad.Parse(ctx, f.Content, f.Vars)
		switch {
		case err == nil:
			p.job = job
		case errors.Is(err, nomadx.ErrInvalidJob):
			res.Errors = append(res.Errors, parseProblem(f.Path, err))
		default:
			return nil, fmt.Errorf("validate %s: %w", f.Path, err)
		}
		return p, nil
	}
	job, unresolved, problems := literalJob(f.Path, []byte(f.Content))
	switch {
	case len(problems) > 0:
		res.Errors = append(res.Errors, problems...)
	case job == nil:
		res.Errors = append(res.Errors, "no job block")
	default:
		p.job, p.unresolved, res.Unresolved = job, unresolved, unresolved
	}
	return p, nil
}

// parseProblem is how a server words a file Nomad refuses to parse, with
// Nomad's name for the file it parsed ("input.hcl") replaced by its path.
func parseProblem(path string, err error) string {
	return strings.ReplaceAll(fmt.Sprintf("%s: %v", path, err), "input.hcl:", path+":")
}

// literalJob parses a job file's HCL syntax and reads the literal values of
// its job block into a job, as far as the meta rules need it (ID,
// namespace, type, meta, the parameterized block). It returns the keys
// whose values are not literal (meta keys, "type", "parameterized.*"),
// syntax errors, each naming the file and the line, and a nil job when the
// file has no job block.
func literalJob(name string, src []byte) (*api.Job, []string, []string) {
	file, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, nil, diagStrings(diags)
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, nil, nil
	}
	var block *hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type != "job" {
			continue
		}
		if block != nil {
			return nil, nil, []string{fmt.Sprintf("%s: a file declares one job; another starts here", b.DefRange())}
		}
		block = b
	}
	if block == nil {
		return nil, nil, nil
	}
	if len(block.Labels) != 1 {
		return nil, nil, []string{fmt.Sprintf("%s: a job block has one label, its ID", block.DefRange())}
	}
	job := &api.Job{ID: ptr(block.Labels[0]), Namespace: ptr("default"), Type: ptr("service"), Meta: map[string]string{}}
	var unresolved []string
	attr := func(b *hclsyntax.Body, name, key string) (string, bool) {
		a, ok := b.Attributes[name]
		if !ok {
			return "", false
		}
		v, ok := literalString(a.Expr)
		if !ok {
			unresolved = append(unresolved, key)
		}
		return v, ok
	}
	if v, ok := attr(block.Body, "namespace", "namespace"); ok && v != "" {
		job.Namespace = &v
	}
	if v, ok := attr(block.Body, "type", "type"); ok && v != "" {
		job.Type = &v
	}
	if v, ok := attr(block.Body, "id", "id"); ok && v != "" {
		job.ID = &v
	}
	addMeta := func(key string, expr hclsyntax.Expression) {
		if v, ok := literalString(expr); ok {
			job.Meta[key] = v
		} else {
			unresolved = append(unresolved, key)
		}
	}
	for _, b := range block.Body.Blocks {
		switch b.Type {
		case "parameterized":
			pj := &api.ParameterizedJobConfig{}
			if v, ok := attr(b.Body, "payload", "parameterized.payload"); ok {
				pj.Payload = v
			}
			if a, ok := b.Body.Attributes["meta_required"]; ok {
				if list, ok := literalStrings(a.Expr); ok {
					pj.MetaRequired = list
				} else {
					unresolved = append(unresolved, "parameterized.meta_required")
				}
			}
			job.ParameterizedJob = pj
		case "meta":
			for k, a := range b.Body.Attributes {
				addMeta(k, a.Expr)
			}
		}
	}
	if a, ok := block.Body.Attributes["meta"]; ok {
		if obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr); ok {
			for _, item := range obj.Items {
				k, kd := item.KeyExpr.Value(nil)
				if kd.HasErrors() || !k.IsKnown() || k.IsNull() || k.Type() != cty.String {
					continue
				}
				addMeta(k.AsString(), item.ValueExpr)
			}
		} else {
			unresolved = append(unresolved, "meta")
		}
	}
	sort.Strings(unresolved)
	return job, unresolved, nil
}

// literalStrings evaluates a list of literal strings.
func literalStrings(expr hclsyntax.Expression) ([]string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || !v.IsWhollyKnown() || v.IsNull() || !(v.Type().IsListType() || v.Type().IsTupleType()) {
		return nil, false
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() || e.Type() != cty.String {
			return nil, false
		}
		out = append(out, e.AsString())
	}
	return out, true
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
