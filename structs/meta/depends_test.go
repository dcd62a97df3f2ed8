package meta

import (
	"reflect"
	"strings"
	"testing"
)

func TestRead_DependsOn(t *testing.T) {
	cases := []struct {
		name     string
		value    string
		keys     []string
		problems []string
	}{
		{name: "same namespace and another", value: "db, infra/cache", keys: []string{"prod/db", "infra/cache"}},
		{name: "empty is none", value: " "},
		{name: "an empty name", value: "db,,cache", keys: []string{"prod/db", "prod/cache"},
			problems: []string{`jobs/web.nomad.hcl: meta nops_depends_on = "db,,cache": has an empty job name`}},
		{name: "twice", value: "db,prod/db,db", keys: []string{"prod/db", "prod/db"},
			problems: []string{`meta nops_depends_on = "db,prod/db,db": names db twice`}},
		{name: "a blank inside a name", value: "my db", problems: []string{`job name "my db" has a blank in it`}},
		{name: "two slashes", value: "a/b/c", problems: []string{`"a/b/c" is neither a job ID nor namespace/job`}},
		{name: "no namespace before the slash", value: "/db", problems: []string{`"/db" is neither a job ID nor namespace/job`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := Read("jobs/web.nomad.hcl", job("service", map[string]string{KeyManaged: "true", KeyDependsOn: tc.value}), defaults)
			if got := m.Dependencies("", "prod"); !reflect.DeepEqual(got, tc.keys) {
				t.Fatalf("dependencies: got %q, want %q", got, tc.keys)
			}
			if len(m.Problems) != len(tc.problems) {
				t.Fatalf("problems: got %q, want %q", m.Problems, tc.problems)
			}
			for i, p := range tc.problems {
				if !strings.Contains(m.Problems[i], p) {
					t.Fatalf("problem %d: got %q, want it to contain %q", i, m.Problems[i], p)
				}
			}
		})
	}
	h := Read("jobs/h.nomad.hcl", job("batch", map[string]string{KeyRole: "hook", KeyDependsOn: "db"}), defaults)
	if len(h.Problems) != 1 || !strings.Contains(h.Problems[0], `meta nops_depends_on = "db": only a managed job takes this key, not a hook`) {
		t.Fatalf("a hook with nops_depends_on: problems %q", h.Problems)
	}
}

// node is a managed job of a test graph depending on deps (job keys).
func node(deps ...string) DependencyNode {
	return DependencyNode{File: "jobs/x.nomad.hcl", Value: strings.Join(deps, ","), DependsOn: deps}
}

func TestDependencyProblems(t *testing.T) {
	g := DependencyGraph{
		Managed: map[string]DependencyNode{
			"default/api":   node("default/db", "default/cache"),
			"default/db":    node(),
			"default/web":   node("default/api", "default/lib", "default/hook"),
			"default/a":     node("default/b"),
			"default/b":     node("default/a"),
			"default/x":     node("default/y"),
			"default/y":     node("default/z"),
			"default/z":     node("default/x", "default/db"),
			"default/self":  node("default/self"),
			"default/after": node("default/a"),
		},
		Declared: map[string]bool{"default/hook": true},
	}
	got := DependencyProblems(g)
	want := map[string][]string{
		"default/api": {`jobs/x.nomad.hcl: meta nops_depends_on = "default/db,default/cache": default/cache is missing: no file declares it`},
		"default/web": {
			`jobs/x.nomad.hcl: meta nops_depends_on = "default/api,default/lib,default/hook": default/lib is missing: no file declares it`,
			`jobs/x.nomad.hcl: meta nops_depends_on = "default/api,default/lib,default/hook": default/hook is not a managed job (it has no nops_managed = "true", or its namespace is not managed)`,
		},
		"default/a":    {`jobs/x.nomad.hcl: meta nops_depends_on = "default/b": dependency cycle default/a -> default/b -> default/a`},
		"default/b":    {`jobs/x.nomad.hcl: meta nops_depends_on = "default/a": dependency cycle default/b -> default/a -> default/b`},
		"default/x":    {`jobs/x.nomad.hcl: meta nops_depends_on = "default/y": dependency cycle default/x -> default/y -> default/z -> default/x`},
		"default/y":    {`jobs/x.nomad.hcl: meta nops_depends_on = "default/z": dependency cycle default/y -> default/z -> default/x -> default/y`},
		"default/z":    {`jobs/x.nomad.hcl: meta nops_depends_on = "default/x,default/db": dependency cycle default/z -> default/x -> default/y -> default/z`},
		"default/self": {`jobs/x.nomad.hcl: meta nops_depends_on = "default/self": dependency cycle default/self -> default/self`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n got %q\nwant %q", got, want)
	}
}

func TestDependencyOrder_DependenciesFirst(t *testing.T) {
	g := DependencyGraph{Managed: map[string]DependencyNode{
		"default/api":   node("default/db", "default/cache"),
		"default/db":    node("other/base"),
		"default/aaa":   node("default/api"),
		"other/base":    node(),
		"default/zz":    node(),
		"default/a":     node("default/b"),
		"default/b":     node("default/a"),
		"default/cache": node("default/gone"),
	}}
	got := DependencyOrder(g)
	want := []string{"default/b", "default/a", "other/base", "default/db", "default/cache", "default/api", "default/aaa", "default/zz"}
	// default/a and default/b form a cycle: the walk from default/a meets
	// it there, so default/b comes first; each is there once.
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order:\n got %q\nwant %q", got, want)
	}
}
