package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nops-dev/nops/structs"
)

// SlackAPIURL is the Web API method a bot token posts to.
const SlackAPIURL = "https://slack.com/api/chat.postMessage"

// Slack posts each notification as a Block Kit message, to an incoming
// webhook (WebhookURL) or, with a bot token, to Channel through
// chat.postMessage (at WebhookURL when set, for a proxy or a test).
// Slack honours no idempotency key: after a failover a message may show
// twice.
type Slack struct {
	WebhookURL string
	Token      string
	Channel    string
	Client     *http.Client
}

var _ Sender = (*Slack)(nil)

// SlackMessage is the JSON body of a Slack message.
type SlackMessage struct {
	Channel string       `json:"channel,omitempty"`
	Text    string       `json:"text"`
	Blocks  []SlackBlock `json:"blocks"`
}

// SlackBlock is one Block Kit layout block: section, context or actions.
type SlackBlock struct {
	Type     string         `json:"type"`
	Text     *SlackText     `json:"text,omitempty"`
	Fields   []SlackText    `json:"fields,omitempty"`
	Elements []SlackElement `json:"elements,omitempty"`
	BlockID  string         `json:"block_id,omitempty"`
}

// SlackText is a Block Kit text object: mrkdwn or plain_text.
type SlackText struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Emoji bool   `json:"emoji,omitempty"`
}

// SlackElement is an element of a context block (a text object) or of an
// actions block (a button).
type SlackElement struct {
	Type     string `json:"type"`
	Text     any    `json:"text,omitempty"`
	URL      string `json:"url,omitempty"`
	Style    string `json:"style,omitempty"`
	ActionID string `json:"action_id,omitempty"`
}

// Block Kit limits: Slack refuses a message with a longer text, so texts
// are cut to them.
const (
	slackSectionText = 3000
	slackFieldText   = 2000
	slackContextText = 2000
	slackButtonText  = 75
)

// maxSlackAnswer bounds the answer read from Slack's API: a small JSON
// object saying ok or naming the error.
const maxSlackAnswer = 64 << 10

// SlackPayload builds the Block Kit message of a notification.
func SlackPayload(m *Message) *SlackMessage {
	n := m.Notification
	title := Title(n)
	head := "*" + escape(title) + "*"
	if n.Message != "" {
		head += "\n" + escape(n.Message)
	}
	msg := &SlackMessage{Text: title, Blocks: []SlackBlock{
		{Type: "section", Text: &SlackText{Type: "mrkdwn", Text: cut(head, slackSectionText)}},
	}}
	var fields []SlackText
	field := func(name, value string) {
		if value != "" {
			fields = append(fields, SlackText{Type: "mrkdwn", Text: cut("*"+name+"*\n"+value, slackFieldText)})
		}
	}
	if k := n.JobKey(); k != "" {
		field("Job", "`"+escape(k)+"`")
	}
	if d := n.Deployment; d != nil {
		field("Commit", commitField(d))
		if d.CommitAuthor != "" {
			field("Author", escape(d.CommitAuthor))
		}
		field("File", escape(d.Repository+":"+d.File))
		field("State", escape(d.State))
		if a := Approvals(d); a != "" {
			field("Approvals", escape(a))
		}
		if d.Error != "" {
			field("Error", escape(d.Error))
		}
	}
	if n.Actor != "" {
		field("By", escape(n.Actor))
	}
	if len(fields) > 0 {
		msg.Blocks = append(msg.Blocks, SlackBlock{Type: "section", Fields: fields})
	}
	if d := n.Deployment; d != nil && d.DiffSummary != "" {
		msg.Blocks = append(msg.Blocks, SlackBlock{Type: "section",
			Text: &SlackText{Type: "mrkdwn", Text: cut("*Diff*\n```"+escape(d.DiffSummary)+"```", slackSectionText)}})
	}
	msg.Blocks = append(msg.Blocks, SlackBlock{Type: "context", Elements: []SlackElement{
		{Type: "mrkdwn", Text: cut(fmt.Sprintf("Nops · %s · %s", n.ID, n.Time.UTC().Format(time.RFC3339)), slackContextText)},
	}})
	if m.Link != "" {
		label, style := "Open in Nops", ""
		if n.Kind == structs.NotifyPendingApproval {
			label, style = "Review and approve", "primary"
		}
		msg.Blocks = append(msg.Blocks, SlackBlock{Type: "actions", Elements: []SlackElement{{
			Type: "button", Text: &SlackText{Type: "plain_text", Text: cut(label, slackButtonText)},
			URL: m.Link, Style: style, ActionID: "nops-open",
		}}})
	}
	return msg
}

// Send posts one message.
func (s *Slack) Send(ctx context.Context, m *Message) error {
	msg := SlackPayload(m)
	url := s.WebhookURL
	if s.Token != "" {
		msg.Channel = s.Channel
		if url == "" {
			url = SlackAPIURL
		}
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode slack message: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("slack request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if s.Token == "" {
		return doPost(s.Client, req)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := s.Client.Do(req)
	if err != nil {
		return fmt.Errorf("post to %s: %w", req.URL.Host, unwrapURLError(err))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxSlackAnswer))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered HTTP %d", req.URL.Host, resp.StatusCode)
	}
	var answer struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("slack answer: %w", err)
	}
	if !answer.OK {
		return fmt.Errorf("slack refused the message: %s", answer.Error)
	}
	return nil
}

// commitField shows a deployment's commit: its short hash, linked to the
// commit when there is a link, and its subject.
func commitField(d *structs.NotificationDeployment) string {
	short := "`" + escape(structs.ShortID(d.Commit)) + "`"
	if d.CommitURL != "" && !strings.ContainsAny(d.CommitURL, "|<> ") {
		short = "<" + d.CommitURL + "|" + short + ">"
	}
	if s := d.CommitSubject(); s != "" {
		return short + " " + escape(cut(s, slackFieldText/2))
	}
	return short
}

// escape escapes the three characters mrkdwn reserves.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// cut bounds a text to n characters.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
