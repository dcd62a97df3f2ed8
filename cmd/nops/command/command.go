// Package command implements the nops command line: `nops serve` runs a
// server, and every other subcommand is a client of the HTTP API through
// package rpc/client.
//
// Each subcommand is a small type with its own flag set, built afresh for
// every Run; the package holds no mutable state. The flags -address
// (NOPS_ADDR), -token (NOPS_TOKEN) and -json are accepted by every client
// subcommand after its name, as in `nops deployment list -json`, and before
// it too (`nops -address=URL status`); flags may also follow positional
// arguments (`nops deployment approve ID -comment x`).
//
// The libraries behind some commands are packages of their own, which this
// package wires to flags and output: validate (the offline job validator of
// `nops validate`), debugbundle (the bundle of `nops operator debug`) and
// oidclogin (the OIDC flow of `nops login`).
//
// Guarantee: Run returns 0 on success, 1 when the command failed (the server
// could not be reached, answered an error, or a file is invalid) and 2 on a
// usage error (unknown command or flag, wrong arguments), with the message
// and the usage on stderr. Help (`nops`, `nops -h`, `nops help [cmd]`,
// `nops <cmd> -h`) goes to stdout and returns 0.
package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nops-dev/nops/rpc/client"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// Environment variables of the client commands.
const (
	EnvAddress = "NOPS_ADDR"
	EnvToken   = "NOPS_TOKEN"
)

// Run runs the nops command line with args (without the program name) and
// returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	m := &runner{stdout: termSafe{stdout}, stderr: termSafe{stderr}, lookupEnv: os.LookupEnv, now: time.Now}
	return m.run(ctx, args)
}

// runner is what every command shares: its outputs, the environment and the
// clock. It is built by Run for one invocation.
type runner struct {
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	now            func() time.Time
	// random, when set, replaces crypto/rand (the nonce and PKCE verifier
	// of nops login), for tests.
	random io.Reader
}

// command is one subcommand, or a group of them.
type command interface {
	// Synopsis is one line for the list of commands.
	Synopsis() string
	// Help is the full usage text.
	Help() string
	// Run runs the command with the arguments after its name.
	Run(ctx context.Context, args []string) int
}

// commands returns every command by its name ("deployment list").
func (m *runner) commands() map[string]command {
	cmds := m.commandTable()
	synopses := groupSynopses()
	for name, c := range cmds {
		if c == nil {
			cmds[name] = &groupCommand{m: m, name: name, synopsis: synopses[name], all: cmds}
		}
	}
	return cmds
}

// commandTable maps every command's name to the command; a group of
// commands (whose name prefixes theirs) is nil.
func (m *runner) commandTable() map[string]command {
	return map[string]command{
		"serve":   &serveCommand{m: m},
		"version": &versionCommand{m: m},
		"status":  &statusCommand{m: m},

		"deployment":         nil,
		"deployment list":    &deploymentListCommand{m: m},
		"deployment status":  &deploymentStatusCommand{m: m},
		"deployment approve": &deploymentDecideCommand{m: m, approve: true},
		"deployment reject":  &deploymentDecideCommand{m: m},
		"deployment promote": &deploymentPromoteCommand{m: m},

		"deployment skip-requirements": &deploymentSkipRequirementsCommand{m: m},

		"job":            nil,
		"job status":     &jobStatusCommand{m: m},
		"job retry":      &jobActionCommand{m: m, action: jobRetry},
		"job pause":      &jobActionCommand{m: m, action: jobPause},
		"job resume":     &jobActionCommand{m: m, action: jobResume},
		"job deploy-now": &jobActionCommand{m: m, action: jobDeployNow},

		"cluster":      nil,
		"cluster list": &clusterListCommand{m: m},

		"pause":  &pauseAllCommand{m: m, pause: true},
		"resume": &pauseAllCommand{m: m},

		"window":        nil,
		"window list":   &windowListCommand{m: m},
		"window apply":  &windowApplyCommand{m: m},
		"window delete": &windowDeleteCommand{m: m},

		"repo":         nil,
		"repo list":    &repoListCommand{m: m},
		"repo refresh": &repoRefreshCommand{m: m},
		"orphans":      &orphansCommand{m: m},
		"preview":      &previewCommand{m: m},

		"events": &eventsCommand{m: m},

		"notify":         nil,
		"notify list":    &notifyListCommand{m: m},
		"notify targets": &notifyTargetsCommand{m: m},
		"notify test":    &notifyTestCommand{m: m},

		"operator":                          nil,
		"operator raft":                     nil,
		"operator raft list-peers":          &raftListPeersCommand{m: m},
		"operator raft remove-peer":         &raftRemovePeerCommand{m: m},
		"operator raft transfer-leadership": &raftTransferCommand{m: m},
		"operator snapshot":                 nil,
		"operator snapshot save":            &snapshotSaveCommand{m: m},
		"operator snapshot restore":         &snapshotRestoreCommand{m: m},
		"operator snapshot inspect":         &snapshotInspectCommand{m: m},
		"operator gossip":                   nil,
		"operator gossip keyring":           &gossipKeyringCommand{m: m},
		"operator gossip keygen":            &gossipKeygenCommand{m: m},
		"operator gc":                       &operatorGCCommand{m: m},
		"operator autopilot":                nil,
		"operator autopilot get-config":     &autopilotGetConfigCommand{m: m},
		"operator autopilot set-config":     &autopilotSetConfigCommand{m: m},
		"operator autopilot health":         &autopilotHealthCommand{m: m},
		"operator debug":                    &operatorDebugCommand{m: m},
		"monitor":                           &monitorCommand{m: m},
		"server":                            nil,
		"server members":                    &serverMembersCommand{m: m},

		"tls":             nil,
		"tls ca":          nil,
		"tls ca create":   &tlsCACreateCommand{m: m},
		"tls cert":        nil,
		"tls cert create": &tlsCertCreateCommand{m: m},

		"validate": &validateCommand{m: m},

		"acl":                    nil,
		"acl bootstrap":          &aclBootstrapCommand{m: m},
		"acl policy":             nil,
		"acl policy apply":       &aclPolicyApplyCommand{m: m},
		"acl policy list":        m.aclPolicyList(),
		"acl policy info":        m.aclPolicyInfo(),
		"acl policy delete":      m.aclDelete("acl policy delete", "an ACL policy", "a policy name", (*client.ACL).DeletePolicy),
		"acl role":               nil,
		"acl role create":        &aclRoleWriteCommand{m: m, create: true},
		"acl role update":        &aclRoleWriteCommand{m: m},
		"acl role list":          m.aclRoleList(),
		"acl role info":          m.aclRoleInfo(),
		"acl role delete":        m.aclDelete("acl role delete", "an ACL role", "a role name", (*client.ACL).DeleteRole),
		"acl token":              nil,
		"acl token create":       &aclTokenCreateCommand{m: m},
		"acl token update":       &aclTokenUpdateCommand{m: m},
		"acl token list":         m.aclTokenList(),
		"acl token info":         m.aclTokenInfo(),
		"acl token self":         &aclTokenSelfCommand{m: m},
		"acl token delete":       m.aclDelete("acl token delete", "an ACL token", "an accessor ID", (*client.ACL).DeleteToken),
		"acl auth-method":        nil,
		"acl auth-method create": &aclAuthMethodWriteCommand{m: m, create: true},
		"acl auth-method update": &aclAuthMethodWriteCommand{m: m},
		"acl auth-method list":   m.aclAuthMethodList(),
		"acl auth-method info":   m.aclAuthMethodInfo(),
		"acl auth-method delete": m.aclDelete("acl auth-method delete", "an SSO auth method and its binding rules", "a name",
			(*client.ACL).DeleteAuthMethod),
		"acl binding-rule":        nil,
		"acl binding-rule create": &aclBindingRuleCreateCommand{m: m},
		"acl binding-rule update": &aclBindingRuleUpdateCommand{m: m},
		"acl binding-rule list":   m.aclBindingRuleList(),
		"acl binding-rule info":   m.aclBindingRuleInfo(),
		"acl binding-rule delete": m.aclDelete("acl binding-rule delete", "a binding rule", "a rule ID", (*client.ACL).DeleteBindingRule),
		"login":                   &loginCommand{m: m},
	}
}

// groupSynopses maps the name of every group of commands to its synopsis.
func groupSynopses() map[string]string {
	return map[string]string{
		"deployment":        "List, inspect, approve, reject and promote deployments",
		"cluster":           "List the Nomad clusters Nops deploys to",
		"job":               "Show a managed job; retry, pause, resume or deploy it now",
		"window":            "Manage sync windows",
		"repo":              "Show and refresh git repositories",
		"notify":            "Show the notification outbox and targets; send a test message",
		"operator":          "Operate the cluster: Raft peers, snapshots and gossip keys",
		"operator raft":     "List and change the Raft peers",
		"operator snapshot": "Save, restore and inspect snapshots of the state",
		"operator gossip":   "Manage the gossip encryption keys",
		"server":            "List the servers of the cluster's gossip",
		"tls":               "Create a CA and certificates for TLS",
		"tls ca":            "Create a certificate authority",
		"tls cert":          "Create certificates signed by the CA",
		"acl":               "Manage ACL tokens, policies, roles and SSO",
		"acl policy":        "Manage ACL policies",
		"acl role":          "Manage ACL roles",
		"acl token":         "Manage ACL tokens",
		"acl auth-method":   "Manage SSO auth methods",
		"acl binding-rule":  "Manage the binding rules of SSO logins",

		"operator autopilot": "Show and change autopilot: server health, promotion and cleanup",
	}
}

func (m *runner) run(ctx context.Context, args []string) int {
	cmds := m.commands()
	if len(args) == 0 {
		fmt.Fprint(m.stdout, m.usage(cmds))
		return exitOK
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(m.stdout, m.usage(cmds))
		return exitOK
	case "-v", "-version", "--version":
		return cmds["version"].Run(ctx, nil)
	case "help":
		if len(args) == 1 {
			fmt.Fprint(m.stdout, m.usage(cmds))
			return exitOK
		}
		name := strings.Join(args[1:], " ")
		c, ok := cmds[name]
		if !ok {
			fmt.Fprintf(m.stderr, "Error: unknown command %q\n\n%s", name, m.usage(cmds))
			return exitUsage
		}
		fmt.Fprint(m.stdout, c.Help())
		return exitOK
	}
	globals, args := leadingAPIFlags(args)
	name, rest := lookup(cmds, args)
	if len(globals) > 0 {
		rest = append(globals, rest...)
	}
	if name == "" {
		if len(args) == 0 {
			fmt.Fprintf(m.stderr, "Error: API options must be followed by a command\n\n%s", m.usage(cmds))
			return exitUsage
		}
		fmt.Fprintf(m.stderr, "Error: unknown command %q\n\n%s", args[0], m.usage(cmds))
		return exitUsage
	}
	return cmds[name].Run(ctx, rest)
}

// leadingAPIFlags splits off the API flags given before the command
// (nops -address=X status), which are then handed to the command.
func leadingAPIFlags(args []string) (flags, rest []string) {
	for len(args) > 0 {
		a := args[0]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			break
		}
		switch name {
		case "json":
			flags, args = append(flags, a), args[1:]
		case "address", "token", "ca-cert", "client-cert", "client-key", "tls-server-name":
			if hasValue || len(args) < 2 {
				flags, args = append(flags, a), args[1:]
			} else {
				flags, args = append(flags, a, args[1]), args[2:]
			}
		default:
			return flags, args
		}
	}
	return flags, args
}

// lookup finds the longest command name that args start with.
func lookup(cmds map[string]command, args []string) (string, []string) {
	for n := len(args); n > 0; n-- {
		if strings.HasPrefix(args[n-1], "-") {
			continue
		}
		name := strings.Join(args[:n], " ")
		if _, ok := cmds[name]; ok {
			return name, args[n:]
		}
	}
	return "", args
}

func (m *runner) usage(cmds map[string]command) string {
	var b strings.Builder
	b.WriteString(`Usage: nops <command> [options] [args]

  Nops continuously deploys Nomad jobs from git. "nops serve" runs a server;
  the other commands talk to a server's HTTP API.

Commands:
`)
	tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	for _, name := range sortedNames(cmds, "") {
		fmt.Fprintf(tw, "    %s\t%s\n", name, cmds[name].Synopsis())
	}
	tw.Flush()
	b.WriteString(`
Run "nops <command> -h" for the options of a command, "nops <command>" for
the subcommands of a group.
`)
	return b.String()
}

// sortedNames returns the names of the direct subcommands of prefix ("" for
// the top level), sorted.
func sortedNames(cmds map[string]command, prefix string) []string {
	var out []string
	for name := range cmds {
		rest := name
		if prefix != "" {
			var ok bool
			rest, ok = strings.CutPrefix(name, prefix+" ")
			if !ok {
				continue
			}
		}
		if !strings.Contains(rest, " ") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// groupCommand is a command that only has subcommands.
type groupCommand struct {
	m        *runner
	name     string
	synopsis string
	all      map[string]command
}

func (c *groupCommand) Synopsis() string { return c.synopsis }

func (c *groupCommand) Help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: nops %s <subcommand> [options] [args]\n\n  %s.\n\nSubcommands:\n", c.name, c.synopsis)
	tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	for _, name := range sortedNames(c.all, c.name) {
		fmt.Fprintf(tw, "    %s\t%s\n", strings.TrimPrefix(name, c.name+" "), c.all[name].Synopsis())
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nRun \"nops %s <subcommand> -h\" for the options of a subcommand.\n", c.name)
	return b.String()
}

func (c *groupCommand) Run(_ context.Context, args []string) int {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprint(c.m.stdout, c.Help())
		return exitOK
	}
	fmt.Fprintf(c.m.stderr, "Error: unknown subcommand %q of nops %s\n\n%s", args[0], c.name, c.Help())
	return exitUsage
}

func isHelpFlag(s string) bool {
	switch s {
	case "-h", "-help", "--help":
		return true
	}
	return false
}

// apiFlags are the flags of every command that talks to the API.
type apiFlags struct {
	address string
	token   string
	json    bool
	tls     client.TLSConfig
}

const apiFlagsHelp = `
API options:

  -address=<url>
    The address of a Nops server's HTTP API. Env: NOPS_ADDR.
    Default: http://127.0.0.1:4650.

  -token=<token>
    The ACL token sent with every request. Env: NOPS_TOKEN.

  -ca-cert=<path>
    PEM CA certificate to verify the server's certificate (https://).
    Env: NOPS_CACERT.

  -client-cert=<path>, -client-key=<path>
    PEM client certificate and key, for a server with verify_incoming.
    Env: NOPS_CLIENT_CERT, NOPS_CLIENT_KEY.

  -tls-server-name=<name>
    The name to check in the server's certificate, when the address is not
    in it (server.<region>.nops). Env: NOPS_TLS_SERVER_NAME.

  -json
    Print the API's JSON instead of a table.
`

func (f *apiFlags) register(m *runner, fs *flag.FlagSet) {
	addr, _ := m.lookupEnv(EnvAddress)
	token, _ := m.lookupEnv(EnvToken)
	fs.StringVar(&f.address, "address", addr, "")
	fs.StringVar(&f.token, "token", token, "")
	fs.BoolVar(&f.json, "json", false, "")
	f.registerTLS(m, fs)
}

// client returns an API client for the flags.
func (m *runner) client(f *apiFlags) (*client.Client, error) {
	cfg := client.Config{Address: f.address, Token: f.token}
	if !f.tls.IsEmpty() {
		cfg.TLS = &f.tls
	}
	return client.New(cfg)
}

// newFlagSet returns an empty flag set that reports errors to its caller
// only.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args with fs, allowing flags after positional arguments,
// and checks the number of positional arguments (max < 0: no bound). When
// ok is false the command returns code: 0 after -h, 2 on a usage error.
func (m *runner) parse(c command, fs *flag.FlagSet, args []string, min, max int, argsDesc string) (pos []string, code int, ok bool) {
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(m.stdout, c.Help())
		return nil, exitOK, false
	}
	if err == nil && (len(pos) < min || (max >= 0 && len(pos) > max)) {
		switch {
		case max == 0:
			err = fmt.Errorf("this command takes no arguments, got %q", strings.Join(pos, " "))
		case len(pos) < min:
			err = fmt.Errorf("missing argument: %s", argsDesc)
		default:
			err = fmt.Errorf("too many arguments: want %s, got %q", argsDesc, strings.Join(pos, " "))
		}
	}
	if err != nil {
		return nil, m.usageError(c, err), false
	}
	return pos, exitOK, true
}

// usageError prints err and the command's usage on stderr and returns 2.
func (m *runner) usageError(c command, err error) int {
	fmt.Fprintf(m.stderr, "Error: %v\n\n%s", err, c.Help())
	return exitUsage
}

// parseInterspersed parses flags anywhere in args, up to a "--", and
// returns the positional arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// fail prints err on stderr and returns 1. An API error lists every problem
// the server found.
func (m *runner) fail(err error) int {
	var ae *client.APIError
	var ue *client.UnreachableError
	switch {
	case errors.As(err, &ae) && len(ae.Problems) > 1:
		fmt.Fprintf(m.stderr, "Error: the server refused the request (HTTP %d):\n", ae.StatusCode)
		for _, p := range ae.Problems {
			fmt.Fprintf(m.stderr, "  * %s\n", p)
		}
	case errors.As(err, &ue):
		fmt.Fprintf(m.stderr, "Error: %v\n(set -address or %s to the HTTP address of a Nops server)\n", err, EnvAddress)
	default:
		fmt.Fprintf(m.stderr, "Error: %v\n", err)
	}
	return exitError
}

// printJSON prints v as indented JSON on stdout.
func (m *runner) printJSON(v any) int {
	enc := json.NewEncoder(m.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return m.fail(fmt.Errorf("encode JSON: %w", err))
	}
	return exitOK
}

// tabWriter returns a tab writer on stdout; the caller flushes it.
func (m *runner) tabWriter() *tabwriter.Writer {
	return tabwriter.NewWriter(m.stdout, 0, 8, 2, ' ', 0)
}

// kv prints "key = value" lines aligned, in order.
func (m *runner) kv(pairs ...string) {
	tw := m.tabWriter()
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%s\t= %s\n", pairs[i], pairs[i+1])
	}
	tw.Flush()
}
