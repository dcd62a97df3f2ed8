package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestLoad_Clusters: every attribute of a nomad block and a repository's
// cluster are read, blocks stay in file order, and a block without
// namespaces gets the top-level ones.
func TestLoad_Clusters(t *testing.T) {
	c, err := Load([]string{"-config", "testdata/clusters.hcl"}, env(map[string]string{
		// Defaults of the single-cluster settings, not used with blocks.
		"NOMAD_ADDR": "http://other:4646", "NOMAD_TOKEN": "env-token", "NOMAD_REGION": "us",
	}))
	if err != nil {
		t.Fatal(err)
	}
	staging := NomadCluster{Name: "staging", Address: "http://nomad.staging.example.com:4646"}
	eu := NomadCluster{
		Name: "eu", Address: "https://nomad.eu.example.com:4646", Region: "eu", Namespaces: []string{"*"},
		TokenFile: "/run/secrets/nomad-eu", CAFile: "/etc/nops/nomad-eu-ca.pem", CertFile: "/etc/nops/nomad-eu.pem",
		KeyFile: "/etc/nops/nomad-eu-key.pem", TLSServerName: "server.eu.nomad", UIURL: "https://nomad.eu.example.com",
		Requires: []string{"staging"}, Bake: 30 * time.Minute,
	}
	if want := []NomadCluster{staging, eu}; !reflect.DeepEqual(c.Nomads, want) {
		t.Fatalf("Nomads =\n%+v\nwant\n%+v", c.Nomads, want)
	}
	staging.Namespaces = []string{"default", "web"}
	if got, want := c.Clusters(), []NomadCluster{staging, eu}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Clusters() =\n%+v\nwant\n%+v", got, want)
	}
	if got, ok := c.Cluster("eu"); !ok || !reflect.DeepEqual(got, eu) {
		t.Errorf("Cluster(eu) = %+v, %v", got, ok)
	}
	if _, ok := c.Cluster(DefaultCluster); ok {
		t.Error("a configuration with nomad blocks has a default cluster it does not name")
	}
	for _, r := range c.Repositories {
		want := map[string]string{"staging-jobs": "staging", "eu-jobs": "eu"}[r.Name]
		if r.Cluster != want || c.RepoCluster(r) != want {
			t.Errorf("repository %s: cluster %q, RepoCluster %q, want %q", r.Name, r.Cluster, c.RepoCluster(r), want)
		}
	}

	// Clusters returns copies: changing one leaves the configuration alone.
	c.Clusters()[1].Namespaces[0] = "changed"
	c.Clusters()[0].Namespaces[0] = "changed"
	if c.Nomads[1].Namespaces[0] != "*" || c.Namespaces[0] != "default" {
		t.Error("Clusters shares its slices with the configuration")
	}
}

// TestClusters_DefaultFromSingleClusterSettings: without nomad blocks the
// one cluster, named default, is made of the -nomad-* settings.
func TestClusters_DefaultFromSingleClusterSettings(t *testing.T) {
	c, err := Load(args("-nomad-addr", "https://nomad:4646", "-nomad-region", "eu", "-nomad-ui-url", "https://ui.example.com",
		"-namespaces", "a,b", "-repo", "https://git.example.com/jobs.git"), env(map[string]string{"NOMAD_TOKEN": "secret"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []NomadCluster{{Name: DefaultCluster, Address: "https://nomad:4646", Region: "eu", Namespaces: []string{"a", "b"},
		Token: "secret", UIURL: "https://ui.example.com"}}
	if got := c.Clusters(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Clusters() =\n%+v\nwant\n%+v", got, want)
	}
	if got := c.RepoCluster(c.Repositories[0]); got != DefaultCluster {
		t.Errorf("RepoCluster = %q, want %q", got, DefaultCluster)
	}

	// With a token file, and with the Task API.
	c, err = Load(args("-nomad-token-file", "/run/nomad-token"), env(map[string]string{"NOMAD_TOKEN": "secret"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Cluster(DefaultCluster); got.TokenFile != "/run/nomad-token" || got.Token != "" || got.Address != DefaultNomadAddr {
		t.Errorf("default cluster with a token file = %+v", got)
	}
	c, err = Load(args("-nomad-task-api"), env(map[string]string{"NOMAD_SECRETS_DIR": "/secrets", "NOMAD_TOKEN": "wi"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Cluster(DefaultCluster); !got.TaskAPI || got.Address != "unix:///secrets/api.sock" {
		t.Errorf("default cluster with the Task API = %+v", got)
	}
}

func TestRepoCluster_Defaults(t *testing.T) {
	r := Repository{Name: "r"}
	cases := []struct {
		name   string
		nomads []string
		repo   string
		want   string
	}{
		{"no blocks", nil, "", DefaultCluster},
		{"one block", []string{"eu"}, "", "eu"},
		{"several blocks", []string{"eu", DefaultCluster}, "", DefaultCluster},
		{"named", []string{"eu", "us"}, "us", "us"},
	}
	for _, tc := range cases {
		c := Default()
		for _, n := range tc.nomads {
			c.Nomads = append(c.Nomads, NomadCluster{Name: n, Address: "https://" + n + ":4646"})
		}
		r.Cluster = tc.repo
		if got := c.RepoCluster(r); got != tc.want {
			t.Errorf("%s: RepoCluster = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestLoad_ClusterErrors: each problem of nomad blocks and of the clusters
// of repositories is named with its block.
func TestLoad_ClusterErrors(t *testing.T) {
	const eu = "nomad \"eu\" {\n  address = \"https://eu:4646\"\n}\n"
	const us = "nomad \"us\" {\n  address = \"https://us:4646\"\n}\n"
	cases := []struct {
		name  string
		file  string
		extra []string
		env   map[string]string
		want  []string // nil: loads
	}{
		{"two clusters", eu + us + `repository "r" {
  url     = "https://git/r.git"
  cluster = "us"
}`, nil, nil, nil},
		{"one cluster is every repository's", eu, []string{"-repo", "https://git/r.git"}, nil, nil},
		{"several clusters, one named default", eu + `nomad "default" { address = "https://d:4646" }`,
			[]string{"-repo", "https://git/r.git"}, nil, nil},
		{"NOMAD_* variables are not used", eu, nil,
			map[string]string{"NOMAD_ADDR": "unix:///x", "NOMAD_TOKEN": "t", "NOMAD_REGION": "r"}, nil},
		{"task api off", eu, []string{"-nomad-task-api=false"}, nil, nil},
		{"bake zero without requires", `nomad "eu" {
  address = "https://eu:4646"
  bake    = "0s"
}`, nil, nil, nil},

		{"duplicate name in one file", eu + eu, nil, nil, []string{`Duplicate nomad "eu" block`}},
		{"bad name", `nomad "EU" { address = "https://eu:4646" }`, nil, nil,
			[]string{`nomad "EU": name: invalid name "EU"`}},
		{"name too long", `nomad "` + strings.Repeat("a", 64) + `" { address = "https://eu:4646" }`, nil, nil,
			[]string{"name: invalid name", "1 to 63"}},
		{"missing address", `nomad "eu" { region = "eu" }`, nil, nil, []string{`nomad "eu": address: required`}},
		{"bad address", `nomad "eu" { address = "nomad:4646" }`, nil, nil, []string{`nomad "eu": address: invalid address "nomad:4646"`}},
		{"unix address", `nomad "eu" { address = "unix:///run/api.sock" }`, nil, nil,
			[]string{`nomad "eu": address: invalid address "unix:///run/api.sock": must be an http:// or https:// URL`}},
		{"unknown requires", `nomad "eu" {
  address  = "https://eu:4646"
  requires = ["staging"]
}`, nil, nil, []string{`nomad "eu": requires: no nomad block is named "staging"`}},
		{"self require", `nomad "eu" {
  address  = "https://eu:4646"
  requires = ["eu"]
}`, nil, nil, []string{`nomad "eu": requires: a cluster cannot require itself`}},
		{"cycle of two", `nomad "a" {
  address  = "https://a:4646"
  requires = ["b"]
}
nomad "b" {
  address  = "https://b:4646"
  requires = ["a"]
}`, nil, nil, []string{"nomad: requires: the promotion order has a cycle: a -> b -> a"}},
		{"cycle of three", `nomad "a" {
  address  = "https://a:4646"
  requires = ["c"]
}
nomad "b" {
  address  = "https://b:4646"
  requires = ["a"]
}
nomad "c" {
  address  = "https://c:4646"
  requires = ["b"]
}
nomad "d" {
  address  = "https://d:4646"
  requires = ["a"]
}`, nil, nil, []string{"nomad: requires: the promotion order has a cycle: a -> c -> b -> a"}},
		{"bake without requires", `nomad "eu" {
  address = "https://eu:4646"
  bake    = "30m"
}`, nil, nil, []string{`nomad "eu": bake: needs requires`}},
		{"negative bake", us + `nomad "eu" {
  address  = "https://eu:4646"
  requires = ["us"]
  bake     = "-1m"
}`, nil, nil, []string{`Invalid value for "bake"`, "must not be negative"}},
		{"repository names an unknown cluster", eu + `repository "r" {
  url     = "https://git/r.git"
  cluster = "us"
}`, nil, nil, []string{`repository "r": cluster: no Nomad cluster is named "us" (the clusters are "eu")`}},
		{"repository names a cluster without blocks", `repository "r" {
  url     = "https://git/r.git"
  cluster = "eu"
}`, nil, nil, []string{`repository "r": cluster: no Nomad cluster is named "eu" (the clusters are "default")`}},
		{"several clusters and a repository without one", eu + us, []string{"-repo", "https://git/r.git"}, nil,
			[]string{`repository "repo": cluster: required with several nomad blocks and none named "default" (the clusters are "eu", "us")`}},
		{"block and -nomad-addr", eu, []string{"-nomad-addr", "https://other:4646"}, nil,
			[]string{`nomad-addr: cannot be combined with nomad blocks (nomad_addr, set by flag -nomad-addr, and the block nomad "eu")`}},
		{"block and nomad_addr in the file", "nomad_addr = \"https://other:4646\"\n" + eu, nil, nil,
			[]string{"nomad-addr: cannot be combined with nomad blocks (nomad_addr, set by ", `c.hcl:1, and the block nomad "eu")`}},
		{"block and NOPS_NOMAD_TOKEN", eu, nil, map[string]string{"NOPS_NOMAD_TOKEN": "t"},
			[]string{"nomad-token: cannot be combined with nomad blocks (nomad_token, set by env NOPS_NOMAD_TOKEN"}},
		{"block and the other single-cluster settings", eu, []string{"-nomad-token-file", "/t", "-nomad-region", "eu",
			"-nomad-task-api", "-nomad-ui-url", "https://ui"}, map[string]string{"NOMAD_SECRETS_DIR": "/secrets"},
			[]string{"nomad-token-file: cannot be combined", "nomad-region: cannot be combined",
				"nomad-task-api: cannot be combined", "nomad-ui-url: cannot be combined"}},
		{"cert without key", `nomad "eu" {
  address   = "https://eu:4646"
  cert_file = "/c.pem"
}`, nil, nil, []string{`nomad "eu": cert_file and key_file go together`}},
		{"key without cert", `nomad "eu" {
  address  = "https://eu:4646"
  key_file = "/k.pem"
}`, nil, nil, []string{`nomad "eu": cert_file and key_file go together`}},
		{"TLS files over http", `nomad "eu" {
  address         = "http://eu:4646"
  ca_file         = "/ca.pem"
  tls_server_name = "server.eu.nomad"
}`, nil, nil, []string{`nomad "eu": ca_file: is set but the address "http://eu:4646" is http://`,
			`nomad "eu": tls_server_name: is set but`}},
		{"bad ui_url", `nomad "eu" {
  address = "https://eu:4646"
  ui_url  = "ftp://ui"
}`, nil, nil, []string{`Invalid value for "ui_url"`}},
		{"empty namespaces", `nomad "eu" {
  address    = "https://eu:4646"
  namespaces = []
}`, nil, nil, []string{`Invalid value for "namespaces"`, "at least one namespace"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(args(append([]string{"-config", writeFile(t, "c.hcl", tc.file)}, tc.extra...)...), env(tc.env))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("want no error, got:\n%v", err)
				}
				return
			}
			mustContainAll(t, err, tc.want...)
		})
	}
}

// TestLoad_NomadBlocksMergeAcrossFiles: a later file's block of the same
// name adds to or overrides an earlier one, as repository blocks do.
func TestLoad_NomadBlocksMergeAcrossFiles(t *testing.T) {
	a := writeFile(t, "a.hcl", "nomad \"eu\" {\n  address = \"https://eu:4646\"\n  region = \"eu\"\n}\n")
	b := writeFile(t, "b.hcl", "nomad \"eu\" {\n  address = \"https://eu2:4646\"\n}\nnomad \"us\" {\n  address = \"https://us:4646\"\n}\n")
	c, err := Load(args("-config", a, "-config", b), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []NomadCluster{{Name: "eu", Address: "https://eu2:4646", Region: "eu"}, {Name: "us", Address: "https://us:4646"}}
	if !reflect.DeepEqual(c.Nomads, want) {
		t.Fatalf("Nomads = %+v, want %+v", c.Nomads, want)
	}
}

// TestValidate_Clusters: what Load cannot produce (the same name twice,
// a negative bake) is refused by Validate for a configuration built in
// code.
func TestValidate_Clusters(t *testing.T) {
	c := Default()
	c.DataDir, c.BootstrapExpect, c.DisableGossipEncryption, c.InsecureRPC = "/d", 1, true, true
	c.Nomads = []NomadCluster{
		{Name: "eu", Address: "https://eu:4646"},
		{Name: "eu", Address: "https://eu2:4646"},
		{Name: "us", Address: "https://us:4646", Requires: []string{"eu", "eu"}, Bake: -time.Minute},
		{Name: "", Address: "https://x:4646", Namespaces: []string{"*", "a"}},
	}
	mustContainAll(t, c.Validate(),
		`nomad "eu": name: defined more than once`,
		`nomad "us": bake: must not be negative, not -1m0s`,
		`nomad "us": requires: "eu" is listed more than once`,
		`nomad #4: name: invalid name ""`,
		`nomad #4: namespaces: "*" means every namespace`)
}

func TestClustersReloadable(t *testing.T) {
	base := func() *Config {
		c := Default()
		c.Nomads = []NomadCluster{
			{Name: "staging", Address: "https://staging:4646"},
			{Name: "eu", Address: "https://eu:4646", Region: "eu", TokenFile: "/t", CAFile: "/ca", CertFile: "/c", KeyFile: "/k",
				TLSServerName: "server.eu.nomad", UIURL: "https://ui", Requires: []string{"staging"}, Bake: time.Hour},
		}
		return c
	}
	cases := []struct {
		name   string
		change func(c *Config)
		want   []string // nil: reloadable
	}{
		{"nothing", func(*Config) {}, nil},
		{"ui url, requires, bake", func(c *Config) {
			n := &c.Nomads[1]
			n.UIURL, n.Requires, n.Bake = "https://ui2", nil, 0
		}, nil},
		// The token file's content is read again when it changes; another
		// file needs a new client.
		{"token file", func(c *Config) { c.Nomads[1].TokenFile = "/t2" },
			[]string{`nomad "eu": token_file changed: only a restart applies that`}},
		{"order of the blocks", func(c *Config) { c.Nomads[0], c.Nomads[1] = c.Nomads[1], c.Nomads[0] }, nil},
		{"a repository's cluster", func(c *Config) {
			c.Repositories = []Repository{{Name: "r", Cluster: "eu"}}
		}, nil},
		{"top-level namespaces a block inherits", func(c *Config) { c.Namespaces = []string{"web"} },
			[]string{`nomad "staging": namespaces changed: only a restart applies that`}},
		{"address and region", func(c *Config) { c.Nomads[1].Address, c.Nomads[1].Region = "https://eu2:4646", "eu2" },
			[]string{`nomad "eu": address, region changed`}},
		{"tls", func(c *Config) {
			n := &c.Nomads[1]
			n.CAFile, n.CertFile, n.KeyFile, n.TLSServerName = "/ca2", "/c2", "/k2", "x"
		}, []string{`nomad "eu": ca_file, cert_file, key_file, tls_server_name changed`}},
		{"cluster added and removed", func(c *Config) { c.Nomads[0].Name = "test" },
			[]string{`nomad: the set of Nomad clusters changed (added "test"; removed "staging")`}},
	}
	for _, tc := range cases {
		old, next := base(), base()
		tc.change(next)
		err := ClustersReloadable(old, next)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: reloadable, want an error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error does not contain %q:\n%v", tc.name, w, err)
			}
		}
	}

	// The default cluster: its task API, static token, token file and
	// address need a restart, its UI does not; blocks in place of it are a
	// new set of clusters.
	single := Default()
	next := Default()
	next.NomadUIURL = "https://ui"
	if err := ClustersReloadable(single, next); err != nil {
		t.Errorf("ui url of the default cluster: %v", err)
	}
	next = Default()
	next.NomadTaskAPI, next.NomadToken, next.NomadAddr = true, "secret", "unix:///s"
	err := ClustersReloadable(single, next)
	mustContainAll(t, err, `nomad "default": address, token, task_api changed`)
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("the error shows the token: %v", err)
	}
	mustContainAll(t, ClustersReloadable(single, base()),
		`the set of Nomad clusters changed (added "staging", "eu"; removed "default")`)
}

// TestChanged_NamesNomadBlocks: a change of the nomad blocks is named
// "nomad", which a reload that has no row for it reports as restart-only.
func TestChanged_NamesNomadBlocks(t *testing.T) {
	a, b := Default(), Default()
	b.Nomads = []NomadCluster{{Name: "eu", Address: "https://eu:4646"}}
	if got := a.Changed(b); !reflect.DeepEqual(got, []string{"nomad"}) {
		t.Fatalf("Changed = %v, want [nomad]", got)
	}
}
