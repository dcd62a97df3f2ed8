package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/nops-dev/nops/agent/tlsutil"
)

// Files of `nops tls`, in the current directory as `nomad tls` writes
// them.
const (
	caCertFile = "nops-agent-ca.pem"
	caKeyFile  = "nops-agent-ca-key.pem"
)

// tlsCACreateCommand creates a certificate authority.
type tlsCACreateCommand struct {
	m *runner
}

func (c *tlsCACreateCommand) Synopsis() string { return "Create a certificate authority for TLS" }

func (c *tlsCACreateCommand) Help() string {
	return `Usage: nops tls ca create [options]

  Creates a certificate authority for a quick start with TLS: an ECDSA P-256
  key and a self-signed certificate, written to ` + caCertFile + ` and
  ` + caKeyFile + ` in the current directory. Keep the key secret; the
  servers need only the certificate (ca_file). For production, prefer the
  PKI of your organisation (for example Vault).

Options:

  -days=<n>
    Validity of the certificate in days. Default: ` + fmt.Sprint(tlsutil.DefaultCADays) + `.

  -common-name=<name>
    Common name of the CA. Default: Nops Agent CA <serial>.
`
}

func (c *tlsCACreateCommand) Run(_ context.Context, args []string) int {
	m := c.m
	fs := newFlagSet("tls ca create")
	days := fs.Int("days", tlsutil.DefaultCADays, "")
	cn := fs.String("common-name", "", "")
	if _, code, ok := m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	if *days < 1 {
		return m.usageError(c, fmt.Errorf("-days must be at least 1, got %d", *days))
	}
	ca, err := tlsutil.NewCA(tlsutil.CAOptions{CommonName: *cn, Days: *days})
	if err != nil {
		return m.fail(err)
	}
	if err := writeNew(caCertFile, ca.CertPEM, 0o644, caKeyFile, ca.KeyPEM); err != nil {
		return m.fail(err)
	}
	fmt.Fprintf(m.stdout, "==> CA certificate saved to: %s\n==> CA key saved to: %s\n", caCertFile, caKeyFile)
	return exitOK
}

// tlsCertCreateCommand creates a certificate signed by the CA.
type tlsCertCreateCommand struct {
	m *runner
}

func (c *tlsCertCreateCommand) Synopsis() string { return "Create a server, client or CLI certificate" }

func (c *tlsCertCreateCommand) Help() string {
	return `Usage: nops tls cert create -server|-client|-cli [options]

  Creates a certificate and its key, signed by the CA of "nops tls ca
  create", written to <region>-<kind>-nops.pem and
  <region>-<kind>-nops-key.pem in the current directory.

  A server certificate is for server.<region>.nops, localhost and
  127.0.0.1 (and the names added), with server and client authentication:
  servers present it to each other on the RPC port (mutual TLS) and to API
  clients. Client and CLI certificates (client.<region>.nops,
  cli.<region>.nops) have client authentication only: they open the HTTP
  API of a server with verify_incoming, never its RPC port.

Options:

  -server, -client, -cli
    The kind of certificate. Exactly one is required.

  -ca=<path>, -key=<path>
    The CA certificate and key. Default: ` + caCertFile + `, ` + caKeyFile + `.

  -region=<region>
    The region of the servers. Default: ` + tlsutil.DefaultRegion + `.

  -days=<n>
    Validity in days. Default: ` + fmt.Sprint(tlsutil.DefaultCertDays) + `.

  -additional-dnsname=<name>
    Another DNS name of a server certificate. Repeatable.

  -additional-ipaddress=<ip>
    Another IP address of a server certificate. Repeatable.
`
}

// repeated is a repeatable string flag.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func (c *tlsCertCreateCommand) Run(_ context.Context, args []string) int {
	m := c.m
	fs := newFlagSet("tls cert create")
	server := fs.Bool("server", false, "")
	clientKind := fs.Bool("client", false, "")
	cli := fs.Bool("cli", false, "")
	caPath := fs.String("ca", caCertFile, "")
	keyPath := fs.String("key", caKeyFile, "")
	region := fs.String("region", tlsutil.DefaultRegion, "")
	days := fs.Int("days", tlsutil.DefaultCertDays, "")
	var dnsNames, ipArgs repeated
	fs.Var(&dnsNames, "additional-dnsname", "")
	fs.Var(&ipArgs, "additional-ipaddress", "")
	if _, code, ok := m.parse(c, fs, args, 0, 0, ""); !ok {
		return code
	}
	var kinds []string
	for kind, set := range map[string]bool{tlsutil.KindServer: *server, tlsutil.KindClient: *clientKind, tlsutil.KindCLI: *cli} {
		if set {
			kinds = append(kinds, kind)
		}
	}
	if len(kinds) != 1 {
		return m.usageError(c, errors.New("give exactly one of -server, -client and -cli"))
	}
	if *days < 1 {
		return m.usageError(c, fmt.Errorf("-days must be at least 1, got %d", *days))
	}
	var ips []net.IP
	for _, s := range ipArgs {
		ip := net.ParseIP(s)
		if ip == nil {
			return m.usageError(c, fmt.Errorf("-additional-ipaddress %q is not an IP address", s))
		}
		ips = append(ips, ip)
	}
	caPEM, err := os.ReadFile(*caPath)
	if err != nil {
		return m.fail(fmt.Errorf("read the CA certificate: %w (create one with \"nops tls ca create\")", err))
	}
	keyPEM, err := os.ReadFile(*keyPath)
	if err != nil {
		return m.fail(fmt.Errorf("read the CA key: %w", err))
	}
	ca, err := tlsutil.LoadCA(caPEM, keyPEM)
	if err != nil {
		return m.fail(err)
	}
	cert, err := ca.NewCert(tlsutil.CertOptions{Kind: kinds[0], Region: *region, Days: *days, DNSNames: dnsNames, IPs: ips})
	if err != nil {
		return m.fail(err)
	}
	base := fmt.Sprintf("%s-%s-nops", *region, kinds[0])
	if err := writeNew(base+".pem", cert.CertPEM, 0o644, base+"-key.pem", cert.KeyPEM); err != nil {
		return m.fail(err)
	}
	fmt.Fprintf(m.stdout, "==> Certificate for %s saved to: %s.pem\n==> Key saved to: %s-key.pem\n", cert.Name, base, base)
	return exitOK
}

// writeNew writes a certificate and its key (mode 0600) to files that must
// not exist yet: nothing is overwritten, and nothing is written when either
// exists.
func writeNew(certPath string, cert []byte, certMode os.FileMode, keyPath string, key []byte) error {
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s already exists; remove it or run in another directory", p)
		}
	}
	if err := os.WriteFile(keyPath, key, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", keyPath, err)
	}
	if err := os.WriteFile(certPath, cert, certMode); err != nil {
		return fmt.Errorf("write %s: %w", certPath, err)
	}
	return nil
}

var _ flag.Value = (*repeated)(nil)
