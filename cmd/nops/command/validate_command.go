package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/cmd/nops/command/validate"
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
	nomad, checkedBy, note, err := connectNomad(ctx, offline, addr, token)
	if err != nil {
		return m.fail(err)
	}
	results, jobs, err := validate.Files(ctx, nomad, files, checkedBy)
	if err != nil {
		return m.fail(err)
	}
	return c.report(asJSON, dir, checkedBy, note, results, jobs)
}

// connectNomad returns the Nomad that parses the job files, what checked
// them, and the note that says so: none when offline or when Nomad is not
// reachable, then the files are checked from their literal HCL.
func connectNomad(ctx context.Context, offline bool, addr, token string) (*nomadx.Client, string, string, error) {
	if offline {
		return nil, "syntax", "Offline: checked the HCL syntax and literal meta values only", nil
	}
	nomad, err := nomadx.New(nomadx.Config{Address: addr, Token: token}, hclog.NewNullLogger())
	if err != nil {
		return nil, "", "", err
	}
	pctx, cancel := context.WithTimeout(ctx, nomadPingTimeout)
	err = nomad.Ping(pctx)
	cancel()
	if err != nil {
		return nil, "syntax", fmt.Sprintf("Nomad is not reachable (%v): checked the HCL syntax and literal meta values only", err), nil
	}
	return nomad, "nomad", "Parsed through Nomad at " + nomad.Address(), nil
}

// report prints the result of every file and the verdict of every job, as
// JSON or as text, and returns the exit code: an error when a file has one.
func (c *validateCommand) report(asJSON bool, dir, checkedBy, note string, results []*validate.FileResult, jobs []*validate.JobVerdict) int {
	m := c.m
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
		c.printText(results, jobs)
		fmt.Fprintf(m.stdout, "\n%d files, %d with errors; %d jobs, %d invalid. %s.\n", len(results), failed, len(jobs), invalid, note)
	}
	if failed > 0 {
		return exitError
	}
	return exitOK
}

// printText prints a line per file, with its errors, and a line per job.
func (c *validateCommand) printText(results []*validate.FileResult, jobs []*validate.JobVerdict) {
	m := c.m
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
		fmt.Fprintf(m.stdout, "%s  %s (%s: %s)\n", verdict, structs.JobKey("", v.Namespace, v.JobID), role, strings.Join(v.Files, ", "))
	}
}

// describe names the job of a file, its role, and what needs Nomad to be
// checked.
func describe(r *validate.FileResult) string {
	if r.JobID == "" {
		return ""
	}
	s := " (" + structs.JobKey("", r.Namespace, r.JobID)
	if r.Role != "" {
		s += ", " + r.Role
	}
	if len(r.Unresolved) > 0 {
		s += ", needs Nomad to check: " + strings.Join(r.Unresolved, ",")
	}
	return s + ")"
}
