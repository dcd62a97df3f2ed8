// Command promcheck reads the monitoring files of packaging/monitoring with
// Prometheus's own parsers: the alert rules with model/rulefmt (which also
// parses each expression and annotation template), and every PromQL
// expression of the Grafana dashboard with promql/parser. It prints, as
// JSON, each rule and each dashboard query with the metric names it
// selects, for the main module's test to compare with what a running
// server exports.
//
// It is a module of its own because Prometheus's module requires some 250
// others (cloud SDKs, Kubernetes) and newer versions of modules the server
// shares with it: in the main go.mod they would move the server's own
// dependencies for the sake of one test.
//
// Usage:
//
//	promcheck -rules alerts.yml -dashboard grafana-dashboard.json
//
// It exits 1, naming every problem, when a file does not parse, a rule or
// query is invalid, or a selector names no metric.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Rule is one rule of the rules file.
type Rule struct {
	Group       string            `json:"group"`
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	Metrics     []string          `json:"metrics"`
}

// Query is one PromQL query of the dashboard: a panel's target or a
// template variable's query.
type Query struct {
	Panel   string   `json:"panel"`
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
}

// Report is what promcheck prints.
type Report struct {
	Rules     []Rule  `json:"rules"`
	Dashboard []Query `json:"dashboard"`
}

func main() {
	rules := flag.String("rules", "", "Prometheus rules file (YAML)")
	dashboard := flag.String("dashboard", "", "Grafana dashboard (JSON)")
	flag.Parse()
	if *rules == "" && *dashboard == "" {
		fmt.Fprintln(os.Stderr, "promcheck: give -rules, -dashboard or both")
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	var rep Report
	var errs []error
	if *rules != "" {
		r, err := checkRules(p, *rules)
		rep.Rules, errs = r, append(errs, err...)
	}
	if *dashboard != "" {
		q, err := checkDashboard(p, *dashboard)
		rep.Dashboard, errs = q, append(errs, err...)
	}
	if len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintln(os.Stderr, "promcheck:", err)
		}
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "promcheck:", err)
		os.Exit(1)
	}
}

// checkRules loads a rules file as Prometheus does (unknown fields refused,
// classic metric and label names) and lists each rule's metrics.
func checkRules(p parser.Parser, path string) ([]Rule, []error) {
	groups, errs := rulefmt.ParseFile(path, false, model.LegacyValidation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		return nil, errs
	}
	var out []Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: group %q, rule %q: %w", path, g.Name, name, err))
				continue
			}
			metrics, err := metricNames(expr)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: group %q, rule %q: %w", path, g.Name, name, err))
			}
			out = append(out, Rule{
				Group: g.Name, Alert: r.Alert, Record: r.Record, Expr: r.Expr, For: r.For.String(),
				Labels: r.Labels, Annotations: r.Annotations, Metrics: metrics,
			})
		}
	}
	return out, errs
}

// metricNames lists the metric names of an expression's selectors, sorted
// and unique. A selector without a metric name (a regexp on __name__, or
// none) is an error: what it selects cannot be checked.
func metricNames(expr parser.Expr) ([]string, error) {
	set := map[string]bool{}
	var errs []error
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("selector %s names no metric", vs))
			return nil
		}
		set[name] = true
		return nil
	})
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, errors.Join(errs...)
}

// dashboard is the part of a Grafana dashboard that holds queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	// Panels are the panels of a collapsed row.
	Panels []panel `json:"panels"`
}

// checkDashboard parses every query of a dashboard: the panels' targets
// (rows' panels included) and the query variables.
func checkDashboard(p parser.Parser, path string) ([]Query, []error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, []error{err}
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, []error{fmt.Errorf("%s: %w", path, err)}
	}
	var out []Query
	var errs []error
	add := func(where, expr string) {
		q, err := checkQuery(p, where, expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", path, where, err))
			return
		}
		out = append(out, q)
	}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, pn := range panels {
			for _, t := range pn.Targets {
				add("panel "+pn.Title, t.Expr)
			}
			walk(pn.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v.Query)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: variable %s: %w", path, v.Name, err))
			continue
		}
		add("variable "+v.Name, q)
	}
	return out, errs
}

// variableQuery is the query of a query variable: a string, or an object
// with a query field, as Grafana writes them.
func variableQuery(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object with a query: %w", err)
	}
	return o.Query, nil
}

// labelValues matches Grafana's label_values(selector, label) variable
// query, which is not PromQL; its selector is.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// checkQuery parses one query once Grafana's variables are replaced.
func checkQuery(p parser.Parser, where, expr string) (Query, error) {
	if strings.TrimSpace(expr) == "" {
		return Query{}, errors.New("empty query")
	}
	text := expandVariables(expr)
	if m := labelValues.FindStringSubmatch(text); m != nil {
		text = m[1]
	}
	e, err := p.ParseExpr(text)
	if err != nil {
		return Query{}, fmt.Errorf("%q (as %q): %w", expr, text, err)
	}
	metrics, err := metricNames(e)
	if err != nil {
		return Query{}, fmt.Errorf("%q: %w", expr, err)
	}
	return Query{Panel: where, Expr: expr, Metrics: metrics}, nil
}

// variable matches Grafana's variable syntaxes: $name, ${name},
// ${name:format} and [[name]].
var variable = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// expandVariables replaces Grafana's variables as Grafana would before it
// sends a query: the interval variables by a duration, any other (a label
// value) by a regexp that matches all. A variable used where neither fits
// leaves a query that does not parse.
func expandVariables(expr string) string {
	return variable.ReplaceAllStringFunc(expr, func(v string) string {
		m := variable.FindStringSubmatch(v)
		name := m[1] + m[2] + m[3]
		switch name {
		case "__interval", "__rate_interval", "__range":
			return "5m"
		case "__interval_ms", "__range_ms":
			return "300000"
		case "__range_s":
			return "300"
		default:
			return ".*"
		}
	})
}
