// Package configcheck is `nops serve -validate`: it checks a server's
// configuration the way `nops serve` would start with it, and says what the
// server would run with, without starting one.
//
// Guarantee: exit status 0 means the configuration loaded and passed
// validation (config.Load) and the TLS certificate, key and CA files load
// and could serve the ports they are set for (agent.CheckTLSFiles) — the
// same checks, by the same code, that stop a server at start. Nothing is
// written, no port is opened and no other server, Nomad or git repository
// is contacted, so problems only a running server meets (an unreachable
// Nomad, a refused token) are not found here.
package configcheck

import (
	"crypto/x509"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
)

// Run checks cfg, which config.Load returned, writes a summary to stdout
// or the problem to stderr, and returns the exit status: 0 valid, 1 not.
func Run(cfg *config.Config, stdout, stderr io.Writer) int {
	leaf, err := agent.CheckTLSFiles(cfg.TLS, cfg.Region)
	if err != nil {
		fmt.Fprintf(stderr, "Error: the configuration is not valid: %v\n", err)
		return 1
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stdout, "Warning: %s\n", w)
	}
	fmt.Fprintln(stdout, "Configuration is valid.")
	for _, kv := range summary(cfg, leaf) {
		fmt.Fprintf(stdout, "%22s: %s\n", kv[0], kv[1])
	}
	return 0
}

// summary lists what the server would run with.
func summary(cfg *config.Config, leaf *x509.Certificate) [][2]string {
	onOff := func(on bool) string {
		if on {
			return "on"
		}
		return "off"
	}
	dataDir := cfg.DataDir
	if dataDir == "" {
		dataDir = "(temporary, -dev)"
	}
	gossip := "encrypted"
	if cfg.Encrypt == "" {
		gossip = "in the clear"
	}
	var tlsOn []string
	if cfg.TLS.HTTP {
		tlsOn = append(tlsOn, "http")
	}
	if cfg.TLS.RPC {
		tlsOn = append(tlsOn, "rpc")
	}
	tlsText := "off"
	if leaf != nil {
		tlsText = fmt.Sprintf("%s; certificate %s, valid until %s", strings.Join(tlsOn, " and "),
			leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	var repos []string
	for _, r := range cfg.Repositories {
		repos = append(repos, r.Name)
	}
	return [][2]string{
		{"Node", cfg.NodeName},
		{"Region", cfg.Region},
		{"Data dir", dataDir},
		{"Bootstrap expect", fmt.Sprint(cfg.BootstrapExpect)},
		{"Ports (http/rpc/serf)", fmt.Sprintf("%d/%d/%d", cfg.HTTPPort, cfg.RPCPort, cfg.SerfPort)},
		{"TLS", tlsText},
		{"ACLs", onOff(cfg.ACL.Enabled)},
		{"Gossip", gossip},
		{"Repositories", fmt.Sprintf("%d %s", len(repos), strings.Join(repos, ", "))},
	}
}
