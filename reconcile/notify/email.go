package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/smtp"
	"strings"
	"time"
)

// Email sends each notification as a plain-text mail over SMTP. It uses
// STARTTLS when the server offers it (and fails when RequireTLS is set and
// it does not), and authenticates with PLAIN when Username is set. The
// Message-ID is derived from the idempotency key, so a mail system that
// de-duplicates by Message-ID delivers a repeated attempt once.
type Email struct {
	Addr       string
	From       string
	To         []string
	Username   string
	Password   string
	RequireTLS bool
	// TLSConfig, when set, is used for STARTTLS (tests trust their own
	// certificate with it).
	TLSConfig *tls.Config
}

var _ Sender = (*Email)(nil)

// errNoStartTLS is returned when TLS is required and the server does not
// offer STARTTLS.
var errNoStartTLS = errors.New("the SMTP server does not offer STARTTLS, and require_tls is set")

// Send mails one message.
func (e *Email) Send(ctx context.Context, m *Message) error {
	host, _, err := net.SplitHostPort(e.Addr)
	if err != nil {
		return fmt.Errorf("smtp address %q: %w", e.Addr, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", e.Addr)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", e.Addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	defer conn.Close()
	// A cancelled context (the server lost leadership) ends the
	// conversation at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", e.Addr, err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); ok {
		cfg := e.TLSConfig
		if cfg == nil {
			cfg = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		}
		if err := c.StartTLS(cfg); err != nil {
			return fmt.Errorf("smtp %s: starttls: %w", e.Addr, err)
		}
	} else if e.RequireTLS {
		return errNoStartTLS
	}
	if e.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", e.Username, e.Password, host)); err != nil {
			return fmt.Errorf("smtp %s: auth: %w", e.Addr, err)
		}
	}
	if err := c.Mail(e.From); err != nil {
		return fmt.Errorf("smtp %s: MAIL FROM: %w", e.Addr, err)
	}
	for _, to := range e.To {
		if err := c.Rcpt(to); err != nil {
			return fmt.Errorf("smtp %s: RCPT TO %s: %w", e.Addr, to, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp %s: DATA: %w", e.Addr, err)
	}
	if _, err := w.Write(e.mail(m)); err != nil {
		return fmt.Errorf("smtp %s: write: %w", e.Addr, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp %s: the server refused the mail: %w", e.Addr, err)
	}
	return c.Quit()
}

// MessageID returns the Message-ID of a notification's mail.
func MessageID(key string) string { return "<" + key + "@nops>" }

// mail renders the message: headers and a plain-text body, CRLF lines.
func (e *Email) mail(m *Message) []byte {
	n := m.Notification
	var b bytes.Buffer
	header := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	header("From", e.From)
	header("To", strings.Join(e.To, ", "))
	header("Subject", mime.QEncoding.Encode("utf-8", "[nops] "+Title(n)))
	header("Date", n.Time.UTC().Format(time.RFC1123Z))
	header("Message-ID", MessageID(m.IdempotencyKey))
	header("X-Nops-Event", n.Kind)
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "8bit")
	b.WriteString("\r\n")
	line := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		// A line that is only a dot would end the DATA; SMTP clients
		// escape it, but keep lines short and CRLF-terminated.
		b.WriteString(strings.ReplaceAll(s, "\n", "\r\n") + "\r\n")
	}
	line("%s", Title(n))
	if n.Message != "" {
		line("")
		line("%s", n.Message)
	}
	line("")
	if k := n.JobKey(); k != "" {
		line("Job:        %s", k)
	}
	if d := n.Deployment; d != nil {
		line("Deployment: %s (%s)", d.ID, d.State)
		line("Commit:     %s", d.Commit)
		if s := d.CommitSubject(); s != "" {
			line("Subject:    %s", s)
		}
		if d.CommitAuthor != "" {
			line("Author:     %s", d.CommitAuthor)
		}
		if d.CommitURL != "" {
			line("Link:       %s", d.CommitURL)
		}
		line("File:       %s:%s", d.Repository, d.File)
		if a := Approvals(d); a != "" {
			line("Approvals:  %s", a)
		}
		if d.Error != "" {
			line("Error:      %s", d.Error)
		}
		if d.DiffSummary != "" {
			line("Diff:       %s", d.DiffSummary)
		}
	}
	if n.Actor != "" {
		line("By:         %s", n.Actor)
	}
	line("When:       %s", n.Time.UTC().Format(time.RFC3339))
	if m.Link != "" {
		line("")
		line("%s", m.Link)
	}
	return b.Bytes()
}
