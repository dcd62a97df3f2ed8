package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nops-dev/nops/structs"
)

// Headers of a webhook delivery.
const (
	HeaderSignature   = "X-Nops-Signature-256"
	HeaderIdempotency = "Idempotency-Key"
	HeaderEvent       = "X-Nops-Event"
	HeaderDelivery    = "X-Nops-Delivery"
)

const (
	// errorSnippet bounds the part of a refusing answer quoted in the
	// error: enough for a one-line reason, short enough for a log line.
	errorSnippet = 256
	// maxDrain bounds the rest of an answer read and thrown away, so the
	// connection can be reused without reading an endless body.
	maxDrain = 1 << 20
)

// WebhookPayload is the JSON body of a webhook delivery. It is the same on
// every attempt.
type WebhookPayload struct {
	ID             string                          `json:"id"`
	IdempotencyKey string                          `json:"idempotency_key"`
	Target         string                          `json:"target"`
	Kind           string                          `json:"kind"`
	Title          string                          `json:"title"`
	Time           time.Time                       `json:"time"`
	Object         string                          `json:"object"`
	Namespace      string                          `json:"namespace,omitempty"`
	JobID          string                          `json:"job_id,omitempty"`
	From           string                          `json:"from,omitempty"`
	To             string                          `json:"to,omitempty"`
	Actor          string                          `json:"actor,omitempty"`
	Message        string                          `json:"message,omitempty"`
	Deployment     *structs.NotificationDeployment `json:"deployment,omitempty"`
	Link           string                          `json:"link,omitempty"`
}

// Payload returns the webhook body of a message.
func Payload(m *Message) *WebhookPayload {
	n := m.Notification
	return &WebhookPayload{
		ID: n.ID, IdempotencyKey: m.IdempotencyKey, Target: m.Target, Kind: n.Kind, Title: Title(n), Time: n.Time,
		Object: n.Object, Namespace: n.Namespace, JobID: n.JobID, From: n.From, To: n.To, Actor: n.Actor,
		Message: n.Message, Deployment: n.Deployment, Link: m.Link,
	}
}

// Sign returns the signature header value of a body: "sha256=" and the hex
// HMAC-SHA256 of the body under secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Webhook posts each notification as JSON to a URL. The body is signed
// with HMAC-SHA256 when Secret is set; every attempt carries the same
// Idempotency-Key header. Any 2xx answer accepts the notification.
type Webhook struct {
	URL    string
	Secret string
	Client *http.Client
}

var _ Sender = (*Webhook)(nil)

// Send posts one message.
func (w *Webhook) Send(ctx context.Context, m *Message) error {
	body, err := json.Marshal(Payload(m))
	if err != nil {
		return fmt.Errorf("encode webhook body: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "nops-notify")
	req.Header.Set(HeaderIdempotency, m.IdempotencyKey)
	req.Header.Set(HeaderEvent, m.Notification.Kind)
	req.Header.Set(HeaderDelivery, m.Notification.ID)
	if w.Secret != "" {
		req.Header.Set(HeaderSignature, Sign(w.Secret, body))
	}
	return doPost(w.Client, req)
}

// doPost sends a request and turns any answer but 2xx into an error that
// names the status and the start of the body.
func doPost(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req)
	if err != nil {
		// The URL may carry a secret (a Slack webhook path): name only the
		// host.
		return fmt.Errorf("post to %s: %w", req.URL.Host, unwrapURLError(err))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorSnippet))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered HTTP %d: %s", req.URL.Host, resp.StatusCode, bytes.TrimSpace(snippet))
	}
	return nil
}

// unwrapURLError drops the *url.Error wrapper, whose message repeats the
// full URL.
func unwrapURLError(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && u.Unwrap() != nil {
		return u.Unwrap()
	}
	return err
}
