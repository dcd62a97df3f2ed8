package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent/config"
)

// Errors of the TLS setup.
var (
	// ErrNoPeerCertificate is a TLS peer that presented no certificate.
	ErrNoPeerCertificate = errors.New("the peer presented no certificate")
	// ErrNotServerCertificate is a peer certificate that the CA signed but
	// that is not a server's: no server authentication usage, or, with
	// verify_server_hostname, not valid for server.<region>.nops.
	ErrNotServerCertificate = errors.New("the peer's certificate is not a server certificate of this region")
)

// tlsMaterial is one load of the certificate, key and CA files.
type tlsMaterial struct {
	cert *tls.Certificate
	// pool is nil when no CA file is configured (HTTP TLS without client
	// verification).
	pool *x509.CertPool
}

// tlsConfigurator builds the TLS configurations of a server from its tls
// block. The certificate and CA are looked up on every handshake, so
// Reload reaches every new connection; connections already open keep the
// certificate they were made with.
//
// The RPC port is always mutual TLS: each side verifies the other's chain
// against the CA and requires a server certificate (server authentication
// usage, and the name server.<region>.nops with verify_server_hostname), so
// a client or CLI certificate of the same CA cannot speak Raft.
type tlsConfigurator struct {
	cfg        config.TLSConfig
	serverName string
	logger     hclog.Logger
	material   atomic.Pointer[tlsMaterial]
}

// newTLSConfigurator loads the files of cfg. It returns nil when neither
// HTTP nor RPC uses TLS.
func newTLSConfigurator(cfg config.TLSConfig, region string, logger hclog.Logger) (*tlsConfigurator, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	c := &tlsConfigurator{cfg: cfg, serverName: config.ServerName(region), logger: logger}
	m, err := c.load()
	if err != nil {
		return nil, err
	}
	c.material.Store(m)
	return c, nil
}

// CheckTLSFiles reads the certificate, key and CA files of cfg as a server
// of region would at start, and returns the error that would stop it, or
// the leaf certificate (nil when neither HTTP nor RPC uses TLS).
func CheckTLSFiles(cfg config.TLSConfig, region string) (*x509.Certificate, error) {
	c, err := newTLSConfigurator(cfg, region, hclog.NewNullLogger())
	if err != nil || c == nil {
		return nil, err
	}
	return c.material.Load().cert.Leaf, nil
}

func (c *tlsConfigurator) load() (*tlsMaterial, error) {
	cert, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load cert_file %s and key_file %s: %w", c.cfg.CertFile, c.cfg.KeyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tls: parse cert_file %s: %w", c.cfg.CertFile, err)
	}
	cert.Leaf = leaf
	m := &tlsMaterial{cert: &cert}
	if c.cfg.CAFile != "" {
		pem, err := os.ReadFile(c.cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: read ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: ca_file %s holds no PEM certificate", c.cfg.CAFile)
		}
		m.pool = pool
		if c.cfg.RPC {
			// A server whose own certificate its peers would refuse
			// could never join: say so at start.
			var intermediates []*x509.Certificate
			for _, der := range cert.Certificate[1:] {
				ic, err := x509.ParseCertificate(der)
				if err != nil {
					return nil, fmt.Errorf("tls: parse the chain of cert_file %s: %w", c.cfg.CertFile, err)
				}
				intermediates = append(intermediates, ic)
			}
			if err := c.verifyServer(leaf, intermediates, pool); err != nil {
				return nil, fmt.Errorf("tls: cert_file %s cannot serve the RPC port: %w", c.cfg.CertFile, err)
			}
		}
	}
	return m, nil
}

// Reload reads the certificate, key and CA files again. On an error the
// material in use stays.
func (c *tlsConfigurator) Reload() error {
	m, err := c.load()
	if err != nil {
		return err
	}
	c.material.Store(m)
	c.logger.Info("reloaded TLS certificates", "cert_file", c.cfg.CertFile, "ca_file", c.cfg.CAFile,
		"not_after", m.cert.Leaf.NotAfter)
	return nil
}

// verifyServer checks that leaf chains to the CA and is a server
// certificate of the region.
func (c *tlsConfigurator) verifyServer(leaf *x509.Certificate, intermediates []*x509.Certificate, pool *x509.CertPool) error {
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, ic := range intermediates {
		opts.Intermediates.AddCert(ic)
	}
	if c.cfg.VerifyServerHostname {
		opts.DNSName = c.serverName
	}
	if _, err := leaf.Verify(opts); err != nil {
		var ie x509.CertificateInvalidError
		var he x509.HostnameError
		if errors.As(err, &he) || errors.As(err, &ie) && ie.Reason == x509.IncompatibleUsage {
			return fmt.Errorf("%w (%s): %w", ErrNotServerCertificate, c.serverName, err)
		}
		return err
	}
	return nil
}

// verifyPeerServer is the VerifyConnection check of both sides of the RPC
// port.
func (c *tlsConfigurator) verifyPeerServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return ErrNoPeerCertificate
	}
	return c.verifyServer(cs.PeerCertificates[0], cs.PeerCertificates[1:], c.material.Load().pool)
}

// rpcServerConfig is the configuration of the RPC port's side of a
// connection.
func (c *tlsConfigurator) rpcServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := c.material.Load()
			return &tls.Config{
				MinVersion:       tls.VersionTLS12,
				Certificates:     []tls.Certificate{*m.cert},
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        m.pool,
				VerifyConnection: c.verifyPeerServer,
			}, nil
		},
	}
}

// rpcClientConfig is the configuration of a server dialing another
// server's RPC port. The peer is verified by verifyPeerServer (chain, usage
// and, with verify_server_hostname, the name), not by its address.
func (c *tlsConfigurator) rpcClientConfig() *tls.Config {
	m := c.material.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*m.cert},
		ServerName:   c.serverName,
		// The chain and name are checked in VerifyConnection: without
		// verify_server_hostname the name is not checked at all, which the
		// standard verification cannot express.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection:   c.verifyPeerServer,
	}
}

// httpServerConfig is the configuration of the HTTP API. With
// verify_incoming a client must present a certificate signed by the CA.
func (c *tlsConfigurator) httpServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := c.material.Load()
			tc := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*m.cert},
				NextProtos:   []string{"http/1.1"},
			}
			if c.cfg.VerifyIncoming {
				tc.ClientAuth = tls.RequireAndVerifyClientCert
				tc.ClientCAs = m.pool
			}
			return tc, nil
		},
	}
}

// wrapHTTPListener caps the connections of the HTTP API's listener ln with
// limit and, when tls.http is set, serves it over TLS, answering a
// plain-HTTP request with a 400 that names the https:// address
// (plainHTTPListener, on the raw connection). It is safe on a nil
// configurator.
func (c *tlsConfigurator) wrapHTTPListener(ln net.Listener, limit func(net.Listener) net.Listener) net.Listener {
	if c == nil || !c.cfg.HTTP {
		return limit(ln)
	}
	return tls.NewListener(limit(plainHTTPListener{ln}), c.httpServerConfig())
}

// httpErrorLog sends the errors of the HTTP server (failed TLS handshakes
// among them) to the server's logger, at debug level: a client that fails
// its handshake is the client's problem, and logging each at a higher level
// would let any client flood the log.
func httpErrorLog(logger hclog.Logger) *log.Logger {
	return logger.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})
}

// forRPC returns the TLS configurator of the RPC port, nil when the RPC
// port is plain TCP. It is safe on a nil configurator.
func (c *tlsConfigurator) forRPC() *tlsConfigurator {
	if c == nil || !c.cfg.RPC {
		return nil
	}
	return c
}

// ReloadTLS reads the TLS certificate, key and CA files again; new
// connections use them. Without TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	return s.tls.Reload()
}

// warnInsecure logs, loudly, every way this server trusts its network.
func warnInsecure(cfg *config.Config, logger hclog.Logger) {
	if cfg.Dev {
		return
	}
	if !cfg.TLS.RPC {
		logger.Warn("RPC TLS IS DISABLED (insecure_rpc): the RPC port is plain TCP without authentication, and anyone who can reach it controls the cluster (joins Raft, rewrites its log, uses the forwarding API); set tls { rpc = true } in production")
	}
	if !cfg.TLS.HTTP {
		logger.Warn("the HTTP API is served without TLS; set tls { http = true } in production")
	}
	if cfg.DisableGossipEncryption {
		logger.Warn("GOSSIP ENCRYPTION IS DISABLED (disable_gossip_encryption): anyone who can reach the serf port can join the cluster's gossip; set encrypt in production")
	}
}
