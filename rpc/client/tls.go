package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSConfig is the TLS of a client of an https:// address. Files are PEM.
type TLSConfig struct {
	// CACert is the CA that signed the server's certificate. Empty means
	// the system's roots.
	CACert string
	// ClientCert and ClientKey are the client certificate presented to a
	// server that verifies incoming certificates; set both or neither.
	ClientCert, ClientKey string
	// ServerName is the name checked in the server's certificate, when it
	// differs from the host of the address (server.<region>.nops).
	ServerName string
}

// IsEmpty reports whether no TLS option is set.
func (t *TLSConfig) IsEmpty() bool {
	return t == nil || *t == TLSConfig{}
}

func (t *TLSConfig) build() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CACert != "" {
		pem, err := os.ReadFile(t.CACert)
		if err != nil {
			return nil, fmt.Errorf("read the CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA certificate %s holds no PEM certificate", t.CACert)
		}
		tc.RootCAs = pool
	}
	if (t.ClientCert == "") != (t.ClientKey == "") {
		return nil, errors.New("set the client certificate and its key together")
	}
	if t.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
