package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// ReconcileOptions wires the leader's reconcilers into a server: a Nomad
// client, the git watcher of the configured repositories, and the manager of
// detection and apply, whose loops run only while the server leads. clock
// may be nil (time.Now); tests pass their own to move across window
// boundaries.
func ReconcileOptions(cfg *config.Config, logger hclog.Logger, clock func() time.Time) Options {
	return Options{Build: func(s *Server) (LeaderFunc, Reconciler, error) {
		m, err := NewManager(s, cfg, logger, clock)
		if err != nil {
			return nil, nil, err
		}
		secret, err := cfg.Webhook.ResolveSecret(os.LookupEnv)
		if err != nil {
			return nil, nil, err
		}
		s.manager, s.webhookSecret = m, secret
		leader := func(ctx context.Context, s *Server) { m.Run(ctx, s.Kicked()) }
		return leader, m, nil
	}}
}

// NewManager builds the reconcile manager of a server from its
// configuration.
func NewManager(s *Server, cfg *config.Config, logger hclog.Logger, clock func() time.Time) (*reconcile.Manager, error) {
	nomad, err := nomadx.New(nomadx.Config{
		Address: cfg.NomadAddr, Token: cfg.NomadToken, TokenFile: cfg.NomadTokenFile, Region: cfg.NomadRegion,
		RedactKeys: cfg.SecretKeyFragments(), Registerer: s.metrics,
	}, logger.Named("nomad"))
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	repos, err := gitRepoConfigs(cfg)
	if err != nil {
		return nil, err
	}
	// The watcher exists even with no repository, so that a reload can
	// add the first one.
	git, err := gitwatch.New(repos, logger.Named("git"))
	if err != nil {
		return nil, err
	}
	policy, err := structs.ParsePolicy(cfg.DefaultPolicy)
	if err != nil {
		return nil, err
	}
	return reconcile.New(reconcile.Config{
		Namespaces: cfg.Namespaces, DriftInterval: cfg.DriftInterval, EngineInterval: cfg.EngineInterval,
		ReplanRate: cfg.NomadReplanRate, FullPlanInterval: cfg.FullReplanInterval,
		Defaults: meta.Defaults{Policy: policy, ApplyTimeout: cfg.ApplyTimeout, HookTimeout: cfg.HookTimeout,
			ApprovalTTL: cfg.Approval.TTL},
		Clock: clock, Registerer: s.metrics, DisableEventStream: !cfg.NomadEventStream,
	}, s, nomad, git, s.logger), nil
}

// Manager returns the server's reconcile manager, or nil when it runs none.
func (s *Server) Manager() *reconcile.Manager { return s.manager }

// gitRepoConfigs returns the git watcher's view of the configured
// repositories, with their credentials resolved.
func gitRepoConfigs(cfg *config.Config) ([]gitwatch.RepoConfig, error) {
	var repos []gitwatch.RepoConfig
	for _, r := range cfg.Repositories {
		rc := gitwatch.RepoConfig{Name: r.Name, URL: r.URL, Branch: r.Branch, Path: r.Path, PollInterval: r.PollInterval,
			WebURL: r.WebURL}
		if r.Auth != nil {
			a, err := r.Auth.Resolve(os.LookupEnv)
			if err != nil {
				return nil, fmt.Errorf("repository %s: %w", r.Name, err)
			}
			rc.Auth = gitwatch.Auth{Username: a.Username, Password: a.Password, Token: a.Token,
				SSHKeyFile: a.SSHKeyFile, SSHKeyPassphrase: a.SSHKeyPassphrase, SSHKnownHostsFile: a.KnownHosts()}
		}
		if v := r.Verify; v != nil {
			rc.Verify = &gitwatch.Verify{AllowedSignersFile: v.AllowedSignersFile, GPGKeysFile: v.GPGKeysFile}
		}
		repos = append(repos, rc)
	}
	return repos, nil
}
