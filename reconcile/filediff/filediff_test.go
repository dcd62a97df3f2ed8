package filediff_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nops-dev/nops/reconcile/filediff"
	"github.com/nops-dev/nops/reconcile/redact"
)

func lines(n int, f func(i int) string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(f(i) + "\n")
	}
	return b.String()
}

func TestUnified(t *testing.T) {
	ten := lines(10, func(i int) string { return "line " + strconv.Itoa(i) })
	for _, tc := range []struct {
		name     string
		from, to filediff.Version
		want     string
	}{
		{"same", filediff.Version{Path: "a.hcl", Text: ten}, filediff.Version{Path: "a.hcl", Text: ten}, ""},
		{"both absent", filediff.Version{}, filediff.Version{}, ""},
		{
			"added", filediff.Version{}, filediff.Version{Path: "jobs/web.nomad.hcl", Text: "a\nb\n"},
			"--- /dev/null\n+++ b/jobs/web.nomad.hcl\n@@ -0,0 +1,2 @@\n+a\n+b\n",
		},
		{
			"removed", filediff.Version{Path: "web.vars.hcl", Text: "x = 1\n"}, filediff.Version{},
			"--- a/web.vars.hcl\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n",
		},
		{
			"one line changed in the middle",
			filediff.Version{Path: "a", Text: ten},
			filediff.Version{Path: "a", Text: strings.Replace(ten, "line 5\n", "line five\n", 1)},
			"--- a/a\n+++ b/a\n@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n",
		},
		{
			"two changes far apart make two hunks",
			filediff.Version{Path: "a", Text: ten},
			filediff.Version{Path: "a", Text: strings.Replace(strings.Replace(ten, "line 1\n", "first\n", 1), "line 10\n", "last\n", 1)},
			"--- a/a\n+++ b/a\n@@ -1,4 +1,4 @@\n-line 1\n+first\n line 2\n line 3\n line 4\n@@ -7,4 +7,4 @@\n line 7\n line 8\n line 9\n-line 10\n+last\n",
		},
		{
			"changes six lines apart share a hunk",
			filediff.Version{Path: "a", Text: ten},
			filediff.Version{Path: "a", Text: strings.Replace(strings.Replace(ten, "line 2\n", "two\n", 1), "line 9\n", "nine\n", 1)},
			"--- a/a\n+++ b/a\n@@ -1,10 +1,10 @@\n line 1\n-line 2\n+two\n line 3\n line 4\n line 5\n line 6\n line 7\n line 8\n-line 9\n+nine\n line 10\n",
		},
		{
			"no newline at the end",
			filediff.Version{Path: "a", Text: "a\nb"},
			filediff.Version{Path: "a", Text: "a\nb\n"},
			"--- a/a\n+++ b/a\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
		},
		{
			"renamed, same text", filediff.Version{Path: "old.hcl", Text: "a\n"}, filediff.Version{Path: "new.hcl", Text: "a\n"},
			"--- a/old.hcl\n+++ b/new.hcl\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := filediff.Unified(tc.from, tc.to, nil); got != tc.want {
				t.Errorf("diff:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestUnified_Redacted: a changed secret shows as a changed line, and its
// value on neither side; a line that only sits near one is context.
func TestUnified_Redacted(t *testing.T) {
	from := "job \"web\" {\n  env {\n    DB_PASSWORD = \"old-secret\"\n    IMAGE = \"web:1\"\n  }\n}\n"
	to := "job \"web\" {\n  env {\n    DB_PASSWORD = \"new-secret\"\n    IMAGE = \"web:2\"\n  }\n}\n"
	got := filediff.Unified(filediff.Version{Path: "web.nomad.hcl", Text: from}, filediff.Version{Path: "web.nomad.hcl", Text: to}, redact.New().Source)
	want := "--- a/web.nomad.hcl\n+++ b/web.nomad.hcl\n@@ -1,6 +1,6 @@\n job \"web\" {\n   env {\n" +
		"-    DB_PASSWORD = \"(redacted)\"\n-    IMAGE = \"web:1\"\n+    DB_PASSWORD = \"(redacted)\"\n+    IMAGE = \"web:2\"\n   }\n }\n"
	if got != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", got, want)
	}
	// A redactor that loses lines never lets an original line through.
	lossy := func(string) string { return "" }
	if got := filediff.Unified(filediff.Version{Path: "a", Text: from}, filediff.Version{Path: "a", Text: to}, lossy); strings.Contains(got, "secret") {
		t.Fatalf("a lossy redactor let an original line through:\n%s", got)
	}
}

// TestUnified_AppliesAsGitDoes: the diff of random edits, unredacted,
// is a patch git applies to the old text to give the new one.
func TestUnified_AppliesAsGitDoes(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for round := 0; round < 40; round++ {
		n := rng.IntN(30)
		old := lines(n, func(i int) string { return fmt.Sprintf("l%d", rng.IntN(8)) })
		var edited []string
		for _, l := range strings.SplitAfter(old, "\n") {
			if l == "" {
				continue
			}
			switch rng.IntN(6) {
			case 0: // removed
			case 1:
				edited = append(edited, fmt.Sprintf("new%d\n", rng.IntN(5)), l)
			case 2:
				edited = append(edited, "changed\n")
			default:
				edited = append(edited, l)
			}
		}
		if rng.IntN(2) == 0 {
			edited = append(edited, "tail\n")
		}
		newText := strings.Join(edited, "")
		patch := filediff.Unified(filediff.Version{Path: "f", Text: old}, filediff.Version{Path: "f", Text: newText}, nil)
		if old == newText {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "p"), []byte(patch), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("git", "apply", "--unidiff-zero", "p")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("round %d: git apply: %v\n%s\nold:\n%s\npatch:\n%s", round, err, out, old, patch)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "f"))
		if string(got) != newText {
			t.Fatalf("round %d: the patch gives\n%s\nwant\n%s\npatch:\n%s", round, got, newText, patch)
		}
	}
}
