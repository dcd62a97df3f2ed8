// Package config builds the configuration of one Nops server (`nops serve`)
// from command-line flags, NOPS_* environment variables and HCL config files.
//
// Every setting has one name. The flag is -name, the environment variable is
// NOPS_NAME (upper case, dashes to underscores) and the config file attribute
// is name with underscores; repository, nomad, consul, acl, tls, notify and
// webhook are config file blocks only, among others (configBlocks). Precedence is per key: flag, then environment,
// then config files in the order given, then the default.
//
// Guarantee: Load either returns a configuration that passed Validate, or an
// error listing every problem it found, each naming its key (and its file and
// line for config files). Unknown flags, unknown attributes and blocks in
// files, and values of the wrong type or out of range are all errors; nothing
// is silently ignored. Loading never reads the process environment directly:
// callers pass a lookup function.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// maxTokenTTL bounds acl.token_ttl, the life of an SSO login's token: a
// longer one is a long-lived credential, which should be a created token.
const maxTokenTTL = 365 * 24 * time.Hour

// minSnapshotMaxSize is the least http snapshot_max_size: the state of an
// empty cluster, with room to grow; a smaller limit refuses every restore.
const minSnapshotMaxSize = 1 << 20

// maxRegionLen bounds a region name, which goes into DNS names and TLS
// certificate names: the longest DNS label.
const maxRegionLen = 63

// DefaultNomadReplanRate is the default, and MaxNomadReplanRate the
// largest value, of the Nomad requests a second of the periodic full
// re-plan.
const (
	DefaultNomadReplanRate = 20
	MaxNomadReplanRate     = 10000
)

// DefaultFullReplanInterval is how often, by default, detection plans a job
// that neither git nor Nomad changed, as a safety net (0 turns it off).
const DefaultFullReplanInterval = 24 * time.Hour

// Defaults of the settings that have one.
const (
	DefaultBind           = "0.0.0.0"
	DefaultHTTPPort       = 4650
	DefaultRPCPort        = 4651
	DefaultSerfPort       = 4652
	DefaultNomadAddr      = "http://127.0.0.1:4646"
	DefaultDriftInterval  = time.Minute
	DefaultEngineInterval = 5 * time.Second
	DefaultApplyTimeout   = structs.DefaultApplyTimeout
	DefaultHookTimeout    = meta.DefaultHookTimeout
	DefaultPolicy         = PolicyAuto
	DefaultLogLevel       = "info"
	// The Raft snapshot defaults are hashicorp/raft's own: a snapshot
	// every 8192 entries, checked every two minutes.
	DefaultRaftSnapshotThreshold = 8192
	DefaultRaftSnapshotInterval  = 2 * time.Minute
	DefaultRegion                = "global"

	// HTTP server limits (see agent/http/httpguard.go). Streams and long polls
	// have no write timeout; snapshot save and restore get
	// SnapshotTransferTimeout for both. A request is read within 30s and
	// answered within 2m (an apply that waits on Raft and Nomad); idle
	// keep-alives live 90s, as in Go's and most proxies' defaults; 1024
	// connections are far over what CLIs, dashboards and peers open.
	DefaultHTTPReadTimeout  = 30 * time.Second
	DefaultHTTPWriteTimeout = 2 * time.Minute
	DefaultHTTPIdleTimeout  = 90 * time.Second
	DefaultHTTPMaxConns     = 1024
	// DefaultSnapshotMaxSize bounds a snapshot archive, uploaded and
	// decompressed.
	DefaultSnapshotMaxSize = 1 << 30
	// DefaultGCMinHeap is the heap target the garbage collector of a
	// server process is kept above while it allocates heavily
	// (agent/gctune).
	DefaultGCMinHeap = 128 << 20

	DefaultRepoBranch       = "main"
	DefaultRepoPath         = "."
	DefaultRepoPollInterval = 30 * time.Second

	DefaultConsulAddress     = "127.0.0.1:8500"
	DefaultConsulServiceName = "nops"

	// DevAddress is the address a -dev server binds and advertises.
	DevAddress = "127.0.0.1"
)

// Timings of Raft operations that are not settings: the server and its
// API wait this long at most.
const (
	// RaftApplyTimeout bounds the wait for an entry (or a barrier) to be
	// taken and committed: long enough for a loaded cluster, short enough
	// that a client hears of a stuck one.
	RaftApplyTimeout = 10 * time.Second
	// LeadershipTransferTimeout bounds a wait for a leadership transfer,
	// which takes one election (about a second, times the Raft
	// multiplier).
	LeadershipTransferTimeout = 10 * time.Second
)

// Deployment policies of jobs (meta nops_policy and -default-policy).
const (
	PolicyAuto     = "auto"
	PolicyApproval = "approval"
	PolicyNone     = "none"
)

// Kinds of notification targets.
const (
	NotifyKindWebhook = "webhook"
	NotifyKindSlack   = "slack"
	NotifyKindEmail   = "email"
	NotifyKindNomad   = "nomad"
)

// Config is the configuration of one Nops server.
type Config struct {
	// DataDir holds the Raft log, snapshots and node ID. Required unless
	// Dev; a dev server with no data dir uses a temporary one that the
	// agent creates.
	DataDir string

	// Bind is the address the server listens on. Advertise is the address
	// other servers use to reach it: by default the bind address when that
	// is a specific address, else the first private IPv4 of the machine
	// (127.0.0.1 when it has none).
	Bind, Advertise string

	// Ports of the HTTP API and dashboard, of Raft and forwarding, and of
	// serf gossip. 0 picks a free port (for tests).
	HTTPPort, RPCPort, SerfPort int

	// BootstrapExpect is the number of servers that form a new cluster.
	BootstrapExpect int

	// RetryJoin lists host:port serf addresses of other servers. Load adds
	// the serf port to entries given without one.
	RetryJoin []string

	// Dev runs a single server bound to 127.0.0.1 that bootstraps itself.
	Dev bool

	// NodeName names this server in serf and Raft. Default: the hostname.
	// Two servers of one cluster must not share a name.
	NodeName string

	// Region names the cluster. Servers only make voters of members of
	// their own region, and with TLS a server's certificate must be valid
	// for server.<region>.nops.
	Region string

	// Encrypt is the base64 serf gossip key (16, 24 or 32 bytes). It is
	// required unless Dev or DisableGossipEncryption.
	Encrypt string

	// DisableGossipEncryption runs gossip in the clear outside -dev.
	DisableGossipEncryption bool

	// InsecureRPC serves the RPC port (Raft and forwarding) without mutual
	// TLS outside -dev. Without it a server needs tls { rpc = true }:
	// anyone who reaches a plain RPC port controls the cluster.
	InsecureRPC bool

	// The Nomad cluster. Defaults come from NOMAD_ADDR, NOMAD_TOKEN and
	// NOMAD_REGION.
	NomadAddr, NomadToken, NomadRegion string

	// NomadTokenFile holds the Nomad token instead of NomadToken; it is
	// read again when it changes or Nomad refuses the token.
	// NomadTaskAPI talks to Nomad through the Task API socket of the task
	// Nops runs in, with its workload identity (nomad_identity.go).
	// NomadEventStream watches Nomad's job events for live changes.
	NomadTokenFile   string
	NomadTaskAPI     bool
	NomadEventStream bool

	// Warnings are problems Load found that do not stop the server, for
	// the caller to log.
	Warnings []string

	// ValidateOnly is the command line's -validate: `nops serve` checks
	// the configuration and the files it names, then exits without
	// starting a server. It is not a setting: no file or variable sets it.
	ValidateOnly bool

	// NomadUIURL is the base URL of the Nomad UI, for the dashboard's
	// links; empty by default.
	NomadUIURL string

	// Nomads are the nomad blocks, in file order: the Nomad clusters Nops
	// deploys to (SPEC section 16). With none, the settings above make the
	// one cluster; Clusters returns the clusters in either case.
	Nomads []NomadCluster

	// Namespaces are the Nomad namespaces Nops manages; "*" means all.
	Namespaces []string

	// DriftInterval paces detection, EngineInterval the deployment engine.
	DriftInterval, EngineInterval time.Duration

	// NomadReplanRate caps the Nomad requests a second of the periodic
	// full re-plan of unchanged jobs (reconcile/replan.go).
	NomadReplanRate int
	// FullReplanInterval is how often a job neither git nor Nomad changed
	// is planned again anyway; 0 turns the safety net off.
	FullReplanInterval time.Duration

	// ApplyTimeout and HookTimeout apply to jobs that set no timeout meta.
	ApplyTimeout, HookTimeout time.Duration

	// DefaultPolicy applies to jobs without nops_policy.
	DefaultPolicy string

	// Repositories are the git repositories watched, in configuration
	// order: repository blocks first, then -repo flags.
	Repositories []Repository

	// Consul is nil when there is no consul block.
	Consul *ConsulConfig

	ACL     ACLConfig
	TLS     TLSConfig
	Notify  []NotifyConfig
	Webhook WebhookConfig

	// UIURL is the dashboard's public address, for links in
	// notifications. NotifyRetention is how long finished notifications
	// stay in the outbox.
	UIURL           string
	NotifyRetention time.Duration
	// Autopilot holds the starting autopilot settings; once an operator
	// sets them (nops operator autopilot set-config) the settings stored
	// in Raft win.
	Autopilot AutopilotConfig
	// Retention bounds the deployments and events the state keeps.
	Retention RetentionConfig
	// Approval holds the server's approval rules (approval block).
	Approval ApprovalConfig

	// EnableDebug serves /debug/pprof on the HTTP API.
	EnableDebug bool

	// LogLevel is one of trace, debug, info, warn, error.
	LogLevel string
	LogJSON  bool

	// RedactKeys are key fragments, in addition to DefaultRedactKeys, that
	// mark a meta or env key as secret. See SecretKeyFragments.
	RedactKeys []string

	// Raft snapshot tuning.
	RaftSnapshotThreshold uint64
	RaftSnapshotInterval  time.Duration
	// RaftMultiplier scales the Raft timeouts (raft.go).
	RaftMultiplier int

	// HTTP server limits: the time to read a request (headers and body),
	// to write an answer, and to keep an idle connection open, and the
	// number of connections served at once.
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
	HTTPMaxConns                                       int
	// HTTPAllowedOrigins are the browser origins (scheme://host[:port])
	// allowed to send writes besides the server's own IP address origin.
	HTTPAllowedOrigins []string

	// SnapshotMaxSize bounds a snapshot archive restored through the API,
	// as uploaded and once decompressed, and the state it holds once
	// decompressed, in bytes.
	SnapshotMaxSize uint64

	// GCMinHeap is the heap size, in bytes, toward which the process's
	// garbage collector's heap target is raised (GOGC at most 500) while
	// the process allocates heavily and GOGC alone gives less
	// (agent/gctune); an idle process collects as GOGC says. 0 leaves
	// GOGC alone. It is the
	// process's, so `nops serve` applies it (cmd/nops/command/serve.go), not
	// agent.Server: a program that embeds servers runs gctune itself.
	GCMinHeap uint64
}

// Repository is one git repository watched for job files.
type Repository struct {
	Name, URL, Branch, Path string
	PollInterval            time.Duration
	// WebURL is the repository's web UI, the base of the commit links
	// of deployments (<web_url>/commit/<sha>); empty derives it from an
	// https:// URL of GitHub, GitLab, Gitea/Forgejo and Bitbucket.
	WebURL string
	// Auth is nil when the repository needs no credentials.
	Auth *RepoAuth
	// Verify is nil when commits need no signature; otherwise only a
	// head signed by one of its keys is deployed (SPEC section 18).
	Verify *RepoVerify
	// Cluster names the Nomad cluster its jobs deploy to; empty means
	// the only cluster, or DefaultCluster (RepoCluster).
	Cluster string
}

// RepoVerify names the files of the keys a repository's commits must be
// signed with: an SSH allowed signers file (git's gpg.format = ssh), armored
// OpenPGP public keys, or both. Validate reads them, so a file that is
// missing or does not parse stops the start.
type RepoVerify struct {
	AllowedSignersFile, GPGKeysFile string
}

// RepoAuth holds the credentials of a repository. Secrets are given
// directly or by the name of an environment variable (the *Env fields);
// Resolve reads the latter.
type RepoAuth struct {
	Username, Password, Token                       string
	SSHKeyFile, SSHKeyPassphrase, SSHKnownHostsFile string
	// KnownHostsFile is known_hosts_file, the shorter name of
	// ssh_known_hosts_file (KnownHosts returns the one set).
	KnownHostsFile                             string
	PasswordEnv, TokenEnv, SSHKeyPassphraseEnv string
}

// ConsulConfig enables peer discovery through Consul.
type ConsulConfig struct {
	Address, Token, ServiceName string
	AutoJoin                    bool
}

// ACLConfig enables access control on the API.
type ACLConfig struct {
	Enabled bool
	// TokenTTL is the lifetime of the tokens of an SSO login whose auth
	// method sets none.
	TokenTTL time.Duration
}

// TLSConfig secures HTTP and server-to-server traffic, as Nomad's tls
// block does. With RPC every connection to the RPC port (Raft and
// forwarding) is mutual TLS: both sides present a certificate signed by
// CAFile. With HTTP the API is served over TLS; VerifyIncoming then
// requires API clients to present a certificate signed by CAFile.
// VerifyServerHostname requires the certificates of servers to be valid
// for server.<region>.nops, so that a client certificate of the same CA
// cannot pass for a server.
type TLSConfig struct {
	HTTP, RPC                 bool
	CAFile, CertFile, KeyFile string
	VerifyIncoming            bool
	VerifyServerHostname      bool
}

// AutopilotConfig tunes autopilot, as Consul's and Nomad's autopilot
// blocks do: the removal of dead servers and the promotion of new servers
// to voters once they are stable.
type AutopilotConfig struct {
	// CleanupDeadServers removes failed servers from Raft automatically,
	// never below MinQuorum voters and never a majority at once.
	CleanupDeadServers bool
	// LastContactThreshold is how long a server may go without hearing
	// from the leader and stay healthy.
	LastContactThreshold time.Duration
	// MaxTrailingLogs is how many entries a server may trail the leader
	// by and stay healthy.
	MaxTrailingLogs uint64
	// MinQuorum is the fewest voters dead-server cleanup leaves.
	MinQuorum int
	// ServerStabilizationTime is how long a new server must stay healthy
	// before it is promoted from non-voter to voter.
	ServerStabilizationTime time.Duration
}

// Defaults of the autopilot block (those of Consul and Nomad).
const (
	DefaultAutopilotLastContactThreshold    = 200 * time.Millisecond
	DefaultAutopilotMaxTrailingLogs         = 250
	DefaultAutopilotServerStabilizationTime = 10 * time.Second
)

// DefaultAutopilot returns the autopilot settings used when nothing is set.
func DefaultAutopilot() AutopilotConfig {
	return AutopilotConfig{
		CleanupDeadServers:      true,
		LastContactThreshold:    DefaultAutopilotLastContactThreshold,
		MaxTrailingLogs:         DefaultAutopilotMaxTrailingLogs,
		ServerStabilizationTime: DefaultAutopilotServerStabilizationTime,
	}
}

// Enabled reports whether HTTP or RPC uses TLS.
func (t TLSConfig) Enabled() bool { return t.HTTP || t.RPC }

// ServerName returns the name a server's certificate is valid for in
// region: server.<region>.nops.
func ServerName(region string) string { return "server." + region + ".nops" }

// NotifyConfig is one notification target. The URL is given directly or by
// the name of an environment variable (URLEnv); ResolveURL reads it.
type NotifyConfig struct {
	Name, Kind, URL, URLEnv string
	// SecretEnv or SecretFile name where the signing secret (webhook) or
	// the bot token (slack) is read.
	SecretEnv, SecretFile string
	// Channel is the Slack channel a bot token posts to.
	Channel string
	// Events filters what is sent; empty means every event.
	Events []string
	// Namespaces and Jobs are globs a notification's job must match; a
	// notification about no job matches only when both are empty.
	Namespaces, Jobs []string
	// SMTPAddr (host:port), From, To, Username and RequireTLS configure an
	// email target; its password is the secret.
	SMTPAddr, From, Username string
	To                       []string
	RequireTLS               bool
	// NomadJob is the parameterized job a nomad target dispatches, in
	// NomadNamespace (default "default"), in the Nomad cluster
	// NomadCluster (default: the first cluster, the only one without
	// nomad blocks).
	NomadJob, NomadNamespace, NomadCluster string
	// GiveUpAfter is how long after its change a notification is retried
	// before it is given up as dead. RetryInitial and RetryMax bound the
	// exponential backoff between attempts.
	GiveUpAfter, RetryInitial, RetryMax time.Duration
}

// WebhookConfig configures the git push webhook. SecretEnv names the
// environment variable holding the HMAC secret.
type WebhookConfig struct {
	SecretEnv string
}

// DefaultRedactKeys returns the key fragments that always mark a meta or
// env key as secret.
func DefaultRedactKeys() []string {
	return []string{"password", "secret", "token", "key", "credential", "passwd", "private", "auth", "cert", "apikey",
		"pass", "pwd", "phrase", "dsn"}
}

// SecretKeyFragments returns DefaultRedactKeys followed by the configured
// RedactKeys, lower-cased and without duplicates. A key is secret when it
// contains any of them, ignoring case.
func (c *Config) SecretKeyFragments() []string {
	seen := make(map[string]bool)
	var out []string
	for _, k := range append(DefaultRedactKeys(), c.RedactKeys...) {
		k = strings.ToLower(strings.TrimSpace(k))
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	return out
}

// Default returns the configuration used when nothing is set. DataDir and
// BootstrapExpect are unset (both are required unless Dev).
func Default() *Config {
	return &Config{
		Bind:                  DefaultBind,
		Advertise:             defaultAdvertise(),
		HTTPPort:              DefaultHTTPPort,
		RPCPort:               DefaultRPCPort,
		SerfPort:              DefaultSerfPort,
		NodeName:              defaultNodeName(),
		Region:                DefaultRegion,
		NomadAddr:             DefaultNomadAddr,
		NomadEventStream:      true,
		Namespaces:            []string{"default"},
		DriftInterval:         DefaultDriftInterval,
		EngineInterval:        DefaultEngineInterval,
		NomadReplanRate:       DefaultNomadReplanRate,
		FullReplanInterval:    DefaultFullReplanInterval,
		ApplyTimeout:          DefaultApplyTimeout,
		HookTimeout:           DefaultHookTimeout,
		DefaultPolicy:         DefaultPolicy,
		LogLevel:              DefaultLogLevel,
		RaftSnapshotThreshold: DefaultRaftSnapshotThreshold,
		RaftSnapshotInterval:  DefaultRaftSnapshotInterval,
		RaftMultiplier:        DefaultRaftMultiplier,
		ACL:                   ACLConfig{TokenTTL: DefaultACLTokenTTL},
		NotifyRetention:       DefaultNotifyRetention,
		Autopilot:             DefaultAutopilot(),
		Retention:             DefaultRetention(),
		HTTPReadTimeout:       DefaultHTTPReadTimeout,
		HTTPWriteTimeout:      DefaultHTTPWriteTimeout,
		HTTPIdleTimeout:       DefaultHTTPIdleTimeout,
		HTTPMaxConns:          DefaultHTTPMaxConns,
		SnapshotMaxSize:       DefaultSnapshotMaxSize,
		GCMinHeap:             DefaultGCMinHeap,
	}
}

// DefaultACLTokenTTL is the lifetime of SSO login tokens by default.
const DefaultACLTokenTTL = time.Hour

// newRepository returns a repository with the defaults of its fields.
func newRepository(name string) Repository {
	return Repository{Name: name, Branch: DefaultRepoBranch, Path: DefaultRepoPath, PollInterval: DefaultRepoPollInterval}
}

func defaultNodeName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "nops"
}

func defaultAdvertise() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return DevAddress
	}
	return firstPrivateIPv4(addrs)
}

// firstPrivateIPv4 returns the first private IPv4 address among addrs, or
// 127.0.0.1 when there is none.
func firstPrivateIPv4(addrs []net.Addr) string {
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if ip4 := ip.To4(); ip4 != nil && ip4.IsPrivate() {
			return ip4.String()
		}
	}
	return DevAddress
}

// Validate completes dev mode (bind and advertise 127.0.0.1, bootstrap
// expect 1) and checks every setting and the rules between them. It returns
// every problem found, each naming its key.
func (c *Config) Validate() error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, keyErrorf(key, format, args...))
	}

	if c.Dev {
		c.Bind, c.Advertise = DevAddress, DevAddress
		if c.BootstrapExpect > 1 {
			add("bootstrap-expect", "a -dev server runs alone; got %d", c.BootstrapExpect)
		}
		c.BootstrapExpect = 1
		if len(c.RetryJoin) > 0 {
			add("retry-join", "a -dev server runs alone and joins no other server")
		}
	} else {
		if c.DataDir == "" {
			add("data-dir", "required unless -dev")
		}
		if c.BootstrapExpect < 1 {
			add("bootstrap-expect", "required unless -dev: the number of servers that form the cluster (1, 3 or 5)")
		}
	}

	// Every field that has its own check: ports, addresses, durations,
	// policy, log level, namespaces, retry-join.
	for _, f := range c.fields() {
		if err := f.v.check(); err != nil {
			errs = append(errs, &keyError{key: f.name, err: err})
		}
	}

	ports := map[int]string{}
	for _, p := range []struct {
		name string
		port int
	}{{"http-port", c.HTTPPort}, {"rpc-port", c.RPCPort}, {"serf-port", c.SerfPort}} {
		if p.port == 0 {
			continue
		}
		if other, ok := ports[p.port]; ok {
			add(p.name, "port %d is already used by %s", p.port, other)
			continue
		}
		ports[p.port] = p.name
	}
	if c.NodeName == "" {
		add("node", "must not be empty")
	}
	if !c.Dev && c.Encrypt == "" && !c.DisableGossipEncryption {
		add("encrypt", "a gossip encryption key is required unless -dev: create one with "+
			"\"nops operator gossip keygen\" and give every server the same key "+
			"(or set disable_gossip_encryption = true to gossip in the clear)")
	}
	if c.Encrypt != "" && c.DisableGossipEncryption {
		add("disable-gossip-encryption", "cannot be combined with encrypt")
	}
	if !c.Dev && !c.TLS.RPC && !c.InsecureRPC {
		add("tls", "mutual TLS on the RPC port is required unless -dev: anyone who reaches a plain RPC port "+
			"controls the cluster. Set tls { rpc = true, ca_file, cert_file, key_file } (create the files with "+
			"\"nops tls ca create\" and \"nops tls cert create -server\"), "+
			"or set insecure_rpc = true (-insecure-rpc) to run without it")
	}
	if c.TLS.RPC && c.InsecureRPC {
		add("insecure-rpc", "cannot be combined with tls { rpc = true }")
	}

	if c.FullReplanInterval > 0 && c.FullReplanInterval < c.DriftInterval {
		add("full-replan-interval", "must be 0 (off) or at least -drift-interval (%s), not %s", c.DriftInterval, c.FullReplanInterval)
	}

	errs = append(errs, c.validateRepositories()...)
	errs = append(errs, c.validateClusters()...)
	errs = append(errs, c.validateBlocks()...)
	return errors.Join(errs...)
}

func (c *Config) validateRepositories() []error {
	var errs []error
	seen := make(map[string]bool)
	for i, r := range c.Repositories {
		key := fmt.Sprintf("repository %q", r.Name)
		if r.Name == "" {
			key = fmt.Sprintf("repository #%d", i+1)
		}
		add := func(format string, args ...any) {
			errs = append(errs, keyErrorf(key, format, args...))
		}
		if err := checkName(r.Name); err != nil {
			add("name: %v", err)
		} else if seen[r.Name] {
			add("name: defined more than once")
		}
		seen[r.Name] = true
		if err := checkRepoURL(r.URL); err != nil {
			add("url: %v", err)
		}
		if err := checkBranch(r.Branch); err != nil {
			add("branch: %v", err)
		}
		if err := checkRepoPath(r.Path); err != nil {
			add("path: %v", err)
		}
		if err := gitwatch.CheckWebURL(r.WebURL); err != nil {
			add("web_url: %v", err)
		}
		if err := checkPositiveDuration(r.PollInterval); err != nil {
			add("poll_interval: %v", err)
		}
		if a := r.Auth; a != nil {
			if a.Password != "" && a.PasswordEnv != "" {
				add("auth: set password or password_env, not both")
			}
			if a.Token != "" && a.TokenEnv != "" {
				add("auth: set token or token_env, not both")
			}
			if a.SSHKeyPassphrase != "" && a.SSHKeyPassphraseEnv != "" {
				add("auth: set ssh_key_passphrase or ssh_key_passphrase_env, not both")
			}
			hasPassword := a.Password != "" || a.PasswordEnv != ""
			hasToken := a.Token != "" || a.TokenEnv != ""
			if hasPassword && hasToken {
				add("auth: set a password or a token, not both")
			}
			if a.SSHKeyFile != "" && (hasPassword || hasToken) {
				add("auth: ssh_key_file cannot be combined with a password or a token")
			}
			if a.SSHKeyFile == "" && (a.SSHKeyPassphrase != "" || a.SSHKeyPassphraseEnv != "") {
				add("auth: ssh_key_passphrase needs ssh_key_file")
			}
			if a.SSHKnownHostsFile != "" && a.KnownHostsFile != "" {
				add("auth: set known_hosts_file or ssh_known_hosts_file, not both")
			}
			if a.SSHKeyFile == "" && a.KnownHosts() != "" {
				add("auth: known_hosts_file needs ssh_key_file")
			}
		}
		if v := r.Verify; v != nil {
			if _, err := gitwatch.LoadVerifier(gitwatch.Verify{AllowedSignersFile: v.AllowedSignersFile, GPGKeysFile: v.GPGKeysFile}); err != nil {
				problems := []error{err}
				if joined, ok := err.(interface{ Unwrap() []error }); ok {
					problems = joined.Unwrap()
				}
				for _, e := range problems {
					add("%v", e)
				}
			}
		}
	}
	return errs
}

func (c *Config) validateBlocks() []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, keyErrorf(key, format, args...))
	}
	if c.Consul != nil {
		if c.Consul.Address == "" {
			add("consul", "address must not be empty")
		}
		if err := checkName(c.Consul.ServiceName); err != nil {
			add("consul", "service_name: %v", err)
		}
	}

	errs = append(errs, c.validateTLS()...)
	if c.ACL.TokenTTL <= 0 || c.ACL.TokenTTL > maxTokenTTL {
		add("acl", "token_ttl: must be a positive duration of at most a year, not %s", c.ACL.TokenTTL)
	}
	if c.Autopilot.MinQuorum < 0 {
		add(blockAutopilot, "min_quorum: must not be negative, got %d", c.Autopilot.MinQuorum)
	}
	c.Retention.validate(add)
	c.Approval.validate(c.ACL.Enabled, add)

	seen := make(map[string]bool)
	for i, n := range c.Notify {
		key := fmt.Sprintf("notify %q", n.Name)
		if n.Name == "" {
			key = fmt.Sprintf("notify #%d", i+1)
		}
		if err := checkName(n.Name); err != nil {
			add(key, "name: %v", err)
		} else if seen[n.Name] {
			add(key, "name: defined more than once")
		}
		seen[n.Name] = true
		n.validate(func(format string, args ...any) { add(key, format, args...) })
	}
	if c.UIURL != "" {
		if err := checkHTTPURL(c.UIURL); err != nil {
			add("ui-url", "%v", err)
		}
	}
	if c.NotifyRetention <= 0 {
		add("notify-retention", "must be positive")
	}
	return errs
}

// validateTLS checks the tls block: every setting it has must take effect.
// The files themselves are read when the server starts.
func (c *Config) validateTLS() []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, keyErrorf("tls", format, args...))
	}
	t := c.TLS
	if t.Enabled() {
		if t.CertFile == "" || t.KeyFile == "" {
			add("http and rpc need cert_file and key_file")
		}
	} else if t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
		add("ca_file, cert_file and key_file are set but neither http nor rpc is enabled: set http = true and/or rpc = true")
	}
	if t.RPC && t.CAFile == "" {
		add("rpc needs ca_file: servers verify each other's certificates against it")
	}
	if t.VerifyIncoming {
		if !t.HTTP {
			add("verify_incoming applies to the HTTP API and needs http = true (the RPC port always verifies client certificates)")
		}
		if t.CAFile == "" {
			add("verify_incoming needs ca_file")
		}
	}
	if t.VerifyServerHostname && !t.RPC {
		add("verify_server_hostname needs rpc = true")
	}
	return errs
}

// keyError is a problem with one setting. Its message starts with the key.
type keyError struct {
	key string
	err error
}

func keyErrorf(key, format string, args ...any) *keyError {
	return &keyError{key: key, err: fmt.Errorf(format, args...)}
}

func (e *keyError) Error() string { return e.key + ": " + e.err.Error() }

func (e *keyError) Unwrap() error { return e.err }

// Checks shared by the layers and Validate.

func checkPort(p int) error {
	if p < 0 || p > 65535 {
		return fmt.Errorf("invalid port %d: must be between 1 and 65535 (or 0 for any free port)", p)
	}
	return nil
}

func checkBootstrapExpect(n int) error {
	if n < 0 {
		return fmt.Errorf("invalid value %d: must be at least 1", n)
	}
	return nil
}

func checkBind(s string) error {
	if net.ParseIP(s) == nil {
		return fmt.Errorf("invalid address %q: must be an IP address", s)
	}
	return nil
}

func checkAdvertise(s string) error {
	ip := net.ParseIP(s)
	if ip == nil {
		return fmt.Errorf("invalid address %q: must be an IP address", s)
	}
	if ip.IsUnspecified() {
		return fmt.Errorf("invalid address %q: other servers cannot reach an unspecified address", s)
	}
	return nil
}

func checkPolicy(s string) error {
	switch s {
	case PolicyAuto, PolicyApproval, PolicyNone:
		return nil
	}
	return fmt.Errorf("invalid policy %q: must be %s, %s or %s", s, PolicyAuto, PolicyApproval, PolicyNone)
}

func checkLogLevel(s string) error {
	switch s {
	case "trace", "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("invalid log level %q: must be trace, debug, info, warn or error", s)
}

func checkNamespaces(l []string) error {
	if len(l) == 0 {
		return errors.New("at least one namespace is required (\"*\" for all)")
	}
	for _, ns := range l {
		if ns == "" {
			return errors.New("namespace names must not be empty")
		}
		if ns == "*" && len(l) > 1 {
			return errors.New("\"*\" means every namespace and cannot be combined with others")
		}
	}
	return nil
}

// checkBaseURL accepts an absolute http:// or https:// URL with a host
// and no query or fragment.
func checkBaseURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid URL %q: must be an absolute http:// or https:// URL", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("invalid URL %q: no user, query or fragment allowed", s)
	}
	return nil
}

func checkNomadAddr(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid address %q: %w", s, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Errorf("invalid address %q: no host", s)
		}
	case "unix":
	default:
		return fmt.Errorf("invalid address %q: must be an http://, https:// or unix:// URL", s)
	}
	return nil
}

func checkRetryJoin(l []string) error {
	for _, a := range l {
		if _, _, err := splitJoinAddr(a); err != nil {
			return err
		}
	}
	return nil
}

// splitJoinAddr splits a retry-join address into host and port; port is
// empty when the address has none.
func splitJoinAddr(a string) (host, port string, err error) {
	if a == "" {
		return "", "", errors.New("empty address")
	}
	if net.ParseIP(a) != nil {
		return a, "", nil
	}
	if strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") && net.ParseIP(a[1:len(a)-1]) != nil {
		return a[1 : len(a)-1], "", nil
	}
	if !strings.Contains(a, ":") {
		host = a
	} else {
		host, port, err = net.SplitHostPort(a)
		if err != nil {
			return "", "", fmt.Errorf("invalid address %q: must be host or host:port", a)
		}
		n, perr := strconv.Atoi(port)
		if perr != nil || n < 1 || n > 65535 {
			return "", "", fmt.Errorf("invalid address %q: port must be between 1 and 65535", a)
		}
	}
	if host == "" || strings.ContainsAny(host, " /") {
		return "", "", fmt.Errorf("invalid address %q: must be host or host:port", a)
	}
	return host, port, nil
}

func checkRedactKeys(l []string) error {
	for _, k := range l {
		if strings.TrimSpace(k) == "" {
			return errors.New("key fragments must not be empty")
		}
	}
	return nil
}

func checkMaxConns(n int) error {
	if n < 1 {
		return fmt.Errorf("invalid value %d: must be at least 1", n)
	}
	return nil
}

// maxGCMinHeap bounds gc_min_heap: a floor above it is a typo for a
// smaller one, not memory a Nops server should hold back for its heap.
const maxGCMinHeap = 64 << 30

func checkGCMinHeap(n uint64) error {
	if n > maxGCMinHeap {
		return fmt.Errorf("invalid value %d: must be at most %d (64 GiB), or 0 to leave GOGC alone", n, uint64(maxGCMinHeap))
	}
	return nil
}

func checkSnapshotMaxSize(n uint64) error {
	if n < minSnapshotMaxSize {
		return fmt.Errorf("invalid value %d: must be at least %d (1 MiB)", n, minSnapshotMaxSize)
	}
	return nil
}

// checkOrigins accepts browser origins: scheme://host[:port], nothing more.
func checkOrigins(l []string) error {
	for _, o := range l {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("invalid origin %q: must be http(s)://host[:port]", o)
		}
	}
	return nil
}

func checkReplanRate(n int) error {
	if n < 1 || n > MaxNomadReplanRate {
		return fmt.Errorf("must be from 1 to %d requests a second, not %d", MaxNomadReplanRate, n)
	}
	return nil
}

func checkSnapshotThreshold(n uint64) error {
	if n == 0 {
		return errors.New("must be greater than zero")
	}
	return nil
}

// checkName checks the name of a repository, notify target or service:
// letters, digits, '-', '_' and '.', starting with a letter or digit, so
// that it is safe in URLs and logs.
func checkName(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	for i, r := range s {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if alnum || i > 0 && (r == '-' || r == '_' || r == '.') {
			continue
		}
		return fmt.Errorf("invalid name %q: use letters, digits, '-', '_' and '.', starting with a letter or digit", s)
	}
	return nil
}

func checkRepoURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	if strings.ContainsAny(s, " \t\n") {
		return fmt.Errorf("invalid URL %q: contains white space", hideUserinfo(s))
	}
	return nil
}

// userinfoPattern matches the user info of a URL (scheme://user:pass@) or
// of an scp-like address (user:pass@host:path).
var userinfoPattern = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@]+@|^[^\s/@:]*:[^\s/@]*@`)

// hideUserinfo removes the credentials a repository URL may carry from a
// text that quotes it: an error must not print a token.
func hideUserinfo(s string) string {
	s = userinfoPattern.ReplaceAllString(s, "$1")
	// What the patterns do not recognise (a malformed URL such as
	// "TOKEN@ host") keeps nothing before its last @ either.
	if at := strings.LastIndex(s, "@"); at >= 0 {
		s = "…" + s[at:]
	}
	return s
}

func checkBranch(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsAny(s, " \t\n:~^?*[\\") || strings.Contains(s, "..") {
		return fmt.Errorf("invalid branch %q", s)
	}
	return nil
}

// checkRepoPath accepts a slash-separated path inside the repository.
func checkRepoPath(s string) error {
	if s == "" {
		return errors.New("must not be empty (use \".\" for the repository root)")
	}
	if path.IsAbs(s) || strings.Contains(s, "\\") {
		return fmt.Errorf("invalid path %q: must be relative to the repository root", s)
	}
	if c := path.Clean(s); c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Errorf("invalid path %q: leaves the repository", s)
	}
	return nil
}

// checkHTTPURL checks a notification URL. The URL is not quoted back: a
// Slack or webhook URL often carries a secret.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an http:// or https:// URL")
	}
	return nil
}

// checkRegion accepts a region name that makes a valid DNS label in
// server.<region>.nops.
func checkRegion(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	for i, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && r == '-' {
			continue
		}
		return fmt.Errorf("invalid region %q: use lower-case letters, digits and '-', starting with a letter or digit", s)
	}
	if len(s) > maxRegionLen {
		return fmt.Errorf("invalid region %q: longer than %d characters", s, maxRegionLen)
	}
	return nil
}

func checkEncryptKey(s string) error {
	if s == "" {
		return nil
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return errors.New("not valid base64")
	}
	switch len(key) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("decodes to %d bytes: must be 16, 24 or 32", len(key))
}

// Changed returns the names of the settings whose values differ between c
// and other: top-level settings by their flag name, blocks by their block
// name. Secrets are compared, never returned.
func (c *Config) Changed(other *Config) []string {
	var out []string
	mine, theirs := c.fields(), other.fields()
	for i, f := range mine {
		if f.v.String() != theirs[i].v.String() {
			out = append(out, f.name)
		}
	}
	for _, b := range []struct {
		name string
		a, b any
	}{
		{blockRepository, c.Repositories, other.Repositories},
		{blockNomad, c.Nomads, other.Nomads},
		{blockConsul, c.Consul, other.Consul},
		{blockACL, c.ACL, other.ACL},
		{blockTLS, c.TLS, other.TLS},
		{blockNotify, c.Notify, other.Notify},
		{blockWebhook, c.Webhook, other.Webhook},
		{blockAutopilot, c.Autopilot, other.Autopilot},
		{blockRetention, c.Retention, other.Retention},
		{blockApproval, c.Approval, other.Approval},
	} {
		if !reflect.DeepEqual(b.a, b.b) {
			out = append(out, b.name)
		}
	}
	return out
}
