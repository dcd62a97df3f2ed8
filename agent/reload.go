package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// Reload on SIGHUP. Each setting a running server can change is a row of
// reloadables: the names config.Changed gives it, how to apply it, and how
// to record it as applied. Every other changed setting is named in the log
// as one only a restart applies. A row whose apply fails leaves its
// setting as it was and says so; the other rows still apply.

// reloadable is one setting SIGHUP applies.
type reloadable struct {
	// name is the setting as config.Changed names it.
	name string
	// always applies the row on every reload, changed or not (the TLS
	// files may change on disk under an unchanged configuration).
	always bool
	// apply makes the running server use next.
	apply func(s *Server, next *config.Config) error
	// keep copies the setting from next into the running configuration.
	keep func(running, next *config.Config)
}

// reloadables lists the settings a reload applies.
func reloadables() []reloadable {
	return []reloadable{
		{name: "log-level", apply: reloadLogLevel, keep: func(r, n *config.Config) { r.LogLevel = n.LogLevel }},
		{name: "tls", always: true, apply: func(s *Server, _ *config.Config) error { return s.ReloadTLS() },
			keep: func(r, n *config.Config) {}},
		{name: "repository", apply: reloadRepositories,
			keep: func(r, n *config.Config) { r.Repositories = n.Repositories }},
		{name: "default-policy", apply: reloadDefaults, keep: func(r, n *config.Config) { r.DefaultPolicy = n.DefaultPolicy }},
		{name: "apply-timeout", apply: reloadDefaults, keep: func(r, n *config.Config) { r.ApplyTimeout = n.ApplyTimeout }},
		{name: "hook-timeout", apply: reloadDefaults, keep: func(r, n *config.Config) { r.HookTimeout = n.HookTimeout }},
		// A nomad block's promotion order and Nomad UI; any other change
		// of the clusters is refused whole (config.ClustersReloadable).
		{name: "nomad", apply: reloadClusters, keep: func(r, n *config.Config) { r.Nomads = n.Nomads }},
		{name: "nomad-replan-rate", apply: reloadReplanRate,
			keep: func(r, n *config.Config) { r.NomadReplanRate = n.NomadReplanRate }},
		{name: "full-replan-interval", apply: reloadFullReplanInterval,
			keep: func(r, n *config.Config) { r.FullReplanInterval = n.FullReplanInterval }},
		{name: "autopilot", apply: func(*Server, *config.Config) error { return nil },
			keep: func(r, n *config.Config) { r.Autopilot = n.Autopilot }},
		// The approval TTL is a job default; the API reads forbid_self
		// from the live configuration at each approval.
		{name: "approval", apply: reloadDefaults, keep: func(r, n *config.Config) { r.Approval = n.Approval }},
		// The retention loop reads the live configuration at each pass.
		{name: "retention", apply: func(*Server, *config.Config) error { return nil },
			keep: func(r, n *config.Config) { r.Retention = n.Retention }},
	}
}

// ReloadResult says what a reload did.
type ReloadResult struct {
	// Applied names the settings now in use.
	Applied []string
	// RestartOnly names the changed settings only a restart applies.
	RestartOnly []string
}

// Reload applies the settings of next that a running server can change,
// and reports the others. The returned error joins the failures of the
// settings that could not be applied; those keep their old value.
func (s *Server) Reload(next *config.Config) (*ReloadResult, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	current := s.liveConfig()
	if s.tempDir != "" && next.DataDir == "" {
		// A dev server's temporary data dir is not a change.
		cp := *next
		cp.DataDir = current.DataDir
		next = &cp
	}
	changed := next.Changed(current)
	running := *current
	res := &ReloadResult{}
	var errs []error
	done := map[string]bool{}
	applied := map[string]bool{}
	for _, row := range reloadables() {
		done[row.name] = true
		if !row.always && !slices.Contains(changed, row.name) {
			continue
		}
		if err := row.apply(s, next); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", row.name, err))
			continue
		}
		row.keep(&running, next)
		if slices.Contains(changed, row.name) {
			applied[row.name] = true
			res.Applied = append(res.Applied, row.name)
		}
	}
	for _, name := range changed {
		if !done[name] {
			res.RestartOnly = append(res.RestartOnly, name)
		}
	}
	s.live.Store(&running)
	return res, errors.Join(errs...)
}

// liveConfig returns the configuration in use: the one the server started
// with, with the settings reloads applied.
func (s *Server) liveConfig() *config.Config {
	if c := s.live.Load(); c != nil {
		return c
	}
	return s.config
}

func reloadLogLevel(s *Server, next *config.Config) error {
	level := hclog.LevelFromString(next.LogLevel)
	if level == hclog.NoLevel {
		return fmt.Errorf("%q is not a log level", next.LogLevel)
	}
	s.rootLogger.SetLevel(level)
	s.logger.Info("log level changed", "level", strings.ToLower(level.String()))
	return nil
}

func reloadRepositories(s *Server, next *config.Config) error {
	if s.fleet == nil {
		return errors.New("this server runs no reconcilers")
	}
	repos, err := gitRepoConfigs(next)
	if err != nil {
		return err
	}
	added, changed, removed, err := s.fleet.UpdateRepositories(repos, repoClustersOf(next))
	if err != nil {
		return err
	}
	s.logger.Info("repositories reloaded", "added", added, "changed", changed, "removed", removed)
	return nil
}

func reloadClusters(s *Server, next *config.Config) error {
	if s.fleet == nil {
		return errors.New("this server runs no reconcilers")
	}
	if err := config.ClustersReloadable(s.liveConfig(), next); err != nil {
		return err
	}
	for _, c := range next.Clusters() {
		if m := s.fleet.Manager(c.Name); m != nil {
			m.SetClusterSettings(reconcile.ClusterSettings{Requires: c.Requires, Bake: c.Bake, UIURL: c.UIURL})
		}
	}
	return nil
}

func reloadDefaults(s *Server, next *config.Config) error {
	if s.fleet == nil {
		return errors.New("this server runs no reconcilers")
	}
	policy, err := structs.ParsePolicy(next.DefaultPolicy)
	if err != nil {
		return err
	}
	s.fleet.SetDefaults(meta.Defaults{Policy: policy, ApplyTimeout: next.ApplyTimeout, HookTimeout: next.HookTimeout,
		ApprovalTTL: next.Approval.TTL})
	return nil
}

func reloadReplanRate(s *Server, next *config.Config) error {
	if s.fleet == nil {
		return errors.New("this server runs no reconcilers")
	}
	s.fleet.SetReplanRate(next.NomadReplanRate)
	return nil
}

func reloadFullReplanInterval(s *Server, next *config.Config) error {
	if s.fleet == nil {
		return errors.New("this server runs no reconcilers")
	}
	s.fleet.SetFullPlanInterval(next.FullReplanInterval)
	return nil
}
