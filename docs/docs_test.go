// Package docs_test runs the documentation: every fenced block of README.md
// and docs/*.md marked runnable is run, so a page that stops being true
// fails the tests with its file and line.
//
// A block is marked by an HTML comment, invisible on the rendered page, on
// the line right before its opening fence:
//
//	<!-- runnable: sh -->            bash -euo pipefail, in an empty directory,
//	                                 with bin/nops first on PATH
//	<!-- runnable: sh cluster -->    the same, with NOPS_ADDR and NOPS_TOKEN (a
//	                                 management token) of a 3-server cluster
//	                                 with ACLs on
//	<!-- runnable: config ARGS -->   a server configuration file, loaded as
//	                                 `nops serve -config FILE ARGS` loads it
//	                                 (every setting checked; nothing started);
//	                                 the variables its *_env settings name
//	                                 are set
//	<!-- runnable: job -->           a Nomad job file, judged by `nops
//	                                 validate` (HCL syntax and nops_* meta)
//	<!-- runnable: file NAME -->     a file the sh blocks after it in the page
//	                                 use, written as NAME
//
// The sh blocks of a page run one after the other in one directory, the
// page's, as a reader follows the page.
//
// Blocks that cannot run here (systemd units, docker, a released package,
// placeholders such as <ID>) stay unmarked.
package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// blockTimeout bounds one runnable block.
const blockTimeout = 2 * time.Minute

var (
	markerRE = regexp.MustCompile(`^<!--\s*runnable:\s*(\S+)(.*?)\s*-->\s*$`)
	fenceRE  = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")
	envRefRE = regexp.MustCompile(`(?m)^\s*\w+_env\s*=\s*"([A-Za-z_][A-Za-z0-9_]*)"`)
)

// block is one fenced block of a page.
type block struct {
	file string // slash path from the repository root
	line int    // line of the opening fence, from 1
	kind string // the marker's kind; "" when unmarked
	args []string
	text string
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// TestDocs runs every runnable block and reports, per file, how many
// blocks it has and how many ran.
func TestDocs(t *testing.T) {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages)
	for _, p := range pages {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator))))
	}
	type count struct{ found, ran, files int }
	counts := map[string]*count{}
	var marked []block
	needCluster := false
	for _, f := range files {
		blocks, err := parseBlocks(root, f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		c := &count{found: len(blocks)}
		counts[f] = c
		for _, b := range blocks {
			switch b.kind {
			case "":
				continue
			case "file":
				c.files++
			default:
				c.ran++
			}
			marked = append(marked, b)
			needCluster = needCluster || (b.kind == "sh" && slices.Contains(b.args, "cluster"))
		}
	}
	r := &runner{pages: map[string]string{}}
	for _, b := range marked {
		if _, ok := r.pages[b.file]; !ok {
			r.pages[b.file] = newPageDir(t)
		}
	}
	if needCluster {
		r.cluster = startCluster(t)
	}
	for _, b := range marked {
		t.Run(b.String(), func(t *testing.T) { r.run(t, b) })
	}
	var report strings.Builder
	total := count{}
	for _, f := range files {
		if c := counts[f]; c != nil {
			fmt.Fprintf(&report, "\n  %-28s %3d blocks, %2d run, %d written as files", f, c.found, c.ran, c.files)
			total.found += c.found
			total.ran += c.ran
			total.files += c.files
		}
	}
	t.Logf("runnable blocks per file:%s\n  %-28s %3d blocks, %2d run, %d written as files", report.String(), "total", total.found, total.ran, total.files)
	if total.ran == 0 {
		t.Error("no block of the docs is marked runnable")
	}
}

// parseBlocks reads the fenced blocks of one page and their markers. A
// marker that is not right before an opening fence, an unknown kind and an
// unclosed fence are errors naming the line.
func parseBlocks(root, file string) ([]block, error) {
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks  []block
		cur     *block
		fence   string
		indent  string
		body    strings.Builder
		pending *block // a marker waiting for its fence on the next line
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if cur != nil {
			if strings.TrimSpace(line) == fence {
				cur.text = body.String()
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			body.WriteString(strings.TrimPrefix(line, indent))
			body.WriteByte('\n')
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			cur = &block{file: file, line: n}
			if pending != nil {
				cur.kind, cur.args = pending.kind, pending.args
				pending = nil
			}
			indent, fence = m[1], m[2]
			body.Reset()
			continue
		}
		if pending != nil {
			return nil, fmt.Errorf("%s:%d: a runnable marker must be on the line right before an opening fence", file, pending.line)
		}
		if m := markerRE.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			switch m[1] {
			case "sh", "config", "job", "file":
			default:
				return nil, fmt.Errorf("%s:%d: unknown runnable kind %q (sh, config, job or file)", file, n, m[1])
			}
			pending = &block{line: n, kind: m[1], args: strings.Fields(m[2])}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the fence opened here is never closed", file, cur.line)
	}
	if pending != nil {
		return nil, fmt.Errorf("%s:%d: a runnable marker must be on the line right before an opening fence", file, pending.line)
	}
	return blocks, nil
}

// runner runs blocks.
type runner struct {
	// pages holds the directory of each page: its sh blocks run there one
	// after the other, as a reader follows the page, and its file blocks
	// are written there.
	pages map[string]string
	// cluster serves the `sh cluster` blocks.
	cluster *testCluster
}

func (r *runner) run(t *testing.T, b block) {
	switch b.kind {
	case "sh":
		r.runShell(t, b)
	case "config":
		runConfig(t, b)
	case "job":
		r.runJob(t, b)
	case "file":
		r.writeFile(t, b)
	}
}

// baseEnv is the environment of a block: the test's without any NOPS_ or
// NOMAD_ setting, with bin/nops first on PATH and HOME in dir.
func baseEnv(t *testing.T, dir string) []string {
	bin := testutil.NopsBinary(t)
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NOPS_") || strings.HasPrefix(kv, "NOMAD_") ||
			strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+dir)
}

// newPageDir makes the directory of a page: work, its current directory,
// and home, its HOME.
func newPageDir(t *testing.T) string {
	dir := t.TempDir()
	for _, sub := range []string{"work", "home"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writeFile writes a file block into its page's directory, for the sh
// blocks after it.
func (r *runner) writeFile(t *testing.T, b block) {
	if len(b.args) != 1 || strings.ContainsAny(b.args[0], `/\`) {
		t.Fatalf("%s: a file block names one file, without a directory: %q", b, b.args)
	}
	if err := os.WriteFile(filepath.Join(r.pages[b.file], "work", b.args[0]), []byte(b.text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (r *runner) runShell(t *testing.T, b block) {
	dir := r.pages[b.file]
	env := baseEnv(t, filepath.Join(dir, "home"))
	work := filepath.Join(dir, "work")
	for _, a := range b.args {
		if a != "cluster" {
			t.Fatalf("%s: unknown option %q of a sh block (cluster)", b, a)
		}
		env = append(env, "NOPS_ADDR="+r.cluster.addr, "NOPS_TOKEN="+r.cluster.token)
		// Each block finds the cluster healthy, whatever the block
		// before it did (a snapshot restore, a leader change).
		testutil.WaitForResult(t, time.Minute, func() (bool, error) {
			var h structs.AutopilotHealth
			if err := r.cluster.call(http.MethodGet, "/v1/operator/autopilot/health", &h); err != nil {
				return false, err
			}
			if !h.Healthy {
				return false, fmt.Errorf("the test cluster is not healthy: %+v", h)
			}
			return true, nil
		})
	}
	script := filepath.Join(dir, fmt.Sprintf("block-%d.sh", b.line))
	if err := os.WriteFile(script, []byte(b.text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", script)
	cmd.Dir, cmd.Env = work, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: the block failed: %v\n--- block\n%s--- output\n%s", b, err, b.text, out.String())
	}
	t.Logf("%s: ran\n%s", b, out.String())
}

// startCluster starts a 3-server cluster with ACLs on (its leader loops
// off: it reaches no Nomad and no git) for the rest of the test, and
// bootstraps its ACLs.
func startCluster(t *testing.T) *testCluster {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(),
		nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = true }))
	tc := &testCluster{addr: c.Server(0).URL}
	var boot struct {
		SecretID string `json:"secret_id"`
	}
	testutil.WaitForResult(t, time.Minute, func() (bool, error) {
		err := tc.call("POST", "/v1/acl/bootstrap", &boot)
		return err == nil, err
	})
	tc.token = boot.SecretID
	return tc
}

// testCluster is the API of the cluster of `sh cluster` blocks, with its
// management token.
type testCluster struct {
	addr, token string
}

func (c *testCluster) call(method, path string, out any) error {
	var body io.Reader
	if method != http.MethodGet {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequest(method, c.addr+path, body)
	if err != nil {
		return err
	}
	nopstest.SetContentType(req)
	if c.token != "" {
		req.Header.Set("X-Nops-Token", c.token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// runConfig loads the block as `nops serve -config FILE ARGS` does.
func runConfig(t *testing.T, b block) {
	file := filepath.Join(t.TempDir(), "block.hcl")
	if err := os.WriteFile(file, []byte(b.text), 0o600); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, m := range envRefRE.FindAllStringSubmatch(b.text, -1) {
		set[m[1]] = true
	}
	// A block that says to put the gossip key in the environment gets one.
	if strings.Contains(b.text, "NOPS_ENCRYPT") {
		set["NOPS_ENCRYPT"] = true
	}
	lookup := func(name string) (string, bool) {
		if name == "NOPS_ENCRYPT" && set[name] {
			return nopstest.GossipKey, true
		}
		if set[name] {
			return "set-by-the-docs-test", true
		}
		return "", false
	}
	if _, err := config.Load(append([]string{"-config", file}, b.args...), lookup); err != nil {
		t.Fatalf("%s: the configuration does not load: %v\n--- block\n%s", b, err, b.text)
	}
}

// runJob judges the block with `nops validate`, with no Nomad to reach.
func (r *runner) runJob(t *testing.T, b block) {
	dir := t.TempDir()
	jobs := filepath.Join(dir, "jobs")
	if err := os.Mkdir(jobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jobs, "block.nomad.hcl"), []byte(b.text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	closed := testutil.FreePorts(t, 1)[0]
	cmd := exec.CommandContext(ctx, testutil.NopsBinary(t), "validate", "-nomad-addr", fmt.Sprintf("http://127.0.0.1:%d", closed), jobs)
	cmd.Env = baseEnv(t, dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: nops validate refuses the job: %v\n--- block\n%s--- output\n%s", b, err, b.text, out)
	}
}
