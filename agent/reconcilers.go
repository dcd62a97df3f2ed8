package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// ReconcileOptions wires the leader's reconcilers into a server: for each
// Nomad cluster (SPEC section 16) a Nomad client and the manager of its
// detection and apply, the git watcher of the configured repositories they
// share, and the fleet that runs them, whose loops run only while the
// server leads. clock may be nil (time.Now); tests pass their own to move
// across window boundaries.
func ReconcileOptions(cfg *config.Config, logger hclog.Logger, clock func() time.Time) Options {
	return Options{Build: func(s *Server) (LeaderFunc, Reconciler, error) {
		f, err := NewFleet(s, cfg, logger, clock)
		if err != nil {
			return nil, nil, err
		}
		secret, err := cfg.Webhook.ResolveSecret(os.LookupEnv)
		if err != nil {
			return nil, nil, err
		}
		s.fleet, s.webhookSecret = f, secret
		leader := func(ctx context.Context, s *Server) { f.Run(ctx, s.Kicked()) }
		return leader, f, nil
	}}
}

// NewFleet builds the reconcile managers of a server, one per Nomad
// cluster of its configuration, around one git watcher.
func NewFleet(s *Server, cfg *config.Config, logger hclog.Logger, clock func() time.Time) (*reconcile.Fleet, error) {
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
	clusters := cfg.Clusters()
	names := make([]string, 0, len(clusters))
	for _, c := range clusters {
		names = append(names, c.Name)
	}
	repoClusters := repoClustersOf(cfg)
	var managers []*reconcile.Manager
	for _, c := range clusters {
		// Every metric of a cluster's manager and Nomad client carries
		// its cluster label.
		var reg prometheus.Registerer
		if s.metrics != nil {
			reg = prometheus.WrapRegistererWith(prometheus.Labels{"cluster": c.Name}, s.metrics)
		}
		nomad, err := nomadx.New(nomadx.Config{
			Cluster: c.Name, NoEnv: len(cfg.Nomads) > 0,
			Address: c.Address, Token: c.Token, TokenFile: c.TokenFile, Region: c.Region,
			CACert: c.CAFile, ClientCert: c.CertFile, ClientKey: c.KeyFile, TLSServerName: c.TLSServerName,
			RedactKeys: cfg.SecretKeyFragments(), Registerer: reg,
		}, logger.Named("nomad").With("cluster", c.Name))
		if err != nil {
			return nil, fmt.Errorf("nomad client of cluster %s: %w", c.Name, err)
		}
		managers = append(managers, reconcile.New(reconcile.Config{
			Clusters: names, RepoClusters: repoClusters, Region: c.Region, Requires: c.Requires, Bake: c.Bake, UIURL: c.UIURL,
			Namespaces: c.Namespaces, DriftInterval: cfg.DriftInterval, EngineInterval: cfg.EngineInterval,
			ReplanRate: cfg.NomadReplanRate, FullPlanInterval: cfg.FullReplanInterval,
			Defaults: meta.Defaults{Policy: policy, ApplyTimeout: cfg.ApplyTimeout, HookTimeout: cfg.HookTimeout,
				ApprovalTTL: cfg.Approval.TTL},
			Clock: clock, Registerer: reg, DisableEventStream: !cfg.NomadEventStream, SharedGit: true,
		}, s, nomad, git, s.logger.With("cluster", c.Name)))
	}
	var reg prometheus.Registerer
	if s.metrics != nil {
		reg = s.metrics
	}
	return reconcile.NewFleet(managers, git, reg, s.logger)
}

// repoClustersOf returns the cluster of each configured repository.
func repoClustersOf(cfg *config.Config) map[string]string {
	out := make(map[string]string, len(cfg.Repositories))
	for _, r := range cfg.Repositories {
		out[r.Name] = cfg.RepoCluster(r)
	}
	return out
}

// Manager returns the reconcile manager of the server's first Nomad
// cluster (its only one without nomad blocks), or nil when it runs none.
func (s *Server) Manager() *reconcile.Manager {
	if s.fleet == nil {
		return nil
	}
	return s.fleet.Default()
}

// Fleet returns the server's reconcile managers, or nil when it runs none.
func (s *Server) Fleet() *reconcile.Fleet { return s.fleet }

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
