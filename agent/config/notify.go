package config

import (
	"fmt"
	"net"
	"net/mail"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
)

// Defaults of notification delivery: retries from a second, doubling up
// to five minutes, for a day (a receiver down overnight still hears); the
// results are kept three days, a weekend of looking back.
const (
	DefaultNotifyGiveUpAfter  = 24 * time.Hour
	DefaultNotifyRetryInitial = time.Second
	DefaultNotifyRetryMax     = 5 * time.Minute
	DefaultNotifyRetention    = notify.DefaultRetention
)

// NotifyKinds lists the kinds of notification targets.
func NotifyKinds() []string {
	return []string{NotifyKindWebhook, NotifyKindSlack, NotifyKindEmail, NotifyKindNomad}
}

// WithDefaults returns n with unset delivery settings at their defaults.
func (n NotifyConfig) WithDefaults() NotifyConfig {
	if n.GiveUpAfter == 0 {
		n.GiveUpAfter = DefaultNotifyGiveUpAfter
	}
	if n.RetryInitial == 0 {
		n.RetryInitial = DefaultNotifyRetryInitial
	}
	if n.RetryMax == 0 {
		n.RetryMax = DefaultNotifyRetryMax
	}
	return n
}

// validate reports every problem of one notify block.
func (n NotifyConfig) validate(add func(format string, args ...any)) {
	kinds := NotifyKinds()
	switch {
	case n.Kind == "":
		add("kind is required (%s)", strings.Join(kinds, ", "))
	case !slices.Contains(kinds, n.Kind):
		add("kind: invalid value %q: must be one of %s", n.Kind, strings.Join(kinds, ", "))
	}
	if n.URL != "" && n.URLEnv != "" {
		add("set exactly one of url and url_env")
	}
	n.validateKind(add)
	n.validateOtherKinds(add)
	n.validateSecret(add)
	n.validateFilters(add)
	n.validateRetry(add)
}

// validateKind checks the settings the target's kind requires.
func (n NotifyConfig) validateKind(add func(format string, args ...any)) {
	hasURL := n.URL != "" || n.URLEnv != ""
	switch n.Kind {
	case NotifyKindWebhook:
		if !hasURL {
			add("set exactly one of url and url_env")
		}
	case NotifyKindSlack:
		hasToken := n.SecretEnv != "" || n.SecretFile != ""
		if !hasURL && !hasToken {
			add("set url or url_env (an incoming webhook), or secret_env or secret_file (a bot token) with channel")
		}
		if hasToken && n.Channel == "" {
			add("channel: a bot token posts to a channel; set channel")
		}
	case NotifyKindEmail:
		if hasURL {
			add("url: an email target sends through smtp_addr, not a URL")
		}
		n.validateEmail(add)
	case NotifyKindNomad:
		if hasURL {
			add("url: a nomad target dispatches to the server's Nomad, not a URL")
		}
		if n.NomadJob == "" {
			add("job: the parameterized job to dispatch is required")
		}
	}
}

// validateEmail checks an email target's server, sender and recipients.
func (n NotifyConfig) validateEmail(add func(format string, args ...any)) {
	if _, port, err := net.SplitHostPort(n.SMTPAddr); err != nil || port == "" {
		add("smtp_addr: must be host:port, not %q", n.SMTPAddr)
	}
	if _, err := mail.ParseAddress(n.From); err != nil {
		add("from: %q is not an email address", n.From)
	}
	if len(n.To) == 0 {
		add("to: at least one recipient is required")
	}
	for _, to := range n.To {
		if _, err := mail.ParseAddress(to); err != nil {
			add("to: %q is not an email address", to)
		}
	}
	if n.Username != "" && n.SecretEnv == "" && n.SecretFile == "" {
		add("username: set the password with secret_env or secret_file")
	}
}

// validateOtherKinds refuses the settings of another kind of target.
func (n NotifyConfig) validateOtherKinds(add func(format string, args ...any)) {
	if n.Channel != "" && n.Kind != NotifyKindSlack {
		add("channel: only a slack target has a channel")
	}
	if n.Kind != NotifyKindEmail && (n.SMTPAddr != "" || n.From != "" || len(n.To) > 0 || n.Username != "" || n.RequireTLS) {
		add("smtp_addr, from, to, username and require_tls are settings of an email target")
	}
	if n.Kind != NotifyKindNomad && (n.NomadJob != "" || n.NomadNamespace != "" || n.NomadCluster != "") {
		add("job, namespace and cluster are settings of a nomad target")
	}
}

// validateSecret checks the URL and where the secret comes from.
func (n NotifyConfig) validateSecret(add func(format string, args ...any)) {
	if n.URL != "" {
		if err := checkHTTPURL(n.URL); err != nil {
			add("url: %v", err)
		}
	}
	if n.SecretEnv != "" && n.SecretFile != "" {
		add("set at most one of secret_env and secret_file")
	}
	if n.SecretFile != "" {
		if _, err := os.Stat(n.SecretFile); err != nil {
			add("secret_file: %v", err)
		}
	}
}

// validateFilters checks the events and the namespace and job globs.
func (n NotifyConfig) validateFilters(add func(format string, args ...any)) {
	known := structs.NotifyKinds()
	for _, e := range n.Events {
		if !slices.Contains(known, e) {
			add("events: unknown event %q: must be one of %s", e, strings.Join(known, ", "))
		}
	}
	for _, g := range append(slices.Clone(n.Namespaces), n.Jobs...) {
		if err := structs.CheckGlob(g); err != nil {
			add("%v", err)
		}
	}
}

// validateRetry checks the delivery's durations.
func (n NotifyConfig) validateRetry(add func(format string, args ...any)) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"give_up_after", n.GiveUpAfter}, {"retry_initial", n.RetryInitial}, {"retry_max", n.RetryMax}} {
		if d.v < 0 {
			add("%s: must not be negative", d.name)
		}
	}
	if n.RetryInitial > 0 && n.RetryMax > 0 && n.RetryMax < n.RetryInitial {
		add("retry_max: must be at least retry_initial")
	}
}

// ResolveSecret returns the target's secret (the webhook signing key or
// the Slack bot token) from the environment variable or the file named,
// or "" when neither is set. A file's trailing newline is dropped.
func (n NotifyConfig) ResolveSecret(lookupEnv func(string) (string, bool)) (string, error) {
	if n.SecretFile != "" {
		b, err := os.ReadFile(n.SecretFile)
		if err != nil {
			return "", fmt.Errorf("notify %q: secret_file: %w", n.Name, err)
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return "", fmt.Errorf("notify %q: secret_file %s is empty", n.Name, n.SecretFile)
		}
		return s, nil
	}
	s, err := fromEnv(lookupEnv, "", n.SecretEnv, "secret_env")
	if err != nil {
		return "", fmt.Errorf("notify %q: %w", n.Name, err)
	}
	return s, nil
}
