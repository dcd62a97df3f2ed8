package acl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func mustCompile(t testing.TB, rules ...string) *ACL {
	t.Helper()
	var ps []*Policy
	for _, r := range rules {
		p, err := Parse(r)
		if err != nil {
			t.Fatalf("parse %q: %v", r, err)
		}
		ps = append(ps, p)
	}
	return Compile(ps)
}

func TestACL_Rules(t *testing.T) {
	reader := `namespace "*" { capabilities = ["read"] }`
	approver := `
namespace "web-*" {
  job "api-*" {
    capabilities = ["read", "approve"]
  }
}
cluster { capabilities = ["read"] }`
	denyProd := `{"namespace": {"prod": {"capabilities": ["deny"]}}}`
	noPauseAPI := "namespace \"*\" {\n job \"api-*\" { deny = [\"pause\"] }\n}"
	pauser := `namespace "web-*" { capabilities = ["pause"] }`

	a := mustCompile(t, reader, approver, denyProd, noPauseAPI, pauser)
	checks := []struct {
		ns, job string
		c       Capability
		want    bool
	}{
		{"default", "x", Read, true},
		{"default", "x", Approve, false},
		{"web-eu", "api-1", Approve, true},
		{"web-eu", "api-1", Read | Approve, true},
		{"web-eu", "front", Approve, false},
		{"web-eu", "front", Pause, true},
		{"web-eu", "api-1", Pause, false}, // deny wins over the namespace grant
		{"prod", "api-1", Read, false},    // "deny" denies everything
		{"web-eu", "api-1", Deploy, false},
	}
	for _, c := range checks {
		if got := a.AllowJob("", c.ns, c.job, c.c); got != c.want {
			t.Errorf("AllowJob(%s, %s, %s) = %v, want %v", c.ns, c.job, c.c, got, c.want)
		}
	}
	if !a.AllowCluster(Read) || a.AllowCluster(Operator) || a.AllowCluster(Windows) {
		t.Errorf("cluster: read %v operator %v windows %v; want true false false", a.AllowCluster(Read), a.AllowCluster(Operator), a.AllowCluster(Windows))
	}
	if !a.AllowAnyJob(Approve) || a.AllowAnyJob(Deploy) {
		t.Error("AllowAnyJob: want approve somewhere and deploy nowhere")
	}
	var none *ACL
	if none.AllowJob("", "default", "x", Read) || none.AllowCluster(Read) || none.IsManagement() {
		t.Error("a nil ACL allows something")
	}
	m := ManagementACL()
	if !m.AllowJob("eu", "prod", "x", all) || !m.AllowCluster(ACLWrite) {
		t.Error("management ACL refuses something")
	}
	if empty := Compile(nil); empty.AllowJob("", "a", "b", Read) || empty.AllowCluster(Read) {
		t.Error("an ACL of no policies allows something")
	}
}

func TestParse_Refusals(t *testing.T) {
	cases := []struct{ rules, want string }{
		{``, "empty"},
		{`namespace "a" { capabilities = ["fly"] }`, `unknown capability "fly"`},
		{`namespace "a" { capabilities = ["operator"] }`, `capability "operator" cannot be granted here`},
		{`cluster { capabilities = ["approve"] }`, `capability "approve" cannot be granted here`},
		{`cluster {}` + "\n" + `cluster {}`, "more than one cluster block"},
		{`namespace "" { capabilities = ["read"] }`, "must not be empty"},
		{"namespace \"a\" {\n job \"b\" {\n capabilities = [\"read\"]\n deny = [\"x\"]\n }\n}", `unknown capability "x" in deny`},
		{`namespace "a" { colour = "red" }`, "Unsupported argument"},
		{`namespace "a" {`, "Unclosed"},
		{`{"namespace": 3}`, ""},
		{strings.Repeat(" ", maxRules+1), "over the limit"},
		{"cluster \"\" {\n namespace \"*\" { capabilities = [\"read\"] }\n}", `cluster "": bad glob: must not be empty`},
		{`cluster "eu" { capabilities = ["read"] }`, "Unsupported argument"},
		{`cluster "eu" "us" { }`, "Extraneous label"},
		{"cluster \"eu\" {\n namespace \"*\" { capabilities = [\"operator\"] }\n}", `cluster "eu" namespace "*": capability "operator" cannot be granted here`},
		{"cluster \"eu\" {\n namespace \"*\" {\n job \"\" { capabilities = [\"read\"] }\n }\n}", `cluster "eu" namespace "*" job "": bad glob`},
		{"cluster \"eu\" {\n cluster \"us\" {}\n}", "Unsupported block type"},
		{`{"cluster": {"eu": {"namespace": {"*": {"capabilities": ["fly"]}}}}}`, `cluster "eu" namespace "*": unknown capability "fly"`},
		{`{"cluster": [{"capabilities": ["read"]}, {"capabilities": ["read"]}]}`, "more than one cluster block"},
	}
	for _, c := range cases {
		_, err := Parse(c.rules)
		if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%.40q) = %v; want an invalid policy naming %q", c.rules, err, c.want)
		}
	}
}

// TestACL_NomadClusterScopes: a labeled cluster block scopes its namespace
// blocks to the Nomad clusters its glob matches, beside the unlabeled
// block (the Nops cluster itself) and top-level namespace blocks (every
// Nomad cluster), in HCL and in JSON alike.
func TestACL_NomadClusterScopes(t *testing.T) {
	hclRules := `
cluster { capabilities = ["read", "windows"] }
cluster "eu-*" {
  namespace "*" {
    capabilities = ["read", "pause"]
    job "db" { deny = ["pause"] }
  }
}
cluster "us" {
  namespace "web" { capabilities = ["deploy"] }
}
namespace "shared" { capabilities = ["read"] }`
	jsonRules := `{
  "cluster": [
    {"capabilities": ["read", "windows"]},
    {"eu-*": {"namespace": {"*": {"capabilities": ["read", "pause"], "job": {"db": {"deny": ["pause"]}}}}}},
    {"us": {"namespace": {"web": {"capabilities": ["deploy"]}}}}
  ],
  "namespace": {"shared": {"capabilities": ["read"]}}
}`
	checks := []struct {
		cluster, ns, job string
		c                Capability
		want             bool
	}{
		{"eu-west", "web", "api", Pause, true},
		{"eu-west", "web", "db", Pause, false}, // the job's deny in the scope
		{"eu-west", "web", "db", Read, true},
		{"us", "web", "api", Pause, false}, // eu's grant does not reach us
		{"us", "web", "api", Deploy, true},
		{"us", "other", "api", Deploy, false},
		{"eu-west", "web", "api", Deploy, false},
		{"", "web", "api", Read, false}, // "" is the default cluster: no scope matches it
		{"", "shared", "x", Read, true}, // top-level namespace blocks apply to every cluster
		{"us", "shared", "x", Read, true},
		{"eu-west", "shared", "x", Pause, true},
	}
	for name, rules := range map[string]string{"hcl": hclRules, "json": jsonRules} {
		p, err := Parse(rules)
		if err != nil {
			t.Fatalf("%s: parse: %v", name, err)
		}
		if p.Cluster == nil || len(p.Clusters) != 2 || len(p.Namespaces) != 1 {
			t.Fatalf("%s: parsed cluster %v, %d cluster scopes, %d namespaces; want the unlabeled block, 2 scopes, 1 namespace",
				name, p.Cluster, len(p.Clusters), len(p.Namespaces))
		}
		a := Compile([]*Policy{p})
		for _, c := range checks {
			if got := a.AllowJob(c.cluster, c.ns, c.job, c.c); got != c.want {
				t.Errorf("%s: AllowJob(%q, %s, %s, %s) = %v, want %v", name, c.cluster, c.ns, c.job, c.c, got, c.want)
			}
		}
		if !a.AllowCluster(Windows) || a.AllowCluster(Pause) {
			t.Errorf("%s: the unlabeled cluster block: windows %v pause %v; want true false", name, a.AllowCluster(Windows), a.AllowCluster(Pause))
		}
		if !a.AllowAnyJob(Pause) || a.AllowAnyJob(Approve) {
			t.Errorf("%s: AllowAnyJob: want pause somewhere and approve nowhere", name)
		}
	}
}

func TestParse_JSONMatchesHCL(t *testing.T) {
	h := mustCompile(t, "namespace \"web\" {\n job \"a*\" { capabilities = [\"read\",\"deploy\"] }\n}")
	j := mustCompile(t, `{"namespace": {"web": {"job": {"a*": {"capabilities": ["read","deploy"]}}}}}`)
	for _, job := range []string{"api", "b"} {
		if h.AllowJob("", "web", job, Deploy) != j.AllowJob("", "web", job, Deploy) {
			t.Errorf("HCL and JSON disagree on %s", job)
		}
	}
	if !j.AllowJob("", "web", "api", Deploy) {
		t.Error("JSON policy does not grant deploy")
	}
}

// BenchmarkAllowJob measures one authorization check of a token that
// carries 100 policies, as the request path runs it.
func BenchmarkAllowJob(b *testing.B) {
	var rules []string
	for i := 0; i < 100; i++ {
		rules = append(rules, fmt.Sprintf(`namespace "team-%d-*" {
  capabilities = ["read"]
  job "svc-%d-*" { capabilities = ["approve", "deploy"] }
}`, i, i))
	}
	a := mustCompile(b, rules...)
	b.ReportAllocs()
	b.ResetTimer()
	ok := false
	for i := 0; i < b.N; i++ {
		ok = a.AllowJob("eu", "team-99-eu", "svc-99-api", Approve)
	}
	if !ok {
		b.Fatal("check refused")
	}
}
