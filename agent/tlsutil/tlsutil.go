// Package tlsutil creates a certificate authority and the certificates
// of servers, API clients and the CLI, for a quick start with TLS
// (`nops tls ca create`, `nops tls cert create`) and for tests, as
// `nomad tls` does.
//
// Guarantee: every key is ECDSA P-256 from crypto/rand; a server
// certificate is valid for server.<region>.nops, localhost, 127.0.0.1 and
// any extra names given, with both server and client authentication (a
// server is a client of its peers); client and CLI certificates have client
// authentication only, so they can never pass for a server on the RPC
// port.
package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Kinds of certificates.
const (
	KindServer = "server"
	KindClient = "client"
	KindCLI    = "cli"
)

// Defaults of the certificates created: a CA that outlives several
// rotations of the certificates it signs, and certificates renewed yearly.
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
	DefaultDomain   = "nops"
	DefaultRegion   = "global"
)

// ErrBadCA is a CA certificate or key that cannot sign.
var ErrBadCA = errors.New("invalid CA")

// CA is a certificate authority: its certificate and key, PEM encoded.
type CA struct {
	CertPEM, KeyPEM []byte
}

// CAOptions configures a new CA.
type CAOptions struct {
	// CommonName defaults to "Nops Agent CA <serial>".
	CommonName string
	// Days defaults to DefaultCADays.
	Days int
}

// NewCA creates a self-signed CA.
func NewCA(opts CAOptions) (*CA, error) {
	k, err := newKey("CA key")
	if err != nil {
		return nil, err
	}
	cn := opts.CommonName
	if cn == "" {
		cn = fmt.Sprintf("Nops Agent CA %d", k.serial)
	}
	tmpl := k.template(cn, opts.Days, DefaultCADays)
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = true
	tmpl.AuthorityKeyId = k.ski
	certPEM, keyPEM, err := k.sign("CA certificate", tmpl, tmpl, k.key)
	if err != nil {
		return nil, err
	}
	return &CA{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// CertOptions configures a new certificate.
type CertOptions struct {
	// Kind is KindServer, KindClient or KindCLI.
	Kind string
	// Region defaults to DefaultRegion, Domain to DefaultDomain; the
	// certificate is for <kind>.<region>.<domain>.
	Region, Domain string
	// DNSNames and IPs are added to a server certificate's names.
	DNSNames []string
	IPs      []net.IP
	// Days defaults to DefaultCertDays.
	Days int
}

// Cert is a certificate and its key, PEM encoded.
type Cert struct {
	CertPEM, KeyPEM []byte
	// Name is the certificate's main name, <kind>.<region>.<domain>.
	Name string
}

// NewCert creates a certificate signed by ca.
func (ca *CA) NewCert(opts CertOptions) (*Cert, error) {
	caCert, caKey, err := ca.parse()
	if err != nil {
		return nil, err
	}
	region, domain := opts.Region, opts.Domain
	if region == "" {
		region = DefaultRegion
	}
	if domain == "" {
		domain = DefaultDomain
	}
	name := opts.Kind + "." + region + "." + domain
	var usage []x509.ExtKeyUsage
	dns := []string{name}
	var ips []net.IP
	switch opts.Kind {
	case KindServer:
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		dns = append(dns, "localhost")
		dns = append(dns, opts.DNSNames...)
		ips = append([]net.IP{net.IPv4(127, 0, 0, 1)}, opts.IPs...)
	case KindClient, KindCLI:
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if len(opts.DNSNames) > 0 || len(opts.IPs) > 0 {
			return nil, fmt.Errorf("extra names are for server certificates only")
		}
	default:
		return nil, fmt.Errorf("unknown certificate kind %q: must be %s, %s or %s", opts.Kind, KindServer, KindClient, KindCLI)
	}
	k, err := newKey("key")
	if err != nil {
		return nil, err
	}
	tmpl := k.template(name, opts.Days, DefaultCertDays)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.ExtKeyUsage = usage
	tmpl.DNSNames = dns
	tmpl.IPAddresses = ips
	tmpl.AuthorityKeyId = caCert.SubjectKeyId
	certPEM, keyPEM, err := k.sign("certificate", tmpl, caCert, caKey)
	if err != nil {
		return nil, err
	}
	return &Cert{CertPEM: certPEM, KeyPEM: keyPEM, Name: name}, nil
}

// LoadCA decodes a CA from its PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	ca := &CA{CertPEM: certPEM, KeyPEM: keyPEM}
	if _, _, err := ca.parse(); err != nil {
		return nil, err
	}
	return ca, nil
}

func (ca *CA) parse() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(ca.CertPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%w: the CA certificate is not a PEM certificate", ErrBadCA)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: certificate: %w", ErrBadCA, err)
	}
	if !cert.IsCA {
		return nil, nil, fmt.Errorf("%w: the certificate is not a CA", ErrBadCA)
	}
	kb, _ := pem.Decode(ca.KeyPEM)
	if kb == nil {
		return nil, nil, fmt.Errorf("%w: the CA key is not PEM", ErrBadCA)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: key: %w", ErrBadCA, err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, fmt.Errorf("%w: the key does not match the certificate", ErrBadCA)
	}
	return cert, key, nil
}

// certKey is a new key, with the serial number and subject key ID of the
// certificate to be made for it.
type certKey struct {
	key    *ecdsa.PrivateKey
	serial *big.Int
	ski    []byte
}

// newKey generates a key; what names it in the error.
func newKey(what string) (*certKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate %s: %w", what, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	ski, err := keyID(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	return &certKey{key: key, serial: serial, ski: ski}, nil
}

// template returns the certificate of k for the common name cn, valid from
// a minute ago (clock skew) for days, or defDays when days is not positive.
func (k *certKey) template(cn string, days, defDays int) *x509.Certificate {
	if days <= 0 {
		days = defDays
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: k.serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.AddDate(0, 0, days),
		SubjectKeyId: k.ski,
	}
}

// sign has parentKey sign tmpl, issued by parent, and returns the
// certificate and k's key, PEM encoded; what names the certificate in the
// error.
func (k *certKey) sign(what string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", what, err)
	}
	keyPEM, err = encodeKey(k.key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// serialBits is the size of a random serial number: RFC 5280 allows up to
// 20 octets, and 128 bits never collide.
const serialBits = 128

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), serialBits))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n, nil
}

func keyID(pub *ecdsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	sum := sha256.Sum256(der)
	// 20 bytes, the length of the SHA-1 key identifier of RFC 5280.
	return sum[:20], nil
}
