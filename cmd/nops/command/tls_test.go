package command

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nops-dev/nops/testutil/nopstest"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(raw)
	if b == nil {
		t.Fatalf("%s is not PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// nops tls ca create and nops tls cert create make a CA and certificates
// that verify as the servers and clients need them, and never overwrite a
// file.
func TestTLS_Create(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	c := newCLI(t, nil)

	mustContain(t, "no CA yet", c.fails(1, "tls", "cert", "create", "-server"), "read the CA certificate", "nops tls ca create")
	mustContain(t, "ca create", c.ok("tls", "ca", "create"), "nops-agent-ca.pem", "nops-agent-ca-key.pem")
	mustContain(t, "ca again", c.fails(1, "tls", "ca", "create"), "already exists")
	if info, err := os.Stat(filepath.Join(dir, "nops-agent-ca-key.pem")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v %v", info, err)
	}
	mustContain(t, "server", c.ok("tls", "cert", "create", "-server", "-additional-ipaddress", "10.0.0.5", "-additional-dnsname", "nops.example.com"),
		"server.global.nops", "global-server-nops.pem")
	mustContain(t, "cli", c.ok("tls", "cert", "create", "-cli", "-region", "eu"), "cli.eu.nops", "eu-cli-nops.pem")
	mustContain(t, "client", c.ok("tls", "cert", "create", "-client"), "client.global.nops")
	mustContain(t, "two kinds", c.fails(2, "tls", "cert", "create", "-server", "-cli"), "exactly one of -server, -client and -cli")
	mustContain(t, "no kind", c.fails(2, "tls", "cert", "create"), "exactly one of")
	mustContain(t, "bad ip", c.fails(2, "tls", "cert", "create", "-server", "-additional-ipaddress", "nope"), `"nope" is not an IP address`)
	mustContain(t, "names on a cli cert", c.fails(1, "tls", "cert", "create", "-cli", "-region", "x", "-additional-dnsname", "a"), "server certificates only")

	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(dir, "nops-agent-ca.pem")))
	server := readCert(t, filepath.Join(dir, "global-server-nops.pem"))
	for _, name := range []string{"server.global.nops", "localhost", "127.0.0.1", "10.0.0.5", "nops.example.com"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("server certificate as a client: %v", err)
	}
	cliCert := readCert(t, filepath.Join(dir, "eu-cli-nops.pem"))
	if _, err := cliCert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("cli certificate as a client: %v", err)
	}
	if _, err := cliCert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a cli certificate verifies as a server")
	}
	if slices.Contains(cliCert.DNSNames, "server.eu.nops") {
		t.Error("a cli certificate names the server")
	}
}

// Every client command speaks TLS to a server with HTTP TLS and
// verify_incoming: by environment or by flags, with the server name
// checked.
func TestCLI_TLS(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	s := nopstest.StartDev(t, nopstest.WithTLS(files, true))
	c := newCLI(t, nil)
	c.env[EnvAddress] = s.URL

	mustContain(t, "no CA", c.fails(1, "operator", "raft", "list-peers"), "certificate")
	c.env[EnvCACert] = files.CAFile
	mustContain(t, "no client certificate", c.fails(1, "operator", "raft", "list-peers"), "certificate")
	c.env[EnvClientCert], c.env[EnvClientKey] = files.CLICertFile, files.CLIKeyFile
	mustContain(t, "by environment", c.ok("operator", "raft", "list-peers"), s.NodeID())

	mustContain(t, "wrong server name", c.fails(1, "operator", "raft", "list-peers", "-tls-server-name", "server.elsewhere.nops"), "server.elsewhere.nops")
	mustContain(t, "server name", c.ok("operator", "raft", "list-peers", "-tls-server-name", "server.global.nops"), s.NodeID())

	flags := newCLI(t, nil)
	mustContain(t, "by flags", flags.ok("-address", s.URL, "-ca-cert", files.CAFile, "-client-cert", files.CLICertFile,
		"-client-key", files.CLIKeyFile, "operator", "raft", "list-peers"), s.NodeID())
	mustContain(t, "TLS options need https", flags.fails(1, "-address", "http://"+s.HTTPAddr(), "-ca-cert", files.CAFile, "status"), "need an https:// address")
	mustContain(t, "cert without key", flags.fails(1, "-address", s.URL, "-client-cert", files.CLICertFile, "status"), "together")
}

// The gossip keyring rotates through the API: install, use, remove; keys
// are shown by fingerprint only.
func TestCLI_GossipKeyring(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newCLI(t, s)

	oldFP := "sha256:" // the fingerprint of nopstest.GossipKey, checked below
	out := c.ok("operator", "gossip", "keyring", "-list")
	if strings.Contains(out, nopstest.GossipKey) {
		t.Fatalf("the key is listed in full:\n%s", out)
	}
	mustContain(t, "list", out, oldFP, "1/1")

	newKey := strings.TrimSpace(c.ok("operator", "gossip", "keygen"))
	if len(newKey) != 44 {
		t.Fatalf("keygen printed %q", newKey)
	}
	mustContain(t, "install", c.ok("operator", "gossip", "keyring", "-install", newKey), "Installed key sha256:", "on 1 of 1 servers")
	var listed struct {
		Keys        map[string]int `json:"keys"`
		PrimaryKeys map[string]int `json:"primary_keys"`
	}
	c.okJSON(&listed, "operator", "gossip", "keyring", "-list", "-json")
	if len(listed.Keys) != 2 || len(listed.PrimaryKeys) != 1 {
		t.Fatalf("after install: %+v", listed)
	}
	mustContain(t, "remove the primary", c.fails(1, "operator", "gossip", "keyring", "-remove", nopstest.GossipKey), "keyring remove")
	mustContain(t, "use", c.ok("operator", "gossip", "keyring", "-use", newKey), "Now using key")
	mustContain(t, "remove the old", c.ok("operator", "gossip", "keyring", "-remove", nopstest.GossipKey), "Removed key")
	listed.Keys, listed.PrimaryKeys = nil, nil
	c.okJSON(&listed, "operator", "gossip", "keyring", "-list", "-json")
	if len(listed.Keys) != 1 || len(listed.PrimaryKeys) != 1 {
		t.Fatalf("after rotation: %+v", listed)
	}
	for fp := range listed.PrimaryKeys {
		if _, ok := listed.Keys[fp]; !ok || strings.Contains(fp, newKey) {
			t.Fatalf("primary %s", fp)
		}
	}
	mustContain(t, "bad key", c.fails(1, "operator", "gossip", "keyring", "-install", "c2hvcnQ="), "decodes to 5 bytes")
	mustContain(t, "two operations", c.fails(2, "operator", "gossip", "keyring", "-list", "-use", newKey), "exactly one of")
}
