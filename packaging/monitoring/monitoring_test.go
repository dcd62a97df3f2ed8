// Package monitoring_test checks the monitoring files beside it: the
// Prometheus alert rules (alerts.yml) and the Grafana dashboard
// (grafana-dashboard.json). Prometheus's own parsers read them, in the tool
// module scripts/tools/promcheck run with `go run` (Prometheus's module
// would move the main module's dependencies); every metric they name must
// be one that a real running server exports on GET /metrics.
package monitoring_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// report is promcheck's output.
type report struct {
	Rules []struct {
		Group       string            `json:"group"`
		Alert       string            `json:"alert"`
		Record      string            `json:"record"`
		Expr        string            `json:"expr"`
		For         string            `json:"for"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		Metrics     []string          `json:"metrics"`
	} `json:"rules"`
	Dashboard []struct {
		Panel   string   `json:"panel"`
		Expr    string   `json:"expr"`
		Metrics []string `json:"metrics"`
	} `json:"dashboard"`
}

// requiredAlerts are the conditions issue 31 asks alerts for.
var requiredAlerts = []string{
	"NopsNoLeader", "NopsApprovalWaiting", "NopsDeploymentsFailing", "NopsRepositoryFetchFailing",
	"NopsNotificationDeadLetters", "NopsServerUnhealthy",
}

// requiredPanels are the dashboard's panels issue 31 asks for.
var requiredPanels = []string{
	"Deployments by state", "Approvals waiting and oldest age", "Detection duration", "Apply duration",
	"Nomad requests by operation", "Nomad request errors by operation", "Leader by server", "Raft commit time",
	"Leadership changes", "Autopilot health by server", "Notification queue", "Dead letters", "Repository fetch failures",
}

func TestMonitoringFiles(t *testing.T) {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(root, "packaging", "monitoring", "alerts.yml")
	dash := filepath.Join(root, "packaging", "monitoring", "grafana-dashboard.json")
	rep := promcheck(t, root, "-rules", rules, "-dashboard", dash)

	doc, err := os.ReadFile(filepath.Join(root, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	checkRules(t, rep, anchors(string(doc)))
	checkDashboard(t, dash, rep)

	// Every metric they name, against what a running server exports.
	named := map[string][]string{}
	for _, r := range rep.Rules {
		for _, m := range r.Metrics {
			named[m] = append(named[m], "alert "+r.Alert)
		}
	}
	for _, q := range rep.Dashboard {
		for _, m := range q.Metrics {
			named[m] = append(named[m], "dashboard "+q.Panel)
		}
	}
	if len(named) < 20 {
		t.Fatalf("the files name only %d metrics: the report is wrong", len(named))
	}
	s := startServer(t)
	var missing []string
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		exported := scrape(t, s)
		missing = missing[:0]
		for m, users := range named {
			if !exported[m] {
				missing = append(missing, fmt.Sprintf("%s (in %s)", m, strings.Join(users, ", ")))
			}
		}
		slices.Sort(missing)
		return len(missing) == 0, fmt.Errorf("the server does not export:\n%s", strings.Join(missing, "\n"))
	})
}

// TestPromcheckRefusesBadFiles: the check is able to fail. A rule whose
// expression does not parse, a dashboard query that does not, and a
// selector that names no metric are each refused, naming the problem.
func TestPromcheckRefusesBadFiles(t *testing.T) {
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		flag, file, want string
	}{
		{"-rules", write("bad-expr.yml", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum(nops_leader\n"), "unclosed left parenthesis"},
		{"-rules", write("bad-field.yml", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: nops_leader\n    severity: high\n"), "severity"},
		{"-rules", write("no-name.yml", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: '{job=\"nops\"} > 0'\n"), "names no metric"},
		{"-dashboard", write("bad.json", `{"panels":[{"title":"P","targets":[{"expr":"rate(nops_leader[$__rate_interval]"}]}]}`), "panel P"},
		{"-dashboard", write("var.json", `{"panels":[{"title":"Q","targets":[{"expr":"rate(nops_leader[5m]) $op 1"}]}]}`), "panel Q"},
	}
	for _, c := range cases {
		out, err := runPromcheck(root, c.flag, c.file)
		if err == nil {
			t.Errorf("promcheck %s %s passed:\n%s", c.flag, filepath.Base(c.file), out)
			continue
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("promcheck %s %s: %v, output lacks %q:\n%s", c.flag, filepath.Base(c.file), err, c.want, out)
		}
	}
}

// runPromcheck runs the tool module with args and returns its output.
func runPromcheck(root string, args ...string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command runs promcheck: %w", err)
	}
	cmd := exec.Command(goBin, append([]string{"run", "."}, args...)...)
	cmd.Dir = filepath.Join(root, "scripts", "tools", "promcheck")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func promcheck(t *testing.T, root string, args ...string) report {
	t.Helper()
	out, err := runPromcheck(root, args...)
	if err != nil {
		t.Fatalf("promcheck: %v\n%s", err, out)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("promcheck's report: %v\n%s", err, out)
	}
	return rep
}

// heading matches a markdown heading; its anchor is GitHub's.
var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)

// anchors returns the anchors of a markdown page's headings.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(doc, -1) {
		a := strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				return r
			case r >= 'A' && r <= 'Z':
				return r + 'a' - 'A'
			case r == ' ':
				return '-'
			}
			return -1
		}, m[1])
		out[a] = true
	}
	return out
}

// checkRules checks what Prometheus does not: every alert waits (for),
// says how severe it is, explains itself and points to its section in
// docs/monitoring.md; and the alerts the issue asks for are there.
func checkRules(t *testing.T, rep report, docAnchors map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range rep.Rules {
		if r.Alert == "" {
			continue
		}
		seen[r.Alert] = true
		if r.For == "" || r.For == "0s" {
			t.Errorf("alert %s has no for", r.Alert)
		}
		if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
			t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, sev)
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("alert %s has no %s", r.Alert, a)
			}
		}
		page, anchor, _ := strings.Cut(r.Annotations["runbook"], "#")
		if page != "docs/monitoring.md" || !docAnchors[anchor] {
			t.Errorf("alert %s: runbook %q is not a section of docs/monitoring.md", r.Alert, r.Annotations["runbook"])
		}
		if len(r.Metrics) == 0 {
			t.Errorf("alert %s names no metric", r.Alert)
		}
	}
	for _, a := range requiredAlerts {
		if !seen[a] {
			t.Errorf("no alert %s", a)
		}
	}
}

// grafanaPanel is what the test reads of a dashboard panel.
type grafanaPanel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// checkDashboard checks the dashboard as Grafana imports it: schema 39 or
// later, a DS_PROMETHEUS input that every panel uses, the panels the issue
// asks for, and every query in promcheck's report (none skipped).
func checkDashboard(t *testing.T, path string, rep report) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		SchemaVersion int    `json:"schemaVersion"`
		UID           string `json:"uid"`
		Inputs        []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			PluginID string `json:"pluginId"`
		} `json:"__inputs"`
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if d.SchemaVersion < 39 || d.UID == "" {
		t.Errorf("dashboard schema %d, uid %q: want 39 or later, and a uid", d.SchemaVersion, d.UID)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("dashboard inputs %+v: want the one DS_PROMETHEUS data source", d.Inputs)
	}
	titles := map[string]bool{}
	targets := 0
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			titles[p.Title] = true
			targets += len(p.Targets)
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}") {
				t.Errorf("panel %q does not use the DS_PROMETHEUS input", p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, p := range requiredPanels {
		if !titles[p] {
			t.Errorf("the dashboard has no panel %q", p)
		}
	}
	panelQueries := 0
	for _, q := range rep.Dashboard {
		if strings.HasPrefix(q.Panel, "panel ") {
			panelQueries++
		}
	}
	if targets == 0 || panelQueries != targets {
		t.Errorf("promcheck parsed %d panel queries of the %d in the dashboard", panelQueries, targets)
	}
}

// startServer starts a real single server that leads, with its
// reconcilers against a real Nomad agent, one watched repository and one
// notification target: everything whose metrics the files name.
func startServer(t *testing.T) *nopstest.Server {
	t.Helper()
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", testutil.ServiceJobHCL("web", testutil.WithMeta("nops_managed", "true")))
	repo.Commit("a managed job")
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(rcv.Close)
	return nopstest.Start(t, "",
		nopstest.WithNomad(nomad.Addr),
		nopstest.WithRepo("main", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(c *config.Config) {
			c.Notify = append(c.Notify, config.NotifyConfig{Name: "ops", Kind: config.NotifyKindWebhook, URL: rcv.URL})
		}))
}

// scrape reads the server's GET /metrics as Prometheus would and returns
// the names of the series it may select, from each family's TYPE line
// (present even for a family whose one series is 0): the family's name, but
// a histogram's _bucket, _sum and _count instead, and a summary's _sum and
// _count too.
func scrape(t *testing.T, s *nopstest.Server) map[string]bool {
	t.Helper()
	code, body := s.Do(http.MethodGet, "/metrics", nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		name, kind := f[2], f[3]
		switch kind {
		case "histogram":
			// A classic histogram has no series under its own name.
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case "summary":
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
