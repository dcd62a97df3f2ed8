package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// env returns a lookup function over m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// writeFile writes a config file named name into a fresh directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// args returns the arguments that make a non-dev configuration valid,
// followed by extra.
func args(extra ...string) []string {
	return append([]string{"-data-dir", "/tmp/nops", "-bootstrap-expect", "1", "-disable-gossip-encryption", "-insecure-rpc"}, extra...)
}

// mustContainAll fails unless err's message contains every part.
func mustContainAll(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got none", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error does not contain %q:\n%v", p, err)
		}
	}
}

func TestDefault_MatchesDocumentedDefaults(t *testing.T) {
	c := Default()
	host, _ := os.Hostname()
	want := &Config{
		Bind:                  "0.0.0.0",
		Advertise:             c.Advertise,
		HTTPPort:              4650,
		RPCPort:               4651,
		SerfPort:              4652,
		NodeName:              host,
		Region:                "global",
		NomadAddr:             "http://127.0.0.1:4646",
		NomadEventStream:      true,
		Namespaces:            []string{"default"},
		DriftInterval:         time.Minute,
		EngineInterval:        5 * time.Second,
		NomadReplanRate:       20,
		FullReplanInterval:    24 * time.Hour,
		ApplyTimeout:          15 * time.Minute,
		HookTimeout:           10 * time.Minute,
		DefaultPolicy:         "auto",
		LogLevel:              "info",
		RaftSnapshotThreshold: 8192,
		RaftSnapshotInterval:  2 * time.Minute,
		RaftMultiplier:        1,
		ACL:                   ACLConfig{TokenTTL: time.Hour},
		NotifyRetention:       72 * time.Hour,
		Autopilot: AutopilotConfig{CleanupDeadServers: true, LastContactThreshold: 200 * time.Millisecond,
			MaxTrailingLogs: 250, ServerStabilizationTime: 10 * time.Second},
		Retention: RetentionConfig{SpecAfter: time.Hour, DeploymentsPerJob: 10, DeploymentAge: 90 * 24 * time.Hour,
			EventAge: 365 * 24 * time.Hour, Interval: 10 * time.Minute},
		HTTPReadTimeout:  30 * time.Second,
		HTTPWriteTimeout: 2 * time.Minute,
		HTTPIdleTimeout:  90 * time.Second,
		HTTPMaxConns:     1024,
		SnapshotMaxSize:  1 << 30,
		GCMinHeap:        128 << 20,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Default() =\n%+v\nwant\n%+v", c, want)
	}
	if ip := net.ParseIP(c.Advertise); ip == nil || ip.To4() == nil || !(ip.IsPrivate() || ip.IsLoopback()) {
		t.Errorf("default advertise %q is not a private or loopback IPv4", c.Advertise)
	}

	// Load with nothing but the two required settings gives the defaults.
	got, err := Load(args(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want.DataDir, want.BootstrapExpect, want.DisableGossipEncryption, want.InsecureRPC = "/tmp/nops", 1, true, true
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load(args()) =\n%+v\nwant\n%+v", got, want)
	}
}

func TestFirstPrivateIPv4(t *testing.T) {
	ipnet := func(s string) net.Addr { return &net.IPNet{IP: net.ParseIP(s), Mask: net.CIDRMask(24, 32)} }
	cases := []struct {
		name  string
		addrs []net.Addr
		want  string
	}{
		{"none", nil, "127.0.0.1"},
		{"loopback and public only", []net.Addr{ipnet("127.0.0.1"), ipnet("8.8.8.8")}, "127.0.0.1"},
		{"first private wins", []net.Addr{ipnet("127.0.0.1"), ipnet("fd00::1"), ipnet("192.168.1.4"), ipnet("10.0.0.2")}, "192.168.1.4"},
		{"ip addr", []net.Addr{&net.IPAddr{IP: net.ParseIP("172.16.3.3")}}, "172.16.3.3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstPrivateIPv4(tc.addrs); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestLoad_Precedence sets one key in up to four layers and checks that the
// highest layer present wins: flag > env > second file > first file >
// default.
func TestLoad_Precedence(t *testing.T) {
	keys := []struct {
		flag string
		// values for file1, file2, env, flag, as text
		values [4]string
		// hcl renders a value in a config file
		hcl func(string) string
		get func(*Config) any
		// want converts a text value to what get returns
		want func(string) any
	}{
		{
			flag:   "http-port",
			values: [4]string{"1001", "1002", "1003", "1004"},
			hcl:    func(s string) string { return s },
			get:    func(c *Config) any { return c.HTTPPort },
			want:   func(s string) any { var n int; fmt.Sscan(s, &n); return n },
		},
		{
			flag:   "drift-interval",
			values: [4]string{"11s", "12s", "13s", "14s"},
			hcl:    func(s string) string { return fmt.Sprintf("%q", s) },
			get:    func(c *Config) any { return c.DriftInterval },
			want:   func(s string) any { d, _ := time.ParseDuration(s); return d },
		},
		{
			flag:   "default-policy",
			values: [4]string{"approval", "none", "approval", "none"},
			hcl:    func(s string) string { return fmt.Sprintf("%q", s) },
			get:    func(c *Config) any { return c.DefaultPolicy },
			want:   func(s string) any { return s },
		},
		{
			flag:   "namespaces",
			values: [4]string{"a", "b,c", "d", "e,f"},
			hcl: func(s string) string {
				var items []string
				for _, item := range strings.Split(s, ",") {
					items = append(items, fmt.Sprintf("%q", item))
				}
				return "[" + strings.Join(items, ", ") + "]"
			},
			get:  func(c *Config) any { return c.Namespaces },
			want: func(s string) any { return strings.Split(s, ",") },
		},
		{
			flag:   "nomad-addr",
			values: [4]string{"http://f1:4646", "http://f2:4646", "http://env:4646", "http://flag:4646"},
			hcl:    func(s string) string { return fmt.Sprintf("%q", s) },
			get:    func(c *Config) any { return c.NomadAddr },
			want:   func(s string) any { return s },
		},
		{
			flag:   "log-json",
			values: [4]string{"true", "false", "true", "false"},
			hcl:    func(s string) string { return s },
			get:    func(c *Config) any { return c.LogJSON },
			want:   func(s string) any { return s == "true" },
		},
	}
	layers := []string{"default", "file1", "file2", "env", "flag"}
	defaults := Default()

	for _, k := range keys {
		for n := 0; n < len(layers); n++ {
			t.Run(k.flag+"/up to "+layers[n], func(t *testing.T) {
				attr := hclName(k.flag)
				a := args()
				lookup := map[string]string{}
				if n >= 1 {
					a = append(a, "-config", writeFile(t, "1.hcl", attr+" = "+k.hcl(k.values[0])+"\n"))
				}
				if n >= 2 {
					a = append(a, "-config", writeFile(t, "2.hcl", attr+" = "+k.hcl(k.values[1])+"\n"))
				}
				if n >= 3 {
					lookup[envName(k.flag)] = k.values[2]
				}
				if n >= 4 {
					a = append(a, "-"+k.flag+"="+k.values[3])
				}
				c, err := Load(a, env(lookup))
				if err != nil {
					t.Fatal(err)
				}
				want := k.get(defaults)
				if n > 0 {
					want = k.want(k.values[n-1])
				}
				if got := k.get(c); !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %v, want %v (from %s)", k.flag, got, want, layers[n])
				}
			})
		}
	}
}

// TestLoad_EnvDefaults checks that NOMAD_* and CONSUL_HTTP_* replace the
// built-in defaults but not a config file.
func TestLoad_EnvDefaults(t *testing.T) {
	lookup := env(map[string]string{
		"NOMAD_ADDR": "https://nomad.example.com:4646", "NOMAD_TOKEN": "s3cr3t", "NOMAD_REGION": "eu",
		"CONSUL_HTTP_ADDR": "consul.example.com:8500", "CONSUL_HTTP_TOKEN": "ctoken",
	})
	file := writeFile(t, "c.hcl", "nomad_region = \"us\"\nconsul {}\n")
	c, err := Load(args("-config", file), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if c.NomadAddr != "https://nomad.example.com:4646" || c.NomadToken != "s3cr3t" || c.NomadRegion != "us" {
		t.Errorf("nomad = %q %q %q", c.NomadAddr, c.NomadToken, c.NomadRegion)
	}
	want := &ConsulConfig{Address: "consul.example.com:8500", Token: "ctoken", ServiceName: "nops", AutoJoin: true}
	if !reflect.DeepEqual(c.Consul, want) {
		t.Errorf("consul = %+v, want %+v", c.Consul, want)
	}

	c, err = Load(args("-nomad-addr", "http://flag:4646"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if c.NomadAddr != "http://flag:4646" {
		t.Errorf("flag lost to NOMAD_ADDR: %q", c.NomadAddr)
	}
	if c.Consul != nil {
		t.Errorf("consul set without a consul block: %+v", c.Consul)
	}
}

func TestLoad_Files(t *testing.T) {
	lookup := env(map[string]string{"GIT_TOKEN": "t", "SLACK_URL": "https://hooks.slack.com/x", "NOPS_WEBHOOK_SECRET": "w"})
	c, err := Load([]string{"-config", "testdata/full.hcl", "-config", "testdata/override.hcl"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"data dir", c.DataDir, "/var/lib/nops"},
		{"bind", c.Bind, "10.0.0.5"},
		{"advertise follows a specific bind", c.Advertise, "10.0.0.5"},
		{"http port from the later file", c.HTTPPort, 9650},
		{"bootstrap expect", c.BootstrapExpect, 3},
		{"retry join gets the serf port", c.RetryJoin, []string{"10.0.0.6:4652", "10.0.0.7:9652"}},
		{"namespaces", c.Namespaces, []string{"default", "web"}},
		{"drift interval", c.DriftInterval, 2 * time.Minute},
		{"policy", c.DefaultPolicy, "approval"},
		{"log level lower-cased", c.LogLevel, "debug"},
		{"redact keys lower-cased", c.RedactKeys, []string{"vault", "dsn"}},
		{"repositories merged by name", c.Repositories, []Repository{
			{Name: "platform", URL: "https://git.example.com/platform.git", Branch: "main", Path: "jobs", PollInterval: time.Minute,
				WebURL: "https://git.example.com/platform", Auth: &RepoAuth{Username: "nops", TokenEnv: "GIT_TOKEN"}},
			{Name: "apps", URL: "git@git.example.com:apps.git", Branch: "main", Path: ".", PollInterval: 30 * time.Second,
				Auth: &RepoAuth{SSHKeyFile: "/etc/nops/id_ed25519", SSHKnownHostsFile: "/etc/nops/known_hosts"}},
			{Name: "extra", URL: "https://git.example.com/extra.git", Branch: "main", Path: ".", PollInterval: 30 * time.Second},
		}},
		{"consul merged", c.Consul, &ConsulConfig{Address: "127.0.0.1:8500", ServiceName: "nops-prod", AutoJoin: false}},
		{"acl", c.ACL, ACLConfig{Enabled: true, TokenTTL: 8 * time.Hour}},
		{"region", c.Region, "eu-west"},
		{"encrypt", c.Encrypt, "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s="},
		{"tls", c.TLS, TLSConfig{HTTP: true, RPC: true, CAFile: "/etc/nops/ca.pem", CertFile: "/etc/nops/server.pem",
			KeyFile: "/etc/nops/server-key.pem", VerifyIncoming: true, VerifyServerHostname: true}},
		{"notify merged by name", c.Notify, []NotifyConfig{
			{Name: "slack", Kind: "slack", URLEnv: "SLACK_URL", Events: []string{"completed"}},
			{Name: "audit", Kind: "webhook", URL: "https://audit.example.com/nops"},
		}},
		{"webhook", c.Webhook, WebhookConfig{SecretEnv: "NOPS_WEBHOOK_SECRET"}},
	}
	for _, ck := range checks {
		if !reflect.DeepEqual(ck.got, ck.want) {
			t.Errorf("%s = %+v, want %+v", ck.name, ck.got, ck.want)
		}
	}
	// "dsn" is a default already: it is listed once.
	wantFragments := append(DefaultRedactKeys(), "vault")
	if got := c.SecretKeyFragments(); !reflect.DeepEqual(got, wantFragments) {
		t.Errorf("SecretKeyFragments() = %v, want %v", got, wantFragments)
	}
}

func TestLoad_JSONAndDirectory(t *testing.T) {
	c, err := Load([]string{"-config", "testdata/full.json"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.EngineInterval != 10*time.Second || len(c.Repositories) != 1 || c.Repositories[0].Path != "nomad" {
		t.Errorf("json config: engine %v, repositories %+v", c.EngineInterval, c.Repositories)
	}

	dir := t.TempDir()
	for name, content := range map[string]string{
		"10-base.hcl":  "data_dir = \"/d\"\nbootstrap_expect = 3\nhttp_port = 1\ndisable_gossip_encryption = true\ninsecure_rpc = true\n",
		"20-port.hcl":  "http_port = 2\n",
		"README.md":    "not a config file",
		"30-more.json": `{"rpc_port": 3}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err = Load([]string{"-config", dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPPort != 2 || c.RPCPort != 3 || c.DataDir != "/d" {
		t.Errorf("directory: http %d rpc %d data dir %q", c.HTTPPort, c.RPCPort, c.DataDir)
	}

	// NOPS_CONFIG is used when no -config flag is given.
	c, err = Load(nil, env(map[string]string{"NOPS_CONFIG": dir}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPPort != 2 {
		t.Errorf("NOPS_CONFIG not loaded: http port %d", c.HTTPPort)
	}
}

func TestLoad_UnknownKeys(t *testing.T) {
	cases := []struct {
		name    string
		content string
		want    []string // besides the file name
	}{
		{"top-level attribute", "data_dir = \"/d\"\nbootstrap_expect = 1\nhttp_prot = 1\n",
			[]string{":3,", `"http_prot"`, `Did you mean "http_port"?`}},
		{"flag-only setting", "data_dir = \"/d\"\nbootstrap_expect = 1\nrepo = \"https://x\"\n",
			[]string{":3,", `"repo"`}},
		{"block", "data_dir = \"/d\"\nbootstrap_expect = 1\n\nvault {\n}\n",
			[]string{":4,", `"vault"`}},
		{"attribute in a block", "data_dir = \"/d\"\nbootstrap_expect = 1\nconsul {\n  adress = \"x\"\n}\n",
			[]string{":4,", `"adress"`}},
		{"attribute in a nested block", "data_dir = \"/d\"\nbootstrap_expect = 1\nrepository \"r\" {\n  url = \"https://x\"\n  auth {\n    tokn = \"t\"\n  }\n}\n",
			[]string{":6,", `"tokn"`}},
		{"missing block label", "data_dir = \"/d\"\nbootstrap_expect = 1\nrepository {\n  url = \"https://x\"\n}\n",
			[]string{":3,", "repository"}},
		{"duplicate block in one file", "data_dir = \"/d\"\nbootstrap_expect = 1\nacl {}\nacl {}\n",
			[]string{":4,", "Duplicate acl block", ":3,"}},
		{"syntax error", "data_dir = \n", []string{":1,"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "nops.hcl", tc.content)
			_, err := Load([]string{"-config", p}, nil)
			mustContainAll(t, err, append([]string{p + ":"}, tc.want...)...)
		})
	}
}

func TestLoad_FlagErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown flag", args("-data_dir", "/x"), []string{"flag provided but not defined: -data_dir"}},
		{"positional argument", args("extra"), []string{`unexpected argument "extra"`}},
		{"missing value", args("-http-port"), []string{"flag needs an argument: -http-port"}},
		{"missing config file", args("-config", "/nonexistent/nops.hcl"), []string{"/nonexistent/nops.hcl", "no such file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, nil)
			mustContainAll(t, err, tc.want...)
		})
	}

	if _, err := Load([]string{"-h"}, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: got %v, want flag.ErrHelp", err)
	}
}

// TestLoad_BadValues gives each bad value in each layer and checks that the
// error names the key and where it came from.
func TestLoad_BadValues(t *testing.T) {
	values := []struct {
		flag, text, hcl, reason string
		// hclReason replaces reason for files, where the type is checked
		// before the value.
		hclReason string
	}{
		{"drift-interval", "5 minutes", `"5 minutes"`, `invalid duration "5 minutes"`, ""},
		{"apply-timeout", "-1m", `"-1m"`, "must be greater than zero", ""},
		{"http-port", "70000", "70000", "invalid port 70000", ""},
		{"nomad-replan-rate", "0", "0", "must be from 1 to 10000 requests a second", ""},
		{"full-replan-interval", "-1h", `"-1h"`, "must not be negative (0 turns it off)", ""},
		{"serf-port", "http", `"http"`, "not a whole number", "number required"},
		{"default-policy", "manual", `"manual"`, `invalid policy "manual"`, ""},
		{"log-level", "verbose", `"verbose"`, `invalid log level "verbose"`, ""},
		{"dev", "maybe", `"maybe"`, "true or false", "bool required"},
		{"namespaces", "*,default", `["*", "default"]`, "cannot be combined", ""},
		{"bind", "localhost", `"localhost"`, "must be an IP address", ""},
		{"retry-join", "a:b:c", `["a:b:c"]`, `invalid address "a:b:c"`, ""},
		{"raft-snapshot-threshold", "-5", "-5", "not a whole number", ""},
		{"nomad-ui-url", "https://nomad.example.com/?x=1", `"https://nomad.example.com/?x=1"`, "no user, query or fragment", ""},
		{"gc-min-heap", "137438953472", "137438953472", "must be at most 68719476736 (64 GiB), or 0 to leave GOGC alone", ""},
		{"gc-min-heap", "128MiB", `"128MiB"`, "not a whole number", "number required"},
	}
	for _, v := range values {
		t.Run(v.flag+"/flag", func(t *testing.T) {
			_, err := Load(args("-"+v.flag+"="+v.text), nil)
			mustContainAll(t, err, "flag -"+v.flag+":", v.reason)
		})
		t.Run(v.flag+"/env", func(t *testing.T) {
			name := envName(v.flag)
			_, err := Load(args(), env(map[string]string{name: v.text}))
			mustContainAll(t, err, "env "+name+":", v.reason)
		})
		t.Run(v.flag+"/file", func(t *testing.T) {
			p := writeFile(t, "bad.hcl", "# comment\n"+hclName(v.flag)+" = "+v.hcl+"\n")
			_, err := Load(args("-config", p), nil)
			reason := v.reason
			if v.hclReason != "" {
				reason = v.hclReason
			}
			mustContainAll(t, err, p+":2,", fmt.Sprintf("Invalid value for %q", hclName(v.flag)), reason)
		})
	}

	// A value of the wrong type in a file names the type wanted.
	p := writeFile(t, "bad.hcl", "http_port = [1]\nlog_json = \"yes\"\nretry_join = \"a\"\n")
	_, err := Load(args("-config", p), nil)
	mustContainAll(t, err, p+":1,", "number required", p+":2,", "bool required", p+":3,", "list of string required")
}

// TestLoad_BadValueReportedOnce checks that a value rejected by a layer is
// not reported a second time by Validate.
func TestLoad_BadValueReportedOnce(t *testing.T) {
	_, err := Load([]string{"-data-dir", "/d", "-bootstrap-expect", "three"}, nil)
	mustContainAll(t, err, "flag -bootstrap-expect:")
	if strings.Count(err.Error(), "bootstrap-expect") != 1 {
		t.Errorf("bootstrap-expect reported more than once:\n%v", err)
	}
}

func TestLoad_SeveralProblems(t *testing.T) {
	p := writeFile(t, "nops.hcl", "drift_interval = \"soon\"\nunknown_key = 1\n")
	_, err := Load([]string{"-config", p, "-http-port", "-1", "-default-policy", "always"},
		env(map[string]string{"NOPS_ENGINE_INTERVAL": "fast"}))
	mustContainAll(t, err,
		p+":1,", `"drift_interval"`,
		p+":2,", `"unknown_key"`,
		"env NOPS_ENGINE_INTERVAL:",
		"flag -http-port:",
		"flag -default-policy:",
		"data-dir: required unless -dev",
		"bootstrap-expect: required unless -dev",
		"encrypt: a gossip encryption key is required unless -dev",
		"tls: mutual TLS on the RPC port is required unless -dev",
	)
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 9 {
		t.Errorf("got %d problems, want 9:\n%v", n, err)
	}
}

func TestParseRepoSpec(t *testing.T) {
	cases := []struct {
		spec              string
		url, branch, path string
		err               string
	}{
		{spec: "https://git.example.com/jobs.git", url: "https://git.example.com/jobs.git", branch: "main", path: "."},
		{spec: "https://git.example.com/jobs.git#prod", url: "https://git.example.com/jobs.git", branch: "prod", path: "."},
		{spec: "https://git.example.com/jobs.git#prod:nomad/jobs", url: "https://git.example.com/jobs.git", branch: "prod", path: "nomad/jobs"},
		{spec: "git@git.example.com:org/jobs.git#:jobs", url: "git@git.example.com:org/jobs.git", branch: "main", path: "jobs"},
		{spec: "/srv/git/jobs#release/1.0:a:b", url: "/srv/git/jobs", branch: "release/1.0", path: "a:b"},
		{spec: "#main:jobs", err: "missing URL"},
		{spec: "", err: "missing URL"},
		{spec: "https://x#main:", err: "empty path"},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			r, err := ParseRepoSpec("r", tc.spec)
			if tc.err != "" {
				mustContainAll(t, err, tc.err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Repository{Name: "r", URL: tc.url, Branch: tc.branch, Path: tc.path, PollInterval: 30 * time.Second}
			if !reflect.DeepEqual(r, want) {
				t.Errorf("got %+v, want %+v", r, want)
			}
		})
	}
}

func TestLoad_RepoFlag(t *testing.T) {
	block := writeFile(t, "r.hcl", "repository \"platform\" {\n  url = \"https://git.example.com/platform.git\"\n}\n")
	c, err := Load(args("-config", block, "-repo", "https://a.example.com/a.git#dev:jobs", "-repo", "/srv/git/b"),
		env(map[string]string{"NOPS_REPO": "https://ignored.example.com/x.git"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.Repositories {
		got = append(got, r.Name+"="+r.URL+"#"+r.Branch+":"+r.Path)
	}
	want := []string{
		"platform=https://git.example.com/platform.git#main:.",
		"repo=https://a.example.com/a.git#dev:jobs",
		"repo-2=/srv/git/b#main:.",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("repositories = %q, want %q", got, want)
	}

	c, err = Load(args(), env(map[string]string{"NOPS_REPO": "https://a.example.com/a.git, https://b.example.com/b.git#v2"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Repositories) != 2 || c.Repositories[1].Name != "repo-2" || c.Repositories[1].Branch != "v2" {
		t.Errorf("NOPS_REPO: %+v", c.Repositories)
	}

	_, err = Load(args("-repo", "#main"), nil)
	mustContainAll(t, err, "flag -repo:", "missing URL")

	_, err = Load(args("-repo", "https://x.example.com/x.git#bad branch:../up"), nil)
	mustContainAll(t, err, `repository "repo": branch:`, `repository "repo": path:`)
}

func TestLoad_Dev(t *testing.T) {
	c, err := Load([]string{"-dev"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if c.Bind != "127.0.0.1" || c.Advertise != "127.0.0.1" || c.BootstrapExpect != 1 || c.DataDir != "" || c.NodeName != host {
		t.Errorf("dev: bind %q advertise %q bootstrap %d data dir %q node %q", c.Bind, c.Advertise, c.BootstrapExpect, c.DataDir, c.NodeName)
	}

	c, err = Load([]string{"-dev", "-bind", "127.0.0.1", "-data-dir", "/keep", "-http-port", "0"}, env(map[string]string{"NOPS_BOOTSTRAP_EXPECT": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/keep" || c.HTTPPort != 0 {
		t.Errorf("dev with settings: %+v", c)
	}

	cases := []struct {
		name   string
		args   []string
		lookup map[string]string
		want   []string
	}{
		{"bind elsewhere", []string{"-dev", "-bind", "0.0.0.0"}, nil, []string{"bind: a -dev server uses 127.0.0.1", "flag -bind"}},
		{"advertise elsewhere", []string{"-dev"}, map[string]string{"NOPS_ADVERTISE": "10.1.1.1"}, []string{"advertise:", "env NOPS_ADVERTISE"}},
		{"more servers", []string{"-dev", "-bootstrap-expect", "3"}, nil, []string{"bootstrap-expect: a -dev server runs alone"}},
		{"retry join", []string{"-dev", "-retry-join", "10.0.0.2"}, nil, []string{"retry-join: a -dev server runs alone"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, env(tc.lookup))
			mustContainAll(t, err, tc.want...)
		})
	}
}

func TestLoad_RetryJoin(t *testing.T) {
	c, err := Load(args("-serf-port", "5000", "-retry-join", "10.0.0.2", "-retry-join", "n3.example.com:6000,[fd00::3]", "-retry-join", "fd00::4"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.2:5000", "n3.example.com:6000", "[fd00::3]:5000", "[fd00::4]:5000"}
	if !reflect.DeepEqual(c.RetryJoin, want) {
		t.Errorf("retry join = %q, want %q", c.RetryJoin, want)
	}
}

// TestLoad_WebURL: a repository's web_url that is no http(s) URL, or
// carries credentials, fails the start with an error naming it and not
// quoting it.
func TestLoad_WebURL(t *testing.T) {
	for value, want := range map[string]string{
		"git.example.com/ops/jobs":                "must be an http:// or https:// URL",
		"https://ops:hunter2@git.example.com/ops": "must not carry credentials",
	} {
		p := writeFile(t, "w.hcl", "data_dir = \"/d\"\nbootstrap_expect = 1\nrepository \"r\" {\n  url = \"https://x.example.com/r.git\"\n  web_url = \""+value+"\"\n}\n")
		_, err := Load(args("-config", p), nil)
		mustContainAll(t, err, "web_url", want)
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error quotes the credentials: %v", err)
		}
	}
}

func TestLoad_SecretEnv(t *testing.T) {
	p := writeFile(t, "s.hcl", `
repository "r" {
  url = "https://x.example.com/r.git"
  auth {
    token_env = "GIT_TOKEN"
  }
}
notify "n" {
  kind    = "webhook"
  url_env = "HOOK_URL"
}
webhook {
  secret_env = "HOOK_SECRET"
}
`)
	_, err := Load(args("-config", p), env(map[string]string{"HOOK_URL": "https://h.example.com"}))
	mustContainAll(t, err, `repository "r": auth: token_env: environment variable GIT_TOKEN is not set`,
		"webhook: secret_env: environment variable HOOK_SECRET is not set")
	if strings.Contains(err.Error(), "HOOK_URL") {
		t.Errorf("HOOK_URL is set but reported: %v", err)
	}
}

func TestResolve_ReadsSecretsFromEnvironment(t *testing.T) {
	lookup := env(map[string]string{"PW": "hunter2", "TOK": "abc", "URL": "https://hooks.example.com/1", "SECRET": "s"})

	a := &RepoAuth{Username: "u", PasswordEnv: "PW", SSHKeyPassphrase: "direct"}
	got, err := a.Resolve(lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got.Password != "hunter2" || got.SSHKeyPassphrase != "direct" || a.Password != "" {
		t.Errorf("resolved %+v (original %+v)", got, a)
	}
	if _, err := (&RepoAuth{TokenEnv: "MISSING"}).Resolve(lookup); err == nil || !strings.Contains(err.Error(), "token_env: environment variable MISSING is not set") {
		t.Errorf("missing token env: %v", err)
	}
	if got, err := (*RepoAuth)(nil).Resolve(lookup); got != nil || err != nil {
		t.Errorf("nil auth resolved to %v, %v", got, err)
	}

	if u, err := (NotifyConfig{Name: "n", URLEnv: "URL"}).ResolveURL(lookup); err != nil || u != "https://hooks.example.com/1" {
		t.Errorf("ResolveURL = %q, %v", u, err)
	}
	if u, err := (NotifyConfig{Name: "n", URL: "https://direct.example.com"}).ResolveURL(lookup); err != nil || u != "https://direct.example.com" {
		t.Errorf("ResolveURL direct = %q, %v", u, err)
	}
	if s, err := (WebhookConfig{SecretEnv: "SECRET"}).ResolveSecret(lookup); err != nil || s != "s" {
		t.Errorf("ResolveSecret = %q, %v", s, err)
	}
	if s, err := (WebhookConfig{}).ResolveSecret(lookup); err != nil || s != "" {
		t.Errorf("ResolveSecret without secret_env = %q, %v", s, err)
	}
	if _, err := (WebhookConfig{SecretEnv: "NOPE"}).ResolveSecret(lookup); err == nil {
		t.Error("ResolveSecret with an unset variable: no error")
	}
}

func TestValidate_NamesEachInvalidSetting(t *testing.T) {
	valid := func() *Config {
		c := Default()
		c.DataDir, c.BootstrapExpect = "/d", 3
		c.Encrypt = "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s="
		c.InsecureRPC = true
		return c
	}
	rpcTLS := TLSConfig{RPC: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", VerifyServerHostname: true}
	repo := func(name, url string) Repository { r := newRepository(name); r.URL = url; return r }

	cases := []struct {
		name   string
		modify func(*Config)
		want   []string // empty: valid
	}{
		{"valid", func(*Config) {}, nil},
		{"missing data dir", func(c *Config) { c.DataDir = "" }, []string{"data-dir: required unless -dev"}},
		{"missing bootstrap expect", func(c *Config) { c.BootstrapExpect = 0 }, []string{"bootstrap-expect: required unless -dev"}},
		{"dev needs neither", func(c *Config) { c.DataDir, c.BootstrapExpect, c.Dev = "", 0, true }, nil},
		{"port out of range", func(c *Config) { c.RPCPort = 65536 }, []string{"rpc-port: invalid port 65536"}},
		{"ports zero are free ports", func(c *Config) { c.HTTPPort, c.RPCPort, c.SerfPort = 0, 0, 0 }, nil},
		{"same port twice", func(c *Config) { c.SerfPort = c.HTTPPort }, []string{"serf-port: port 4650 is already used by http-port"}},
		{"zero interval", func(c *Config) { c.EngineInterval = 0 }, []string{"engine-interval:", "greater than zero"}},
		{"bad policy", func(c *Config) { c.DefaultPolicy = "Auto" }, []string{`default-policy: invalid policy "Auto"`}},
		{"bad log level", func(c *Config) { c.LogLevel = "loud" }, []string{"log-level:"}},
		{"no namespaces", func(c *Config) { c.Namespaces = nil }, []string{"namespaces: at least one"}},
		{"zero token ttl", func(c *Config) { c.ACL.TokenTTL = 0 }, []string{"acl: token_ttl: must be a positive duration"}},
		{"unspecified advertise", func(c *Config) { c.Advertise = "0.0.0.0" }, []string{"advertise:", "unspecified"}},
		{"bad nomad addr", func(c *Config) { c.NomadAddr = "nomad:4646" }, []string{"nomad-addr:"}},
		{"empty node name", func(c *Config) { c.NodeName = "" }, []string{"node: must not be empty"}},
		{"repositories", func(c *Config) {
			c.Repositories = []Repository{repo("a", "https://x/a.git"), repo("a", "https://x/b.git"), repo("bad name", ""), repo("", "u")}
		}, []string{`repository "a": name: defined more than once`, `repository "bad name": name: invalid name`,
			`repository "bad name": url: required`, "repository #4: name: must not be empty"}},
		{"repository fields", func(c *Config) {
			r := repo("r", "https://x/r.git")
			r.Branch, r.Path, r.PollInterval, r.WebURL = "", "/abs", 0, "https://git.example.com/r?tab=1"
			r.Auth = &RepoAuth{Token: "t", TokenEnv: "T", Password: "p"}
			c.Repositories = []Repository{r}
		}, []string{`repository "r": branch: must not be empty`, `repository "r": path: invalid path "/abs"`,
			`repository "r": poll_interval:`, "set token or token_env, not both", "set a password or a token, not both",
			`repository "r": web_url: must not have a query or a fragment`}},
		{"known hosts twice, or without a key", func(c *Config) {
			a, b := repo("a", "git@x:a.git"), repo("b", "git@x:b.git")
			a.Auth = &RepoAuth{SSHKeyFile: "/k", SSHKnownHostsFile: "/h1", KnownHostsFile: "/h2"}
			b.Auth = &RepoAuth{KnownHostsFile: "/h"}
			c.Repositories = []Repository{a, b}
		}, []string{`repository "a": auth: set known_hosts_file or ssh_known_hosts_file, not both`,
			`repository "b": auth: known_hosts_file needs ssh_key_file`}},
		{"consul", func(c *Config) { c.Consul = &ConsulConfig{ServiceName: "no spaces"} }, []string{"consul: address must not be empty", "consul: service_name:"}},
		{"tls", func(c *Config) { c.TLS = TLSConfig{HTTP: true, CertFile: "c.pem", VerifyIncoming: true} },
			[]string{"tls: http and rpc need cert_file and key_file", "tls: verify_incoming needs ca_file"}},
		{"tls rpc", func(c *Config) {
			c.TLS = TLSConfig{RPC: true, CertFile: "c.pem", KeyFile: "k.pem", VerifyIncoming: true}
		},
			[]string{"tls: rpc needs ca_file", "tls: verify_incoming applies to the HTTP API"}},
		{"tls files without use", func(c *Config) { c.TLS = TLSConfig{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"} },
			[]string{"tls: ca_file, cert_file and key_file are set but neither http nor rpc is enabled"}},
		{"tls hostname without rpc", func(c *Config) {
			c.TLS = TLSConfig{HTTP: true, CertFile: "c.pem", KeyFile: "k.pem", VerifyServerHostname: true}
		}, []string{"tls: verify_server_hostname needs rpc = true"}},
		{"tls complete", func(c *Config) {
			c.InsecureRPC = false
			c.TLS = TLSConfig{HTTP: true, RPC: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", VerifyIncoming: true, VerifyServerHostname: true}
		}, nil},
		{"rpc tls required", func(c *Config) { c.InsecureRPC = false },
			[]string{"tls: mutual TLS on the RPC port is required unless -dev", "anyone who reaches a plain RPC port controls the cluster",
				"tls { rpc = true, ca_file, cert_file, key_file }", "nops tls ca create", "insecure_rpc = true (-insecure-rpc)"}},
		{"rpc tls instead of insecure rpc", func(c *Config) { c.InsecureRPC, c.TLS = false, rpcTLS }, nil},
		{"insecure rpc without rpc tls", func(c *Config) { c.InsecureRPC, c.TLS = true, TLSConfig{} }, nil},
		{"insecure rpc and rpc tls", func(c *Config) { c.TLS = rpcTLS }, []string{"insecure-rpc: cannot be combined with tls { rpc = true }"}},
		{"dev needs no rpc tls", func(c *Config) { c.InsecureRPC, c.Dev, c.BootstrapExpect = false, true, 0 }, nil},
		{"gossip key required", func(c *Config) { c.Encrypt = "" }, []string{"encrypt: a gossip encryption key is required unless -dev"}},
		{"gossip key disabled", func(c *Config) { c.Encrypt, c.DisableGossipEncryption = "", true }, nil},
		{"gossip key and disabled", func(c *Config) { c.DisableGossipEncryption = true }, []string{"disable-gossip-encryption: cannot be combined with encrypt"}},
		{"gossip key short", func(c *Config) { c.Encrypt = "c2hvcnQ=" }, []string{"encrypt: decodes to 5 bytes"}},
		{"dev needs no gossip key", func(c *Config) { c.Encrypt, c.Dev, c.BootstrapExpect = "", true, 0 }, nil},
		{"bad region", func(c *Config) { c.Region = "Eu West" }, []string{`region: invalid region "Eu West"`}},
		{"full re-plan below the drift interval", func(c *Config) { c.DriftInterval, c.FullReplanInterval = time.Hour, time.Minute },
			[]string{"full-replan-interval: must be 0 (off) or at least -drift-interval (1h0m0s), not 1m0s"}},
		{"full re-plan off", func(c *Config) { c.FullReplanInterval = 0 }, nil},
		{"full re-plan at the drift interval", func(c *Config) { c.DriftInterval, c.FullReplanInterval = time.Hour, time.Hour }, nil},
		{"notify", func(c *Config) {
			c.Notify = []NotifyConfig{
				{Name: "a", Kind: "pager", URL: "https://x"},
				{Name: "b", Kind: "slack"},
				{Name: "c", Kind: "webhook", URL: "ftp://secret@x", Events: []string{"deleted"}, Jobs: []string{""}},
				{Name: "d", Kind: "slack", SecretEnv: "T", SecretFile: "/nonexistent/file", RetryInitial: time.Minute, RetryMax: time.Second},
				{Name: "e", Kind: "webhook"},
				{Name: "f", Kind: "email", URL: "https://x", SMTPAddr: "mail", From: "nobody", Username: "u"},
				{Name: "g", Kind: "nomad", Channel: "#x", To: []string{"a@b.c"}},
			}
			c.UIURL = "nope"
		}, []string{`notify "a": kind: invalid value "pager"`, `notify "b": set url or url_env`,
			`notify "c": url: must be an http:// or https:// URL`, `notify "c": events: unknown event "deleted"`,
			`notify "c": bad glob: must not be empty`, `notify "d": channel: a bot token posts to a channel`,
			`notify "d": set at most one of secret_env and secret_file`, `notify "d": secret_file:`,
			`notify "d": retry_max: must be at least retry_initial`, `notify "e": set exactly one of url and url_env`,
			`ui-url: must be an http`, `notify "f": url: an email target`, `notify "f": smtp_addr: must be host:port`,
			`notify "f": from: "nobody" is not an email address`, `notify "f": to: at least one recipient`,
			`notify "f": username: set the password`, `notify "g": job: the parameterized job`,
			`notify "g": channel: only a slack target`, `notify "g": smtp_addr, from, to`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.modify(c)
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			mustContainAll(t, err, tc.want...)
			if strings.Contains(err.Error(), "secret@") {
				t.Errorf("error quotes a notification URL: %v", err)
			}
		})
	}
}

func TestValidate_DevForcesSingleLocalServer(t *testing.T) {
	c := Default()
	c.Dev, c.Bind, c.Advertise = true, "0.0.0.0", "10.0.0.1"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Bind != "127.0.0.1" || c.Advertise != "127.0.0.1" || c.BootstrapExpect != 1 {
		t.Errorf("dev: bind %q advertise %q bootstrap %d", c.Bind, c.Advertise, c.BootstrapExpect)
	}
}

func TestUsage_ListsEveryFlagAndEnvVar(t *testing.T) {
	u := Usage()
	for _, f := range Default().fields() {
		if !strings.Contains(u, "-"+f.name) || !strings.Contains(u, f.envName()) {
			t.Errorf("usage lacks -%s or %s", f.name, f.envName())
		}
	}
	for _, s := range []string{"-config=<path>", "-repo=<url#branch:path>", `repository "name"`, "-http-port=<port>", "Default: 4650."} {
		if !strings.Contains(u, s) {
			t.Errorf("usage lacks %q", s)
		}
	}
}

func TestChanged_NamesChangedSettingsNotSecrets(t *testing.T) {
	a, err := Load(args("-encrypt", "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s=", "-disable-gossip-encryption=false"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(args("-encrypt", "bA4zCJuKvHSnNdOXwWWDJnHfB6yGcfBCGxIMzoj0QYU=", "-disable-gossip-encryption=false", "-http-port", "9999"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.TLS.HTTP = true
	got := a.Changed(b)
	want := []string{"encrypt", "http-port", "tls"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Changed = %v, want %v", got, want)
	}
	if len(a.Changed(a)) != 0 {
		t.Fatal("a configuration differs from itself")
	}
	for _, name := range got {
		if strings.Contains(name, "pUqJ") {
			t.Fatal("Changed shows a secret")
		}
	}
}

// TestLoad_SyntaxErrorQuotesNoSource: a syntax error names the file, line
// and column and what is wrong, but not the file's text, which may be a
// secret typed without its quotes (found by FuzzConfigFile).
func TestLoad_SyntaxErrorQuotesNoSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nops.hcl")
	if err := os.WriteFile(path, []byte("repository \"r\" {\n  auth {ghp_SECRETVALUE\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{"-config", path}, func(string) (string, bool) { return "", false })
	if err == nil {
		t.Fatal("a file with a syntax error loaded")
	}
	if strings.Contains(err.Error(), "ghp_SECRETVALUE") {
		t.Fatalf("the error quotes the file's text: %v", err)
	}
	if !strings.Contains(err.Error(), path+":2,") {
		t.Fatalf("the error does not give the position: %v", err)
	}
}

// Outside -dev the RPC port needs mutual TLS; insecure_rpc, as a flag, an
// environment variable or a config file attribute, runs without it, and
// -dev needs neither.
func TestLoad_RPCTLSRequiredUnlessInsecure(t *testing.T) {
	base := []string{"-data-dir", "/tmp/nops", "-bootstrap-expect", "3", "-disable-gossip-encryption"}
	_, err := Load(base, env(nil))
	mustContainAll(t, err, "tls: mutual TLS on the RPC port is required unless -dev", "insecure_rpc = true (-insecure-rpc)")

	tlsFile := writeFile(t, "tls.hcl", "tls {\n  rpc = true\n  ca_file = \"ca.pem\"\n  cert_file = \"c.pem\"\n  key_file = \"k.pem\"\n}\n")
	cases := []struct {
		name         string
		args         []string
		lookup       map[string]string
		wantInsecure bool
	}{
		{"flag", append(base, "-insecure-rpc"), nil, true},
		{"environment", base, map[string]string{"NOPS_INSECURE_RPC": "true"}, true},
		{"config file", append(base, "-config", writeFile(t, "insecure.hcl", "insecure_rpc = true\n")), nil, true},
		{"rpc tls", append(base, "-config", tlsFile), nil, false},
		{"dev", []string{"-dev"}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.args, env(tc.lookup))
			if err != nil {
				t.Fatal(err)
			}
			if c.InsecureRPC != tc.wantInsecure {
				t.Errorf("InsecureRPC = %t, want %t", c.InsecureRPC, tc.wantInsecure)
			}
		})
	}

	_, err = Load(append(base, "-insecure-rpc", "-config", tlsFile), env(nil))
	mustContainAll(t, err, "insecure-rpc: cannot be combined with tls { rpc = true }")
}

// TestLoad_ValidateFlag: -validate is a command-line switch that
// `nops serve` reads from the configuration; a bad value is an error
// naming the flag, and no variable or file sets it.
func TestLoad_ValidateFlag(t *testing.T) {
	c, err := Load([]string{"-dev", "-validate"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ValidateOnly {
		t.Error("-validate: ValidateOnly is false")
	}
	lookup := func(k string) (string, bool) {
		if k == "NOPS_VALIDATE" {
			return "true", true
		}
		return "", false
	}
	for _, a := range [][]string{{"-dev"}, {"-dev", "-validate=false"}} {
		c, err := Load(a, lookup)
		if err != nil {
			t.Fatal(err)
		}
		if c.ValidateOnly {
			t.Errorf("%v with NOPS_VALIDATE=true: ValidateOnly is true", a)
		}
	}
	if _, err := Load([]string{"-dev", "-validate=maybe"}, nil); err == nil || !strings.Contains(err.Error(), "-validate") {
		t.Errorf("-validate=maybe: err = %v, want one naming -validate", err)
	}
}
