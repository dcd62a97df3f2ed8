package gitwatch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/nops-dev/nops/testutil"
)

func describeFiles(files []JobFile) string {
	var out []string
	for _, f := range files {
		s := f.Path
		if f.VarsPath != "" {
			s += "+" + f.VarsPath
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestSelectJobFiles_Rule(t *testing.T) {
	cases := []struct {
		name  string
		dir   string
		paths []string
		want  string // path[+vars] ... in order
	}{
		{name: "both suffixes at the root", paths: []string{"web.nomad.hcl", "api.nomad"},
			want: "api.nomad web.nomad.hcl"},
		{name: "nested directories, sorted", paths: []string{"z/a.nomad", "a/b/c/deep.nomad.hcl", "a/top.nomad"},
			want: "a/b/c/deep.nomad.hcl a/top.nomad z/a.nomad"},
		{name: "vars file beside its job file", paths: []string{"web.nomad.hcl", "web.vars.hcl", "jobs/api.nomad", "jobs/api.vars.hcl"},
			want: "jobs/api.nomad+jobs/api.vars.hcl web.nomad.hcl+web.vars.hcl"},
		{name: "vars file in another directory does not pair", paths: []string{"jobs/web.nomad.hcl", "web.vars.hcl", "other/web.vars.hcl"},
			want: "jobs/web.nomad.hcl"},
		{name: ".nomad and .nomad.hcl of one name share the vars file", paths: []string{"web.nomad", "web.nomad.hcl", "web.vars.hcl"},
			want: "web.nomad+web.vars.hcl web.nomad.hcl+web.vars.hcl"},
		{name: "vars file without a job file is no job", paths: []string{"orphan.vars.hcl"}, want: ""},
		{name: "hidden directories are not skipped", paths: []string{".ci/build.nomad.hcl", ".hidden.nomad"},
			want: ".ci/build.nomad.hcl .hidden.nomad"},
		{name: "non-job files", paths: []string{"README.md", "notes.hcl", "web.hcl", "web.nomad.hcl.bak", "nomad", ".nomad",
			".nomad.hcl", "dir/.nomad", "web.nomad.json", "web.vars.hcl"}, want: ""},
		{name: "only under the repository path", dir: "jobs", paths: []string{"jobs/web.nomad.hcl", "jobsx/no.nomad", "other/no.nomad.hcl",
			"no.nomad", "jobs/sub/yes.nomad"}, want: "jobs/sub/yes.nomad jobs/web.nomad.hcl"},
		{name: "repository path with a trailing slash", dir: "jobs/", paths: []string{"jobs/web.nomad.hcl"}, want: "jobs/web.nomad.hcl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := SelectJobFiles(tc.paths, tc.dir)
			if describeFiles(got) != tc.want {
				t.Fatalf("SelectJobFiles(%q, %q) = %q, want %q", tc.paths, tc.dir, describeFiles(got), tc.want)
			}
			for _, f := range got {
				if f.Content != "" || f.Vars != "" {
					t.Fatalf("SelectJobFiles filled contents: %+v", f)
				}
			}
		})
	}
}

// A directory read by ReadDir and the snapshot a server takes of the same
// tree committed to git hold the same job files with the same contents.
func TestReadDir_AgreesWithSnapshot(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	files := map[string]string{
		"web.nomad.hcl":                `job "web" {}`,
		"web.vars.hcl":                 `count = 3`,
		"nested/deep/api.nomad":        `job "api" {}`,
		"nested/deep/api.vars.hcl":     `level = "debug"`,
		".ci/hidden.nomad.hcl":         `job "hidden" {}`,
		"orphan.vars.hcl":              `x = 1`,
		"notes.hcl":                    `not a job`,
		".nomad":                       `not a job either`,
		"tools/run.nomad":              `job "run" {}`,
		"tools/run.vars.hcl.bak":       `ignored`,
		"stray/.git/config.nomad.hcl":  `git skips every .git path`,
		"stray/kept.nomad.hcl":         `job "kept" {}`,
		"plain/dir.nomad.hcl/x.nomad":  `job "x" {}`,
		"exec/script.nomad.hcl":        `job "exec" {}`,
		"vars-dir/web.nomad.hcl":       `job "w2" {}`,
		"vars-dir/web.vars.hcl/nested": `a directory is no vars file`,
	}
	for p, c := range files {
		repo.WriteFile(p, c)
	}
	if err := os.Chmod(filepath.Join(repo.Dir, "exec", "script.nomad.hcl"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("web.nomad.hcl", filepath.Join(repo.Dir, "link.nomad.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("web.vars.hcl", filepath.Join(repo.Dir, "link.vars.hcl")); err != nil {
		t.Fatal(err)
	}
	// A nested repository is committed as a link to its commit: its files
	// are not in the tree.
	inner := testutil.NewGitRepo(t)
	inner.WriteFile("inner.nomad.hcl", `job "inner" {}`)
	inner.Commit("a nested repository")
	if err := os.Rename(inner.Dir, filepath.Join(repo.Dir, "inner")); err != nil {
		t.Fatal(err)
	}
	head := repo.Commit("a tree with every kind of file")

	w := newWatcher(t, RepoConfig{Name: "ops", URL: repo.URL()})
	if err := w.FetchNow(ctxFor(t), "ops"); err != nil {
		t.Fatal(err)
	}
	snap := w.Snapshot("ops")
	if snap == nil || snap.Commit != head {
		t.Fatalf("snapshot %+v, want commit %s", snap, head)
	}
	local, err := ReadDir(repo.Dir)
	if err != nil {
		t.Fatalf("ReadDir: %v", err)
	}
	want := ".ci/hidden.nomad.hcl exec/script.nomad.hcl nested/deep/api.nomad+nested/deep/api.vars.hcl " +
		"plain/dir.nomad.hcl/x.nomad stray/kept.nomad.hcl tools/run.nomad vars-dir/web.nomad.hcl web.nomad.hcl+web.vars.hcl"
	if got := describeFiles(snap.Files); got != want {
		t.Errorf("snapshot files = %q, want %q", got, want)
	}
	if describeFiles(local) != describeFiles(snap.Files) {
		t.Fatalf("ReadDir and the snapshot disagree:\n  ReadDir:  %s\n  snapshot: %s", describeFiles(local), describeFiles(snap.Files))
	}
	for i := range local {
		if local[i] != snap.Files[i] {
			t.Errorf("file %d: ReadDir %+v, snapshot %+v", i, local[i], snap.Files[i])
		}
	}
}

func TestReadDir_RefusesWhatIsNoDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "web.nomad.hcl")
	if err := os.WriteFile(file, []byte(`job "web" {}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Join(dir, "missing")} {
		if _, err := ReadDir(p); err == nil || !strings.Contains(err.Error(), "read job files") {
			t.Errorf("ReadDir(%s) = %v, want an error", p, err)
		}
	}
}

// TestReadJobFiles_SubtreeAndKnownBlobs: readJobFiles walks only the
// configured directory (a directory that is absent, or a file of that
// name, has no job files), and takes a file whose blob it already knows
// from the last snapshot rather than reading it again.
func TestReadJobFiles_SubtreeAndKnownBlobs(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("eu/web.nomad.hcl", `job "web" {}`)
	repo.WriteFile("eu/web.vars.hcl", `count = 2`)
	repo.WriteFile("eu/deep/api.nomad.hcl", `job "api" {}`)
	repo.WriteFile("us/web.nomad.hcl", `job "web" { us = true }`)
	repo.WriteFile("plain", "not a directory")
	head := repo.Commit("two clusters")
	r, err := git.PlainOpen(repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	commit, err := r.CommitObject(plumbing.NewHash(head))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := commit.Tree()
	if err != nil {
		t.Fatal(err)
	}

	files, read, err := readJobFiles(tree, "eu", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := fileMap(&Snapshot{Files: files})
	if len(got) != 2 || got["eu/web.nomad.hcl"].Vars != "count = 2" || got["eu/deep/api.nomad.hcl"].Content != `job "api" {}` {
		t.Fatalf("files of eu: %+v", got)
	}
	if len(read.blobs) != 3 || len(read.hashes) != 2 {
		t.Fatalf("%d blobs and %d content hashes read, want eu's 3 files and 2 job files", len(read.blobs), len(read.hashes))
	}
	for _, f := range files {
		if f.ContentHash() != f.contentHash() {
			t.Fatalf("%s: content hash %s, want its content's", f.Path, f.ContentHash())
		}
	}
	for _, dir := range []string{"mars", "plain", "eu/web.nomad.hcl"} {
		if files, _, err := readJobFiles(tree, dir, nil); err != nil || len(files) != 0 {
			t.Errorf("files of %q: %+v, %v; want none", dir, files, err)
		}
	}

	// A known blob is taken as known: the content given, not the one in
	// git (which readJobFiles would only show if it read the blob again).
	// So is a known content hash: web's, by the blobs of its file and
	// its variables file.
	known := &readCache{blobs: map[plumbing.Hash]string{}, hashes: map[[2]plumbing.Hash]string{}}
	for h, c := range read.blobs {
		if c == `job "api" {}` {
			known.blobs[h] = `job "api" { known = true }`
		}
	}
	for key, h := range read.hashes {
		if h == got["eu/web.nomad.hcl"].ContentHash() {
			known.hashes[key] = "known-hash"
		}
	}
	files, _, err = readJobFiles(tree, "eu", known)
	if err != nil {
		t.Fatal(err)
	}
	got = fileMap(&Snapshot{Files: files})
	if got["eu/deep/api.nomad.hcl"].Content != `job "api" { known = true }` || got["eu/web.nomad.hcl"].Content != `job "web" {}` {
		t.Fatalf("files with a known blob: %+v", got)
	}
	if h := got["eu/web.nomad.hcl"].ContentHash(); h != "known-hash" {
		t.Fatalf("web's content hash is %s; want the known one", h)
	}
	if h := got["eu/deep/api.nomad.hcl"]; h.ContentHash() != h.contentHash() {
		t.Fatalf("api's content hash %s is not its content's", h.ContentHash())
	}
}
