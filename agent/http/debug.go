package agenthttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	runtimepprof "runtime/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/structs"
)

// Debugging: what `nops operator debug` gathers from each server
// (GET /v1/agent/debug/{item}?server=NODE, through any server), and the Go
// profiler under /debug/pprof when enable_debug is set. Profiles are
// served only with enable_debug; every answer has the server's known
// secrets redacted.

// ErrDebugDisabled is a profile asked of a server without enable_debug.
var ErrDebugDisabled = fmt.Errorf("%w: profiling is disabled on this server (set enable_debug = true)", structs.ErrNotFound)

// errNotFound names what was not found.
var errNotFound = structs.ErrNotFound

// DebugSelf is a server as a debug bundle records it: its agent self and
// its configuration with every secret removed.
type DebugSelf struct {
	Self   *structs.AgentSelf `json:"self"`
	Config *config.Config     `json:"config"`
}

// agentDebug answers one item of a debug bundle for this server, or, with
// ?server=NODE, for another one.
func (a *operatorAPI) agentDebug(w http.ResponseWriter, r *http.Request) (any, error) {
	if done, err := a.toServer(w, r); done || err != nil {
		return nil, err
	}
	red := newRedactor(a.s.LiveConfig())
	switch item := r.PathValue("item"); item {
	case "self":
		self, err := a.agentSelf(w, r)
		if err != nil {
			return nil, err
		}
		raw, err := json.MarshalIndent(&DebugSelf{Self: self.(*structs.AgentSelf), Config: redactedConfig(a.s.LiveConfig())}, "", "  ")
		if err != nil {
			return nil, err
		}
		return rawBody{contentType: "application/json", body: red.bytes(raw)}, nil
	case "metrics":
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(a.s.Metrics(), promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rawBody{contentType: "text/plain; version=0.0.4", body: red.bytes(rec.Body.Bytes())}, nil
	case "goroutine", "heap", "allocs", "block", "mutex", "threadcreate":
		if !a.s.Config().EnableDebug {
			return nil, ErrDebugDisabled
		}
		p := runtimepprof.Lookup(item)
		if p == nil {
			return nil, fmt.Errorf("%w: no profile %q", errNotFound, item)
		}
		var b strings.Builder
		debug := 0
		if item == "goroutine" {
			// Goroutine stacks as text: readable in the bundle as is.
			debug = 2
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if debug > 0 {
			if err := p.WriteTo(&b, debug); err != nil {
				return nil, err
			}
			return rawBody{contentType: "text/plain; charset=utf-8", body: red.bytes([]byte(b.String()))}, nil
		}
		if err := p.WriteTo(w, 0); err != nil {
			return nil, err
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: no debug item %q (self, metrics, goroutine, heap, allocs, block, mutex, threadcreate)", errNotFound, item)
	}
}

// debugPprof serves net/http/pprof under /debug/pprof/ when enable_debug
// is set, and nothing otherwise.
func (a *operatorAPI) debugPprof(w http.ResponseWriter, r *http.Request) (any, error) {
	if !a.s.Config().EnableDebug {
		return nil, ErrDebugDisabled
	}
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "cmdline":
		// The command line can hold -encrypt or -nomad-token.
		return nil, fmt.Errorf("%w: /debug/pprof/cmdline is not served: the command line can hold secrets", structs.ErrNotFound)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
	return nil, nil
}

// redactedConfig returns a copy of the configuration without its secrets:
// the Nomad token, the gossip key, the Consul token, repository
// credentials and the credentials of repository URLs.
func redactedConfig(c *config.Config) *config.Config {
	out := *c
	const mark = "[redacted]"
	blank := func(s *string) {
		if *s != "" {
			*s = mark
		}
	}
	blank(&out.NomadToken)
	blank(&out.Encrypt)
	if c.Consul != nil {
		cc := *c.Consul
		blank(&cc.Token)
		out.Consul = &cc
	}
	out.Repositories = make([]config.Repository, len(c.Repositories))
	for i, repo := range c.Repositories {
		repo.URL = gitwatch.SafeURL(repo.URL)
		if repo.Auth != nil {
			auth := *repo.Auth
			blank(&auth.Password)
			blank(&auth.Token)
			blank(&auth.SSHKeyPassphrase)
			repo.Auth = &auth
		}
		out.Repositories[i] = repo
	}
	out.Notify = make([]config.NotifyConfig, len(c.Notify))
	for i, n := range c.Notify {
		// A webhook URL (Slack's above all) is a credential.
		blank(&n.URL)
		out.Notify[i] = n
	}
	return &out
}

// newRedactor returns a redactor of every secret a server knows: those
// of its configuration c and the gossip keys of its keyring file.
func newRedactor(c *config.Config) *redactor {
	var secrets []string
	secrets = append(secrets, c.NomadToken, c.Encrypt)
	if c.Consul != nil {
		secrets = append(secrets, c.Consul.Token)
	}
	for _, repo := range c.Repositories {
		secrets = append(secrets, gitwatch.URLSecrets(repo.URL)...)
		if a := repo.Auth; a != nil {
			secrets = append(secrets, a.Password, a.Token, a.SSHKeyPassphrase)
			for _, env := range []string{a.PasswordEnv, a.TokenEnv, a.SSHKeyPassphraseEnv} {
				if env != "" {
					secrets = append(secrets, os.Getenv(env))
				}
			}
		}
	}
	for _, n := range c.Notify {
		secrets = append(secrets, n.URL)
		if n.URLEnv != "" {
			secrets = append(secrets, os.Getenv(n.URLEnv))
		}
	}
	if c.DataDir != "" {
		if raw, err := os.ReadFile(filepath.Join(c.DataDir, "serf", "keyring")); err == nil {
			var keys []string
			if json.Unmarshal(raw, &keys) == nil {
				secrets = append(secrets, keys...)
			}
		}
	}
	r := &redactor{}
	seen := map[string]bool{}
	for _, sec := range secrets {
		// Short values would redact ordinary words.
		if len(sec) < 6 || seen[sec] {
			continue
		}
		seen[sec] = true
		r.secrets = append(r.secrets, []byte(sec))
		if esc := url.QueryEscape(sec); esc != sec {
			r.secrets = append(r.secrets, []byte(esc))
		}
	}
	return r
}
