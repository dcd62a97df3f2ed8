package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// checkBlockKit checks a Slack message body against the shape of Block
// Kit: a fallback text and blocks of type section, context or actions,
// whose text objects are mrkdwn or plain_text within Slack's limits, and
// whose buttons carry plain_text labels and URLs. It returns the URLs of
// the buttons.
func checkBlockKit(t *testing.T, raw []byte) []string {
	t.Helper()
	var msg map[string]any
	if err := json.Unmarshal(raw, &msg); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if s, _ := msg["text"].(string); s == "" {
		t.Error("no fallback text")
	}
	blocks, ok := msg["blocks"].([]any)
	if !ok || len(blocks) == 0 || len(blocks) > 50 {
		t.Fatalf("blocks: %v", msg["blocks"])
	}
	textObject := func(where string, v any, types ...string) {
		o, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: not a text object: %v", where, v)
			return
		}
		typ, _ := o["type"].(string)
		txt, _ := o["text"].(string)
		if !contains(types, typ) {
			t.Errorf("%s: text type %q, want one of %v", where, typ, types)
		}
		if txt == "" || len([]rune(txt)) > 3000 {
			t.Errorf("%s: text of %d characters", where, len([]rune(txt)))
		}
	}
	var urls []string
	for i, b := range blocks {
		block := b.(map[string]any)
		where := fmt.Sprintf("block %d", i)
		// elements are the block's elements, of which it must have 1 to most.
		elements := func(most int) []any {
			els, _ := block["elements"].([]any)
			if len(els) == 0 || len(els) > most {
				t.Errorf("%s: %d %s elements", where, len(els), block["type"])
			}
			return els
		}
		switch block["type"] {
		case "section":
			_, hasText := block["text"]
			fields, hasFields := block["fields"].([]any)
			if !hasText && !hasFields {
				t.Errorf("%s: a section needs text or fields", where)
			}
			if hasText {
				textObject(where+" text", block["text"], "mrkdwn", "plain_text")
			}
			if len(fields) > 10 {
				t.Errorf("%s: %d fields, at most 10", where, len(fields))
			}
			for j, f := range fields {
				textObject(fmt.Sprintf("%s field %d", where, j), f, "mrkdwn", "plain_text")
			}
		case "context":
			for j, e := range elements(10) {
				textObject(fmt.Sprintf("%s element %d", where, j), e, "mrkdwn", "plain_text")
			}
		case "actions":
			for j, e := range elements(25) {
				el := e.(map[string]any)
				if el["type"] != "button" {
					t.Errorf("%s element %d: type %v", where, j, el["type"])
				}
				textObject(fmt.Sprintf("%s button %d", where, j), el["text"], "plain_text")
				u, _ := el["url"].(string)
				if u == "" {
					t.Errorf("%s button %d: no url", where, j)
				}
				if s, ok := el["style"]; ok && s != "primary" && s != "danger" {
					t.Errorf("%s button %d: style %v", where, j, s)
				}
				urls = append(urls, u)
			}
		default:
			t.Errorf("%s: type %v is not section, context or actions", where, block["type"])
		}
	}
	return urls
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func pendingNotification() *structs.Notification {
	return &structs.Notification{
		ID: structs.NotificationID(42, 0), Kind: structs.NotifyPendingApproval, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Object: "d-1", Namespace: "default", JobID: "web", Actor: "nops", Message: "waits for <approval> & review",
		Deployment: &structs.NotificationDeployment{ID: "d-1", Repository: "infra", Commit: "0123456789abcdef", File: "jobs/web.nomad.hcl",
			State: "pending_approval", DiffSummary: "+/- Job: \"web\"; +/- Count: \"1\" => \"2\"",
			CommitMessage: "Bump web to <v2>\n\nThe body.", CommitAuthor: "Ada Lovelace <ada@example.com>",
			CommitTime: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), CommitURL: "https://git.example.com/ops/jobs/commit/0123456789abcdef"},
	}
}

func TestSlackBlockKitShape(t *testing.T) {
	m := &notify.Message{Notification: pendingNotification(), Target: "chat", IdempotencyKey: "k",
		Link: "https://nops.example.com/ui/deployment/d-1"}
	raw, err := json.Marshal(notify.SlackPayload(m))
	if err != nil {
		t.Fatal(err)
	}
	urls := checkBlockKit(t, raw)
	if len(urls) != 1 || urls[0] != m.Link {
		t.Errorf("button URLs %v", urls)
	}
	for _, want := range []string{"`default/web`", "<https://git.example.com/ops/jobs/commit/0123456789abcdef|`01234567`> Bump web to &lt;v2&gt;",
		"*Author*\\nAda Lovelace &lt;ada@example.com&gt;", "waits for &lt;approval&gt; &amp; review", "Review and approve", "Count"} {
		if !strings.Contains(strings.NewReplacer(`\u0026`, "&", `\u003c`, "<", `\u003e`, ">").Replace(string(raw)), want) {
			t.Errorf("message lacks %q: %s", want, raw)
		}
	}
	// A long error is cut to Slack's limits, and no link means no button.
	n := pendingNotification()
	n.Kind = structs.NotifyFailed
	n.Deployment.Error = strings.Repeat("x", 5000)
	n.Message = strings.Repeat("y", 5000)
	raw, _ = json.Marshal(notify.SlackPayload(&notify.Message{Notification: n}))
	if urls := checkBlockKit(t, raw); len(urls) != 0 {
		t.Errorf("buttons without a link: %v", urls)
	}
}

// TestWebhookPayloadCarriesTheCommit: a webhook body tells the
// deployment's commit: message, author, time and link.
func TestWebhookPayloadCarriesTheCommit(t *testing.T) {
	raw, err := json.Marshal(notify.Payload(&notify.Message{Notification: pendingNotification(), Target: "hook"}))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Deployment map[string]any `json:"deployment"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"commit_message": "Bump web to <v2>\n\nThe body.", "commit_author": "Ada Lovelace <ada@example.com>",
		"commit_time": "2026-01-02T03:00:00Z", "commit_url": "https://git.example.com/ops/jobs/commit/0123456789abcdef",
	} {
		if got, _ := body.Deployment[k].(string); got != want {
			t.Errorf("deployment.%s = %q, want %q", k, got, want)
		}
	}
}

// slackAPI is a stand-in for Slack's chat.postMessage: it checks the bot
// token and answers as Slack does, {"ok":true} or {"ok":false,"error":...}.
type slackAPI struct {
	mu     sync.Mutex
	bodies [][]byte
	auth   []string
}

func (s *slackAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer xoxb-good" {
		_, _ = w.Write([]byte(`{"ok":false,"error":"invalid_auth"}`))
		return
	}
	_, _ = w.Write([]byte(`{"ok":true,"channel":"C1","ts":"1.2"}`))
}

func TestSlackBotAndWebhook(t *testing.T) {
	api := &slackAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	m := &notify.Message{Notification: pendingNotification(), Target: "chat"}
	ctx := context.Background()
	bot := &notify.Slack{WebhookURL: srv.URL, Token: "xoxb-good", Channel: "#deploys", Client: srv.Client()}
	if err := bot.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Channel string `json:"channel"`
	}
	_ = json.Unmarshal(api.bodies[0], &body)
	if body.Channel != "#deploys" {
		t.Errorf("channel %q", body.Channel)
	}
	checkBlockKit(t, api.bodies[0])
	bad := &notify.Slack{WebhookURL: srv.URL, Token: "xoxb-bad", Channel: "#deploys", Client: srv.Client()}
	if err := bad.Send(ctx, m); err == nil || !strings.Contains(err.Error(), "invalid_auth") {
		t.Errorf("bad token: %v", err)
	}
	if err := bad.Send(ctx, m); err != nil && strings.Contains(err.Error(), "xoxb-bad") {
		t.Errorf("the error shows the token: %v", err)
	}

	// An incoming webhook: the whole URL is the secret, and errors name
	// only the host.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/services/T000/B000/XXXX" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("no_service"))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(hook.Close)
	in := &notify.Slack{WebhookURL: hook.URL + "/services/T000/B000/XXXX", Client: hook.Client()}
	if err := in.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	wrong := &notify.Slack{WebhookURL: hook.URL + "/services/T000/B000/YYYY", Client: hook.Client()}
	if err := wrong.Send(ctx, m); err == nil || strings.Contains(err.Error(), "YYYY") || !strings.Contains(err.Error(), "404") {
		t.Errorf("wrong webhook: %v", err)
	}
}

// TestSlackThroughServer has a server deliver a pending approval to a
// Slack target through its outbox, with the approve link.
func TestSlackThroughServer(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(hook.Close)
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(),
		nopstest.WithConfig(func(c *config.Config) { c.UIURL = "https://nops.example.com" }),
		withTarget(config.NotifyConfig{Name: "chat", Kind: config.NotifyKindSlack, URL: hook.URL,
			Events: []string{structs.NotifyPendingApproval}}))
	d := s.CreatePending("default", "web")
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 1, fmt.Errorf("%d messages", len(bodies))
	})
	mu.Lock()
	raw := bodies[0]
	mu.Unlock()
	if urls := checkBlockKit(t, raw); len(urls) != 1 || urls[0] != "https://nops.example.com/ui/deployment/"+d.ID {
		t.Errorf("button URLs %v", urls)
	}
}

// TestApprovalNotifications checks what the notifications of SPEC section
// 20 say: one approval of several counts them and names who approved,
// in the title, the Slack fields and the webhook JSON; an expiry says so.
func TestApprovalNotifications(t *testing.T) {
	n := pendingNotification()
	n.Kind, n.Actor, n.Message = structs.NotifyApproval, "alice", "approved by alice: 1 of 2 approvals"
	n.Deployment.Approvals, n.Deployment.ApprovalsRequired = []string{"alice"}, 2
	if got := notify.Title(n); got != "Deployment of default/web approved by alice: 1 of 2 approvals" {
		t.Errorf("title %q", got)
	}
	raw, err := json.Marshal(notify.SlackPayload(&notify.Message{Notification: n}))
	if err != nil {
		t.Fatal(err)
	}
	checkBlockKit(t, raw)
	if !strings.Contains(string(raw), `*Approvals*\n1 of 2: alice`) {
		t.Errorf("Slack message lacks the approvals: %s", raw)
	}
	hook, err := json.Marshal(notify.Payload(&notify.Message{Notification: n}))
	if err != nil || !strings.Contains(string(hook), `"approvals":["alice"],"approvals_required":2`) {
		t.Errorf("webhook JSON lacks the approvals (%v): %s", err, hook)
	}
	n.Kind = structs.NotifyExpired
	if got := notify.Title(n); got != "Deployment of default/web expired waiting for approval" {
		t.Errorf("title %q", got)
	}
	// A deployment that needs no approval says nothing of approvals.
	n.Deployment.ApprovalsRequired, n.Deployment.Approvals = 0, nil
	if got := notify.Approvals(n.Deployment); got != "" {
		t.Errorf("approvals of a deployment without the approval policy: %q", got)
	}
}
