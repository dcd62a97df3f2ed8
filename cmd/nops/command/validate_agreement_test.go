package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/template"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/nops-dev/nops/cmd/nops/command/validate"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// corpusDir holds the repositories of the agreement test, one txtar
// archive a case (case.txtar), and corpusGroup, the task group all their
// jobs share. A case's files are templates: writeCorpusCase writes them
// out, the group filled in, as the root of a repository.
const corpusDir = "testdata/validate-corpus"

// corpusGroup is the file of corpusDir that defines the template "group".
const corpusGroup = "group.tmpl"

// corpusRepo is the name the agreement test's servers give the repository:
// a server names a file of a duplicate declaration repository:path.
const corpusRepo = "corpus"

// corpusWant is what a case's jobs must be found to be, by both `nops
// validate` and a server: job key → a problem the job must have ("" for a
// valid job), and the files that must fail to parse.
type corpusWant struct {
	jobs        map[string]string
	parseErrors []string
}

var corpusCases = map[string]corpusWant{
	"good-auto":         {jobs: map[string]string{"default/web": ""}},
	"approval-pre-hook": {jobs: map[string]string{"default/app": ""}},
	"hook-missing": {jobs: map[string]string{
		"default/app": `pre hook "backup" is not declared by any file in namespace default`}},
	"hook-not-parameterized": {jobs: map[string]string{
		"default/app": `post hook "smoke" (smoke.nomad.hcl) is not a valid hook: it has no parameterized block`}},
	"hook-dispatch-meta": {jobs: map[string]string{
		"default/app": `pre hook "notify" (notify.nomad.hcl) is not a valid hook: it requires dispatch meta channel, which Nops does not pass (it passes nops_deployment, nops_job, nops_commit, nops_phase)`}},
	"hook-payload-required": {jobs: map[string]string{
		"default/app": `pre hook "seed" (seed.nomad.hcl) is not a valid hook: it requires a payload, which Nops does not send`}},
	"hook-invalid-meta": {jobs: map[string]string{
		"default/app": `pre hook "check" is invalid: check.nomad.hcl: meta nops_policy = "auto": only a managed job takes this key, not a hook`}},
	"invalid-policy": {jobs: map[string]string{
		"default/web": `web.nomad.hcl: meta nops_policy = "sometimes": must be auto, approval or none`}},
	"invalid-apply-timeout": {jobs: map[string]string{
		"default/web": `web.nomad.hcl: meta nops_apply_timeout = "soon": is not a Go duration (like 10m)`}},
	// Both keys of the approval rules are wrong; both sides must give
	// both problems, in the same words.
	"invalid-approvals": {jobs: map[string]string{
		"default/web": `web.nomad.hcl: meta nops_approvals = "two": must be a whole number from 1 to 100: the distinct identities that must approve`}},
	"managed-and-hook": {jobs: map[string]string{
		"default/both": `both.nomad.hcl: meta nops_role = "hook": a job cannot be both managed (nops_managed) and a hook`}},
	"duplicate": {jobs: map[string]string{
		"default/web": `job default/web is declared by more than one file (team/web-again.nomad, web.nomad.hcl): all are ignored`}},
	"parse-error": {jobs: map[string]string{"default/good": ""}, parseErrors: []string{"broken.nomad.hcl"}},
	// nops_depends_on (SPEC section 17): the whole cycle is named on each
	// job in it; a job depending on one is valid (it waits).
	"depends-cycle": {jobs: map[string]string{
		"default/a":   `a.nomad.hcl: meta nops_depends_on = "b": dependency cycle default/a -> default/b -> default/c -> default/a`,
		"default/b":   `b.nomad.hcl: meta nops_depends_on = "c": dependency cycle default/b -> default/c -> default/a -> default/b`,
		"default/c":   `c.nomad.hcl: meta nops_depends_on = "a": dependency cycle default/c -> default/a -> default/b -> default/c`,
		"default/web": ""}},
	"depends-missing-unmanaged": {jobs: map[string]string{
		"default/api": `api.nomad.hcl: meta nops_depends_on = "db,plain": default/db is missing: no file declares it`}},
	"depends-ok": {jobs: map[string]string{"default/api": "", "default/db": ""}},
	"vars-file": {jobs: map[string]string{
		"default/api": "",
		"default/web": `web.nomad.hcl: meta nops_policy = "whenever": must be auto, approval or none`}},
}

// verdicts are the findings on one repository, in a form both sides give:
// job key → its problems (sorted), and file → its parse error.
type verdicts struct {
	jobs        map[string][]string
	parseErrors map[string]string
}

func (v verdicts) String() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(v.jobs)) {
		fmt.Fprintf(&b, "  job %s: %q\n", k, v.jobs[k])
	}
	for _, f := range slices.Sorted(maps.Keys(v.parseErrors)) {
		fmt.Fprintf(&b, "  file %s: %s\n", f, v.parseErrors[f])
	}
	return b.String()
}

// validateVerdicts runs `nops validate -json` over dir through Nomad. Only
// the jobs a server shows a status for are kept: a hook declared by one
// file has none (a server judges it through the jobs that name it).
func validateVerdicts(t *testing.T, nomadAddr, dir string) verdicts {
	t.Helper()
	c := newCLI(t, nil)
	c.env["NOMAD_ADDR"] = nomadAddr
	r := c.run("validate", "-json", dir)
	var out struct {
		CheckedBy string                 `json:"checked_by"`
		Files     []*validate.FileResult `json:"files"`
		Jobs      []*validate.JobVerdict `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.CheckedBy != "nomad" {
		t.Fatalf("nops validate -json %s: exit %d, %v, checked by %q\n%s%s", dir, r.code, err, out.CheckedBy, r.stdout, r.stderr)
	}
	v := verdicts{jobs: map[string][]string{}, parseErrors: map[string]string{}}
	failed := false
	for _, f := range out.Files {
		failed = failed || len(f.Errors) > 0
		if f.JobID == "" && len(f.Errors) > 0 {
			v.parseErrors[f.File] = strings.Join(f.Errors, "; ")
		}
	}
	for _, j := range out.Jobs {
		if j.Valid != (len(j.Problems) == 0) {
			t.Errorf("validate: job %s/%s: valid %v with problems %q", j.Namespace, j.JobID, j.Valid, j.Problems)
		}
		if j.Role == "hook" && len(j.Files) == 1 {
			continue
		}
		v.jobs[structs.JobKey("", j.Namespace, j.JobID)] = sorted(j.Problems)
	}
	if want := exitOK; failed {
		want = exitError
		if r.code != want {
			t.Errorf("validate exit %d with errors, want %d", r.code, want)
		}
	} else if r.code != want {
		t.Errorf("validate exit %d without errors, want %d", r.code, want)
	}
	return v
}

// serverVerdicts serves dir as a git repository to a real Nops server on
// nomad, waits for a detection cycle that saw its commit and returns the
// job statuses and the repository's parse errors it recorded, worded as
// validate words them: files of a duplicate named without the repository,
// and Nomad's "input.hcl" replaced by the file's path.
func serverVerdicts(t *testing.T, nomadAddr, dir string) verdicts {
	t.Helper()
	repo := testutil.NewGitRepo(t)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		repo.WriteFile(filepath.ToSlash(rel), string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	head := repo.Commit("the case's files")
	s := nopstest.Start(t, "", nopstest.WithNomad(nomadAddr), nopstest.WithRepo(corpusRepo, repo.URL(), "main", "."))
	st := s.State()

	// A cycle that started after the commit was recorded is a whole
	// cycle over it.
	var seen time.Time
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		list, err := st.RepoStatuses()
		if err != nil {
			return false, err
		}
		for _, r := range list {
			if r.Name == corpusRepo && r.Head == head {
				if seen.IsZero() {
					seen = time.Now().UTC()
					s.Trigger()
				}
				c, err := st.DetectionCycle()
				if err != nil {
					return false, err
				}
				if c != nil && c.StartedAt.After(seen) {
					return true, nil
				}
				return false, fmt.Errorf("no detection cycle started after %s yet (last: %+v)", seen, c)
			}
		}
		return false, fmt.Errorf("repository %s not at %s yet: %+v", corpusRepo, head, list)
	})

	v := verdicts{jobs: map[string][]string{}, parseErrors: map[string]string{}}
	statuses, err := st.JobStatuses()
	if err != nil {
		t.Fatal(err)
	}
	for _, js := range statuses {
		var problems []string
		for _, e := range js.Errors {
			problems = append(problems, strings.ReplaceAll(e, corpusRepo+":", ""))
		}
		v.jobs[js.Key()] = sorted(problems)
	}
	repos, err := st.RepoStatuses()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range repos {
		for _, pe := range r.ParseErrors {
			file, _, _ := strings.Cut(pe, ": ")
			v.parseErrors[file] = strings.ReplaceAll(pe, "input.hcl:", file+":")
		}
	}
	return v
}

// writeCorpusCase writes the files of the case name into a new directory,
// each executed as a template that may name the shared "group", and
// returns the directory.
func writeCorpusCase(t *testing.T, name string) string {
	t.Helper()
	type group struct{ Name, RunFor string }
	shared, err := template.New(corpusGroup).Funcs(template.FuncMap{
		"group": func(name, runFor string) group { return group{name, runFor} },
	}).ParseFiles(filepath.Join(corpusDir, corpusGroup))
	if err != nil {
		t.Fatal(err)
	}
	ar, err := txtar.ParseFile(filepath.Join(corpusDir, name+".txtar"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ar.Files) == 0 {
		t.Fatalf("case %s has no files", name)
	}
	dir := filepath.Join(t.TempDir(), name)
	for _, f := range ar.Files {
		tmpl, err := template.Must(shared.Clone()).New(f.Name).Parse(string(f.Data))
		if err != nil {
			t.Fatalf("case %s: %v", name, err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, nil); err != nil {
			t.Fatalf("case %s: %v", name, err)
		}
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

// TestValidate_AgreesWithServer runs `nops validate` and a real Nops server
// (real Nomad, the case served as a real git repository) over every case of
// the corpus, and fails on any job or file on which they disagree, or on
// which either is not what the case is for.
func TestValidate_AgreesWithServer(t *testing.T) {
	entries, err := os.ReadDir(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".txtar"); ok {
			names = append(names, name)
		}
	}
	for name := range corpusCases {
		if !slices.Contains(names, name) {
			t.Fatalf("case %s has no archive %s.txtar under %s", name, name, corpusDir)
		}
	}
	nomad := testutil.StartNomad(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			want, ok := corpusCases[name]
			if !ok {
				t.Fatalf("%s/%s.txtar has no expected verdicts in corpusCases", corpusDir, name)
			}
			dir := writeCorpusCase(t, name)
			cli := validateVerdicts(t, nomad.Addr, dir)
			srv := serverVerdicts(t, nomad.Addr, dir)
			t.Logf("nops validate:\n%sserver:\n%s", cli, srv)

			for key, problems := range cli.jobs {
				if got, ok := srv.jobs[key]; !ok {
					t.Errorf("job %s: validate gives problems %q, the server has no status for it", key, problems)
				} else if !slices.Equal(got, problems) {
					t.Errorf("job %s: validate and the server disagree:\n  validate: %q\n  server:   %q", key, problems, got)
				}
			}
			for key, problems := range srv.jobs {
				if _, ok := cli.jobs[key]; !ok {
					t.Errorf("job %s: the server has a status with problems %q, validate gives no verdict", key, problems)
				}
			}
			if !maps.Equal(cli.parseErrors, srv.parseErrors) {
				t.Errorf("parse errors disagree:\n  validate: %q\n  server:   %q", cli.parseErrors, srv.parseErrors)
			}

			// Both agree; check they agree on what the case is for.
			for key, problem := range want.jobs {
				got, ok := cli.jobs[key]
				switch {
				case !ok:
					t.Errorf("job %s: no verdict, want %q", key, problem)
				case problem == "" && len(got) > 0:
					t.Errorf("job %s: problems %q, want a valid job", key, got)
				case problem != "" && !slices.Contains(got, problem):
					t.Errorf("job %s: problems %q, want %q among them", key, got, problem)
				}
			}
			if len(cli.jobs) != len(want.jobs) {
				t.Errorf("verdicts on %d jobs, want %d", len(cli.jobs), len(want.jobs))
			}
			for _, f := range want.parseErrors {
				if _, ok := cli.parseErrors[f]; !ok {
					t.Errorf("file %s: no parse error", f)
				}
			}
			if len(cli.parseErrors) != len(want.parseErrors) {
				t.Errorf("%d parse errors, want %d", len(cli.parseErrors), len(want.parseErrors))
			}
		})
	}
}
