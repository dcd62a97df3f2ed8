package config

import (
	"fmt"
	"strings"
	"time"
)

// Usage returns the help text of `nops serve`.
func Usage() string {
	var b strings.Builder
	b.WriteString(`Usage: nops serve [options]

  Runs a Nops server. Servers form a Raft cluster that watches git
  repositories and deploys the Nomad jobs in them.

  Every option can also be set with the environment variable shown, or in
  a config file by its name with underscores (data_dir = "/var/lib/nops").
  A flag wins over the environment, the environment over config files, and
  a later config file over an earlier one.

Options:

  -config=<path>
    Config file (HCL, or JSON when it ends in .json) or directory of them.
    Repeatable; loaded in order. Env: NOPS_CONFIG (comma-separated).

  -repo=<url#branch:path>
    Git repository to watch, named repo, repo-2... Repeatable. Branch
    defaults to main and path to "."; more repositories and credentials go
    in repository blocks of a config file. Env: NOPS_REPO (comma-separated).

  -validate
    Check the configuration, read its TLS certificate, key and CA files,
    print a summary and exit (0 when the server would start with it)
    without starting a server. Command line only.

`)
	def := Default()
	for _, f := range def.fields() {
		arg := "=" + placeholder(f)
		if f.v.isBool() {
			arg = ""
		}
		fmt.Fprintf(&b, "  -%s%s\n", f.name, arg)
		text := f.usage
		d := f.defText
		if d == "" && !f.v.isBool() {
			d = f.v.String()
		}
		if d != "" {
			text += " Default: " + d + "."
		}
		text += " Env: " + f.envName() + "."
		for _, line := range wrap(text, usageWidth) {
			fmt.Fprintf(&b, "    %s\n", line)
		}
		b.WriteString("\n")
	}
	b.WriteString(`Config file blocks:

  repository "name" { url, branch, path, poll_interval, web_url,
                      auth { username, password, password_env, token, token_env,
                             ssh_key_file, ssh_key_passphrase, ssh_key_passphrase_env,
                             ssh_known_hosts_file } }
  consul { address, token, service_name, auto_join }
  acl { enabled, token_ttl }
  tls { http, rpc, ca_file, cert_file, key_file, verify_incoming,
        verify_server_hostname }
  notify "name" { kind = "webhook" | "slack" | "email" | "nomad", url, url_env, secret_env, secret_file,
                  channel, events, namespaces, jobs, give_up_after, retry_initial,
                  retry_max }
  webhook { secret_env }
`)
	return b.String()
}

// placeholder names the argument of a flag in help text.
func placeholder(f field) string {
	switch {
	case f.name == "data-dir":
		return "<path>"
	case f.name == "bind" || f.name == "advertise":
		return "<ip>"
	case f.name == "encrypt":
		return "<key>"
	case f.name == "region":
		return "<name>"
	case f.name == "nomad-addr":
		return "<url>"
	case strings.HasSuffix(f.name, "-port"):
		return "<port>"
	case f.name == "retry-join":
		return "<host:port>"
	}
	switch f.v.(type) {
	case *typed[time.Duration]:
		return "<duration>"
	case *typed[[]string]:
		return "<a,b,...>"
	case *typed[int], *typed[uint64]:
		return "<n>"
	}
	return "<string>"
}

// usageWidth is the width of a flag's usage text: with its indent, a line
// fits an 80-column terminal.
const usageWidth = 72

// wrap splits text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
