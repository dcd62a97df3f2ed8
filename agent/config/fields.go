package config

import (
	"strings"
)

// field is one top-level setting: flag -name, environment variable
// NOPS_NAME and config file attribute name_with_underscores.
type field struct {
	name  string
	usage string
	// defText replaces the default shown in help when the default depends
	// on the machine or the environment.
	defText string
	v       value
}

func (f field) envName() string { return envName(f.name) }

func (f field) hclName() string { return hclName(f.name) }

func envName(flagName string) string {
	return "NOPS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func hclName(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// Flags that are not settings of Config but drive loading. They have
// environment variables but no config file attribute.
const (
	flagConfig = "config"
	flagRepo   = "repo"
)

// flagValidate asks `nops serve` to check its configuration and exit. It
// exists on the command line only: no environment variable, no attribute.
const flagValidate = "validate"

// fields binds every top-level setting to its place in c, in the order of
// the help text.
func (c *Config) fields() []field {
	lower := func(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
	logLevel := stringValue(&c.LogLevel, checkLogLevel).(*typed[string])
	logLevel.normalize = lower

	return []field{
		{name: "data-dir", usage: "Directory for the Raft log, snapshots and node ID. Required unless -dev.",
			v: stringValue(&c.DataDir, nil)},
		{name: "dev", usage: "Run a single server bound to 127.0.0.1 that bootstraps itself, with a temporary data dir unless -data-dir is set.",
			v: boolValue(&c.Dev)},
		{name: "node", usage: "Name of this server in the cluster.", defText: "hostname",
			v: stringValue(&c.NodeName, nil)},
		{name: "region", usage: "Region of the cluster; every server of a cluster has the same. With TLS, server certificates are for server.<region>.nops.",
			v: stringValue(&c.Region, checkRegion)},
		{name: "encrypt", usage: "Base64 gossip encryption key (16, 24 or 32 bytes), the same on every server. Required unless -dev or -disable-gossip-encryption; create one with \"nops operator gossip keygen\".",
			defText: "none", v: stringValue(&c.Encrypt, checkEncryptKey)},
		{name: "disable-gossip-encryption", usage: "Gossip in the clear without -encrypt (not for production: anyone who can reach the serf port can join).",
			v: boolValue(&c.DisableGossipEncryption)},
		{name: "insecure-rpc", usage: "Serve the RPC port (Raft and forwarding) without mutual TLS outside -dev (not for production: anyone who can reach the RPC port controls the cluster).",
			v: boolValue(&c.InsecureRPC)},
		{name: "bind", usage: "IP address to listen on.",
			v: stringValue(&c.Bind, checkBind)},
		{name: "advertise", usage: "IP address other servers use to reach this one.",
			defText: "the bind address, or the first private IPv4 when binding 0.0.0.0",
			v:       stringValue(&c.Advertise, checkAdvertise)},
		{name: "http-port", usage: "Port of the HTTP API and dashboard (0 picks a free port).",
			v: intValue(&c.HTTPPort, checkPort)},
		{name: "rpc-port", usage: "Port of Raft and server-to-server forwarding (0 picks a free port).",
			v: intValue(&c.RPCPort, checkPort)},
		{name: "serf-port", usage: "Port of serf gossip (0 picks a free port).",
			v: intValue(&c.SerfPort, checkPort)},
		{name: "bootstrap-expect", usage: "Number of servers that form a new cluster. Required unless -dev.",
			defText: "1 with -dev",
			v:       intValue(&c.BootstrapExpect, checkBootstrapExpect)},
		{name: "retry-join", usage: "Serf address host[:port] of another server to join. Repeatable or comma-separated.",
			v: listValue(&c.RetryJoin, nil, checkRetryJoin)},
		{name: "nomad-addr", usage: "Address of the Nomad API, with one Nomad cluster. With nomad blocks (many clusters) each block has its address, -nomad-addr, -nomad-token, -nomad-token-file, -nomad-region, -nomad-task-api and -nomad-ui-url are refused, and NOMAD_ADDR, NOMAD_TOKEN and NOMAD_REGION are not used.", defText: "NOMAD_ADDR, else " + DefaultNomadAddr,
			v: stringValue(&c.NomadAddr, checkNomadAddr)},
		{name: "nomad-token", usage: "Nomad ACL token. On the command line it is visible in the process list: prefer NOPS_NOMAD_TOKEN, NOMAD_TOKEN or -nomad-token-file.", defText: "NOMAD_TOKEN",
			v: stringValue(&c.NomadToken, nil)},
		{name: "nomad-region", usage: "Nomad region.", defText: "NOMAD_REGION",
			v: stringValue(&c.NomadRegion, nil)},
		{name: "nomad-token-file", usage: "File holding the Nomad ACL token, read again when it changes or Nomad refuses the token.",
			v: stringValue(&c.NomadTokenFile, nil)},
		{name: "nomad-task-api", usage: "Talk to Nomad through the Task API socket of the Nomad task Nops runs in ($NOMAD_SECRETS_DIR/api.sock), with -nomad-token-file, else the task's workload identity (secrets/nomad_token), else NOMAD_TOKEN.",
			v: boolValue(&c.NomadTaskAPI)},
		{name: "nomad-event-stream", usage: "Watch Nomad's job event stream, so a change made to a managed job in Nomad is seen at once (on by default; -nomad-event-stream=false polls every -drift-interval instead).",
			v: boolValue(&c.NomadEventStream)},
		{name: "nomad-ui-url", usage: "Base URL of the Nomad UI; the dashboard links jobs, hooks and allocations there when set.",
			defText: "none", v: stringValue(&c.NomadUIURL, checkBaseURL)},
		{name: "namespaces", usage: "Comma-separated Nomad namespaces to manage; \"*\" for all. The default of the namespaces of nomad blocks.",
			v: listValue(&c.Namespaces, nil, checkNamespaces)},
		{name: "drift-interval", usage: "Interval between detection cycles.",
			v: durationValue(&c.DriftInterval)},
		{name: "full-replan-interval", usage: "How often a managed job that neither git nor Nomad changed is planned again anyway, as a safety net: one Nomad plan per managed job per interval, paced by -nomad-replan-rate (0 turns it off; at least -drift-interval otherwise). Changes, Nomad upgrades and gaps in Nomad's event stream are detected without it.",
			v: durationOrOffValue(&c.FullReplanInterval)},
		{name: "nomad-replan-rate", usage: "Nomad requests a second a paced re-plan of unchanged jobs may make (the -full-replan-interval safety net, or after a Nomad version change); it is spread over as many cycles as it needs. Plans of changed jobs are not paced.",
			v: intValue(&c.NomadReplanRate, checkReplanRate)},
		{name: "engine-interval", usage: "Interval between deployment engine passes while Nomad's event stream is down (with it up, deployments move on its events).",
			v: durationValue(&c.EngineInterval)},
		{name: "apply-timeout", usage: "Limit for register and health of a job without nops_apply_timeout.",
			v: durationValue(&c.ApplyTimeout)},
		{name: "hook-timeout", usage: "Limit for one hook run of a hook without nops_hook_timeout.",
			v: durationValue(&c.HookTimeout)},
		{name: "default-policy", usage: "Policy of jobs without nops_policy: auto, approval or none.",
			v: stringValue(&c.DefaultPolicy, checkPolicy)},
		{name: "log-level", usage: "Log level: trace, debug, info, warn or error.",
			v: logLevel},
		{name: "log-json", usage: "Write logs as JSON.",
			v: boolValue(&c.LogJSON)},
		{name: "redact-keys", usage: "Comma-separated key fragments that mark meta and env keys as secret, in addition to: " +
			strings.Join(DefaultRedactKeys(), ", ") + ".",
			v: listValue(&c.RedactKeys, lowerAll, checkRedactKeys)},
		{name: "raft-snapshot-threshold", usage: "Raft log entries between snapshots.",
			v: uint64Value(&c.RaftSnapshotThreshold, checkSnapshotThreshold)},
		{name: "enable-debug", usage: "Serve the Go profiler under /debug/pprof on the HTTP API.",
			v: boolValue(&c.EnableDebug)},
		{name: "raft-snapshot-interval", usage: "Interval between checks whether to snapshot.",
			v: durationValue(&c.RaftSnapshotInterval)},
		{name: "raft-multiplier", usage: "Scales the Raft timeouts (1 to 10): 1 elects a new leader within about a second on a LAN; raise it for slow links or loaded machines.",
			v: intValue(&c.RaftMultiplier, checkRaftMultiplier)},
		{name: "ui-url", usage: "Public address of the dashboard, for links in notifications and as the base of the dashboard's SSO callback (the address of the request when unset).",
			v: stringValue(&c.UIURL, nil)},
		{name: "notify-retention", usage: "How long delivered and dead notifications stay in the outbox.",
			v: durationValue(&c.NotifyRetention)},
		{name: "http-read-timeout", usage: "Limit to read one HTTP request, headers and body (snapshot restore gets longer).",
			v: durationValue(&c.HTTPReadTimeout)},
		{name: "http-write-timeout", usage: "Limit to write one HTTP answer (streams and long polls have none).",
			v: durationValue(&c.HTTPWriteTimeout)},
		{name: "http-idle-timeout", usage: "How long an idle keep-alive HTTP connection stays open.",
			v: durationValue(&c.HTTPIdleTimeout)},
		{name: "http-max-conns", usage: "HTTP connections served at once; more wait to be accepted.",
			v: intValue(&c.HTTPMaxConns, checkMaxConns)},
		{name: "http-allowed-origins", usage: "Comma-separated browser origins (scheme://host[:port]) allowed to send writes, besides the server's own IP address.",
			v: listValue(&c.HTTPAllowedOrigins, nil, checkOrigins)},
		{name: "snapshot-max-size", usage: "Largest snapshot archive the API restores, uploaded and decompressed, in bytes.",
			v: uint64Value(&c.SnapshotMaxSize, checkSnapshotMaxSize)},
		{name: "gc-min-heap", usage: "Heap size, in bytes, toward which the Go garbage collector's heap target is raised (GOGC at most 500) while the server allocates heavily (GOGC alone would collect twice a second or more) and GOGC alone gives less: fewer collections under load for a small server, for about this much memory at most; 30s after the load ends GOGC applies again and the memory is given back (0 leaves GOGC alone).",
			v: uint64Value(&c.GCMinHeap, checkGCMinHeap)},
	}
}

func lowerAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strings.ToLower(strings.TrimSpace(s))
	}
	return out
}
