package nopstest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/agent/tlsutil"
)

// GossipKey is the serf encryption key of test servers.
const GossipKey = "bA4zCJuKvHSnNdOXwWWDJnHfB6yGcfBCGxIMzoj0QYU="

// TLSFiles is a test PKI written to a temporary directory: a CA, a server
// certificate for server.<region>.nops and 127.0.0.1, and a CLI
// certificate.
type TLSFiles struct {
	Dir    string
	Region string
	CA     *tlsutil.CA

	CAFile                        string
	ServerCertFile, ServerKeyFile string
	CLICertFile, CLIKeyFile       string
}

// NewTLS creates a CA and the server and CLI certificates of region
// (DefaultRegion when empty) in a temporary directory.
func NewTLS(t testing.TB, region string) *TLSFiles {
	t.Helper()
	if region == "" {
		region = config.DefaultRegion
	}
	ca, err := tlsutil.NewCA(tlsutil.CAOptions{})
	if err != nil {
		t.Fatalf("nopstest: create CA: %v", err)
	}
	f := &TLSFiles{Dir: t.TempDir(), Region: region, CA: ca}
	f.CAFile = f.write(t, "ca.pem", ca.CertPEM)
	f.ServerCertFile, f.ServerKeyFile = f.NewCert(t, tlsutil.CertOptions{Kind: tlsutil.KindServer, Region: region}, "server")
	f.CLICertFile, f.CLIKeyFile = f.NewCert(t, tlsutil.CertOptions{Kind: tlsutil.KindCLI, Region: region}, "cli")
	return f
}

// NewCert writes another certificate of the CA as <name>.pem and
// <name>-key.pem and returns their paths.
func (f *TLSFiles) NewCert(t testing.TB, opts tlsutil.CertOptions, name string) (certFile, keyFile string) {
	t.Helper()
	c, err := f.CA.NewCert(opts)
	if err != nil {
		t.Fatalf("nopstest: create %s certificate: %v", name, err)
	}
	return f.write(t, name+".pem", c.CertPEM), f.write(t, name+"-key.pem", c.KeyPEM)
}

func (f *TLSFiles) write(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(f.Dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ClientConfig returns the TLS configuration of an API client: it trusts
// the CA and presents the CLI certificate.
func (f *TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(f.CLICertFile, f.CLIKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: config.ServerName(f.Region), MinVersion: tls.VersionTLS12}
}

// WithTLS runs the server with mutual TLS on its RPC port (with
// verify_server_hostname) using f's server certificate, and, when http is
// true, serves its HTTP API over TLS with verify_incoming. The server's
// URL and Do follow.
func WithTLS(f *TLSFiles, http bool) Option {
	return func(o *options) {
		o.tls = f
		o.mutate = append(o.mutate, func(c *config.Config) {
			c.Region = f.Region
			c.InsecureRPC = false
			c.TLS = config.TLSConfig{RPC: true, HTTP: http, CAFile: f.CAFile, CertFile: f.ServerCertFile,
				KeyFile: f.ServerKeyFile, VerifyServerHostname: true, VerifyIncoming: http}
		})
	}
}

// RPCConfigFile writes a config file with a tls block for mutual TLS on
// the RPC port (verify_server_hostname on) and returns its path, for
// `nops serve -config`.
func (f *TLSFiles) RPCConfigFile(t testing.TB) string {
	t.Helper()
	hcl := fmt.Sprintf("region = %q\ntls {\n  rpc = true\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n  verify_server_hostname = true\n}\n",
		f.Region, f.CAFile, f.ServerCertFile, f.ServerKeyFile)
	return f.write(t, "tls.hcl", []byte(hcl))
}

// httpClient returns the client of a test server's API.
func httpClient(t testing.TB, cfg *config.Config, f *TLSFiles) *http.Client {
	if !cfg.TLS.HTTP || f == nil {
		return &http.Client{Timeout: 2 * time.Minute}
	}
	return &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: f.ClientConfig(t)}}
}
