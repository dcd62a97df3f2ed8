package notify_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// mailbox is a real SMTP server (go-smtp) that keeps what it receives.
type mailbox struct {
	addr string
	user string
	pass string

	mu    sync.Mutex
	mails []mail
}

type mail struct {
	from   string
	to     []string
	data   string
	tls    bool
	authed bool
}

type mailSession struct {
	box    *mailbox
	conn   *smtp.Conn
	cur    mail
	authed bool
}

func (b *mailbox) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &mailSession{box: b, conn: c}, nil
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != s.box.user || pass != s.box.pass {
			return errors.New("bad credentials")
		}
		s.authed = true
		return nil
	}), nil
}

func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.box.user != "" && !s.authed {
		return &smtp.SMTPError{Code: 530, Message: "authentication required"}
	}
	s.cur.from = from
	return nil
}

func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.cur.to = append(s.cur.to, to)
	return nil
}

func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.data = string(b)
	_, s.cur.tls = s.conn.TLSConnectionState()
	s.cur.authed = s.authed
	s.box.mu.Lock()
	s.box.mails = append(s.box.mails, s.cur)
	s.box.mu.Unlock()
	s.cur = mail{}
	return nil
}

func (s *mailSession) Reset()        { s.cur = mail{} }
func (s *mailSession) Logout() error { return nil }

func (b *mailbox) received() []mail {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]mail(nil), b.mails...)
}

// startMailbox starts an SMTP server on 127.0.0.1; with tlsCfg it offers
// STARTTLS.
func startMailbox(t testing.TB, tlsCfg *tls.Config, user, pass string) *mailbox {
	box := &mailbox{user: user, pass: pass}
	srv := smtp.NewServer(box)
	srv.Domain = "localhost"
	srv.TLSConfig = tlsCfg
	srv.AllowInsecureAuth = tlsCfg == nil
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	box.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return box
}

// selfSigned returns a server TLS config for 127.0.0.1 and a client config
// that trusts it.
func selfSigned(t testing.TB) (server, client *tls.Config) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	server = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	client = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	return server, client
}

func TestEmailStartTLSAndAuth(t *testing.T) {
	serverTLS, clientTLS := selfSigned(t)
	box := startMailbox(t, serverTLS, "nops", "mail-pass")
	e := &notify.Email{Addr: box.addr, From: "nops@example.com", To: []string{"ops@example.com", "dev@example.com"},
		Username: "nops", Password: "mail-pass", RequireTLS: true, TLSConfig: clientTLS}
	n := pendingNotification()
	m := &notify.Message{Notification: n, Target: "mail", IdempotencyKey: n.IdempotencyKey("mail"),
		Link: "https://nops.example.com/ui/deployment/d-1"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	got := box.received()
	if len(got) != 1 {
		t.Fatalf("%d mails", len(got))
	}
	g := got[0]
	if !g.tls || !g.authed || g.from != "nops@example.com" || strings.Join(g.to, ",") != "ops@example.com,dev@example.com" {
		t.Errorf("mail envelope %+v", g)
	}
	for _, want := range []string{"Message-ID: " + notify.MessageID(m.IdempotencyKey), "Subject: [nops] Deployment of default/web waits for approval",
		"Commit:     0123456789abcdef", "Subject:    Bump web to <v2>\r\n", "Author:     Ada Lovelace <ada@example.com>\r\n",
		"Link:       https://git.example.com/ops/jobs/commit/0123456789abcdef\r\n", "Diff:       +/- Job", m.Link, "X-Nops-Event: pending_approval"} {
		if !strings.Contains(g.data, want) {
			t.Errorf("mail lacks %q:\n%s", want, g.data)
		}
	}

	// A wrong password and a server without STARTTLS when TLS is required
	// are errors, and send nothing.
	bad := *e
	bad.Password = "wrong"
	if err := bad.Send(ctx, m); err == nil || !strings.Contains(err.Error(), "auth") {
		t.Errorf("wrong password: %v", err)
	}
	plain := startMailbox(t, nil, "", "")
	noTLS := &notify.Email{Addr: plain.addr, From: "nops@example.com", To: []string{"ops@example.com"}, RequireTLS: true}
	if err := noTLS.Send(ctx, m); err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Errorf("require_tls without STARTTLS: %v", err)
	}
	if len(plain.received()) != 0 || len(box.received()) != 1 {
		t.Error("a refused mail was delivered")
	}
}

// TestEmailThroughServer configures an email target on a server and
// receives the notification of a pause through a real SMTP server.
func TestEmailThroughServer(t *testing.T) {
	box := startMailbox(t, nil, "", "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), withTarget(config.NotifyConfig{
		Name: "mail", Kind: config.NotifyKindEmail, SMTPAddr: box.addr, From: "nops@example.com",
		To: []string{"ops@example.com"}, Events: []string{structs.NotifyPaused},
	}))
	s.Do("POST", "/v1/job/default/web/pause", map[string]string{"reason": "disk full"}, nil)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return len(box.received()) == 1, fmt.Errorf("%d mails", len(box.received()))
	})
	if d := box.received()[0].data; !strings.Contains(d, "Job default/web paused by tester") || !strings.Contains(d, "disk full") {
		t.Errorf("mail:\n%s", d)
	}
}
