package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/nops-dev/nops/structs"
)

// Many Nomad clusters (SPEC section 16). A configuration without nomad
// blocks has one cluster, named DefaultCluster, made of the single-cluster
// settings (-nomad-addr, -nomad-token, -nomad-token-file, -nomad-region,
// -nomad-task-api, -nomad-ui-url, -namespaces). A configuration with nomad
// blocks has exactly the clusters of its blocks: the single-cluster
// settings may not be set with them, and NOMAD_ADDR, NOMAD_TOKEN and
// NOMAD_REGION, which are only defaults of those settings, are not used.

// blockNomad is the nomad block: one Nomad cluster Nops deploys to.
const blockNomad = "nomad"

// DefaultCluster is the name of the one Nomad cluster of a configuration
// without nomad blocks: the cluster every job-keyed object of the state
// store falls back to (structs.DefaultCluster).
const DefaultCluster = structs.DefaultCluster

// NomadCluster is one Nomad cluster Nops deploys to (SPEC section 16).
type NomadCluster struct {
	Name                                     string
	Address, Region                          string
	Namespaces                               []string
	Token                                    string // only the default cluster's, from -nomad-token / NOMAD_TOKEN
	TokenFile                                string
	CAFile, CertFile, KeyFile, TLSServerName string
	UIURL                                    string
	TaskAPI                                  bool // only the default cluster's (-nomad-task-api)
	Requires                                 []string
	Bake                                     time.Duration
}

// clusterNamePattern is what a cluster's name may be: it goes into URLs,
// metrics labels and logs.
var clusterNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// singleClusterKeys are the top-level settings of the one cluster of a
// configuration without nomad blocks; none may be set with nomad blocks.
// -namespaces is not one: it is the default of every block's namespaces.
var singleClusterKeys = []string{"nomad-addr", "nomad-token", "nomad-token-file", "nomad-region", "nomad-task-api", "nomad-ui-url"}

// Clusters returns the Nomad clusters Nops deploys to: the nomad blocks, in
// file order, when there are any; else one cluster named DefaultCluster
// made of the single-cluster settings. A block without namespaces gets the
// top-level namespaces.
func (c *Config) Clusters() []NomadCluster {
	if len(c.Nomads) == 0 {
		return []NomadCluster{{
			Name:       DefaultCluster,
			Address:    c.NomadAddr,
			Region:     c.NomadRegion,
			Namespaces: slices.Clone(c.Namespaces),
			Token:      c.NomadToken,
			TokenFile:  c.NomadTokenFile,
			UIURL:      c.NomadUIURL,
			TaskAPI:    c.NomadTaskAPI,
		}}
	}
	out := make([]NomadCluster, len(c.Nomads))
	for i, n := range c.Nomads {
		n.Namespaces = slices.Clone(n.Namespaces)
		if n.Namespaces == nil {
			n.Namespaces = slices.Clone(c.Namespaces)
		}
		n.Requires = slices.Clone(n.Requires)
		out[i] = n
	}
	return out
}

// Cluster returns the cluster named name, as Clusters gives it.
func (c *Config) Cluster(name string) (NomadCluster, bool) {
	for _, n := range c.Clusters() {
		if n.Name == name {
			return n, true
		}
	}
	return NomadCluster{}, false
}

// RepoCluster returns the name of the cluster the jobs of r deploy to: its
// cluster setting; without one the only cluster when there is one, else
// DefaultCluster (which Validate requires to exist then).
func (c *Config) RepoCluster(r Repository) string {
	if r.Cluster != "" {
		return r.Cluster
	}
	if len(c.Nomads) == 1 {
		return c.Nomads[0].Name
	}
	return DefaultCluster
}

func nomadFields(n *NomadCluster) []attrField {
	return []attrField{
		{name: "address", v: stringValue(&n.Address, nil)},
		{name: "region", v: stringValue(&n.Region, nil)},
		{name: "namespaces", v: listValue(&n.Namespaces, nil, checkNamespaces)},
		{name: "token_file", v: stringValue(&n.TokenFile, nil)},
		{name: "ca_file", v: stringValue(&n.CAFile, nil)},
		{name: "cert_file", v: stringValue(&n.CertFile, nil)},
		{name: "key_file", v: stringValue(&n.KeyFile, nil)},
		{name: "tls_server_name", v: stringValue(&n.TLSServerName, nil)},
		{name: "ui_url", v: stringValue(&n.UIURL, checkBaseURL)},
		{name: "requires", v: listValue(&n.Requires, nil, nil)},
		{name: "bake", v: durationChecked(&n.Bake, checkDurationNotNegative)},
	}
}

// decodeNomad merges a nomad block into the cluster of the same name (a
// later file adds to or overrides an earlier one, as for repositories), or
// adds one.
func (l *loader) decodeNomad(b *hcl.Block) {
	c := l.cfg
	name := b.Labels[0]
	i := indexOf(len(c.Nomads), func(i int) bool { return c.Nomads[i].Name == name })
	if i < 0 {
		c.Nomads = append(c.Nomads, NomadCluster{Name: name})
		i = len(c.Nomads) - 1
	}
	l.decodeBody(b.Body, nomadFields(&c.Nomads[i]), nil)
}

// checkNomadBlocks refuses the single-cluster settings, set explicitly,
// next to nomad blocks: each block names its own cluster, and a setting
// that would be ignored must not look as if it applied. The defaults that
// NOMAD_ADDR, NOMAD_TOKEN and NOMAD_REGION give them are not explicit.
// It reports whether the configuration has nomad blocks.
func (l *loader) checkNomadBlocks() bool {
	c := l.cfg
	if len(c.Nomads) == 0 {
		return false
	}
	block := fmt.Sprintf("%s %q", blockNomad, c.Nomads[0].Name)
	for _, key := range singleClusterKeys {
		origin, set := l.origin[key]
		if !set || (key == "nomad-task-api" && !c.NomadTaskAPI) {
			continue
		}
		l.bad[key] = true
		l.errs = append(l.errs, keyErrorf(key, "cannot be combined with nomad blocks (%s, set by %s, and the block %s): "+
			"with nomad blocks every cluster is configured in its own block; remove %s or move it into the blocks",
			hclName(key), origin, block, hclName(key)))
	}
	return true
}

// validateClusters checks the nomad blocks and the clusters of the
// repositories.
func (c *Config) validateClusters() []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, keyErrorf(key, format, args...))
	}
	for _, n := range c.Notify {
		if n.NomadCluster == "" {
			continue
		}
		if _, ok := c.Cluster(n.NomadCluster); !ok {
			add(fmt.Sprintf("notify %q", n.Name), "cluster: no Nomad cluster %q (the clusters are %s)",
				n.NomadCluster, strings.Join(c.clusterNames(), ", "))
		}
	}
	names := make(map[string]bool)
	for i, n := range c.Nomads {
		key := fmt.Sprintf("%s %q", blockNomad, n.Name)
		if n.Name == "" {
			key = fmt.Sprintf("%s #%d", blockNomad, i+1)
		}
		if err := checkClusterName(n.Name); err != nil {
			add(key, "name: %v", err)
		} else if names[n.Name] {
			add(key, "name: defined more than once")
		}
		names[n.Name] = true
		if err := checkClusterAddress(n.Address); err != nil {
			add(key, "address: %v", err)
		}
		if n.Namespaces != nil {
			if err := checkNamespaces(n.Namespaces); err != nil {
				add(key, "namespaces: %v", err)
			}
		}
		if err := checkBaseURL(n.UIURL); err != nil {
			add(key, "ui_url: %v", err)
		}
		if (n.CertFile == "") != (n.KeyFile == "") {
			add(key, "cert_file and key_file go together: set both for a client certificate, or neither")
		}
		if u, err := url.Parse(n.Address); err == nil && u.Scheme == "http" {
			for _, f := range []struct{ name, v string }{
				{"ca_file", n.CAFile}, {"cert_file", n.CertFile}, {"key_file", n.KeyFile}, {"tls_server_name", n.TLSServerName},
			} {
				if f.v != "" {
					add(key, "%s: is set but the address %q is http://, which uses no TLS: use an https:// address or remove %s",
						f.name, n.Address, f.name)
				}
			}
		}
		if n.Bake < 0 {
			add(key, "bake: must not be negative, not %s", n.Bake)
		}
		if n.Bake != 0 && len(n.Requires) == 0 {
			add(key, "bake: needs requires: bake is how long ago a job must have completed in the clusters it requires")
		}
	}
	for _, n := range c.Nomads {
		key := fmt.Sprintf("%s %q", blockNomad, n.Name)
		seen := make(map[string]bool)
		for _, r := range n.Requires {
			switch {
			case r == n.Name:
				add(key, "requires: a cluster cannot require itself")
			case seen[r]:
				add(key, "requires: %q is listed more than once", r)
			case !names[r]:
				add(key, "requires: no nomad block is named %q", r)
			}
			seen[r] = true
		}
	}
	for _, cycle := range requireCycles(c.Nomads) {
		add(blockNomad, "requires: the promotion order has a cycle: %s", strings.Join(cycle, " -> "))
	}

	clusters := c.Clusters()
	known := make(map[string]bool, len(clusters))
	list := make([]string, 0, len(clusters))
	for _, n := range clusters {
		known[n.Name] = true
		list = append(list, fmt.Sprintf("%q", n.Name))
	}
	for i, r := range c.Repositories {
		key := fmt.Sprintf("repository %q", r.Name)
		if r.Name == "" {
			key = fmt.Sprintf("repository #%d", i+1)
		}
		switch {
		case r.Cluster != "" && !known[r.Cluster]:
			add(key, "cluster: no Nomad cluster is named %q (the clusters are %s)", r.Cluster, strings.Join(list, ", "))
		case r.Cluster == "" && !known[c.RepoCluster(r)]:
			add(key, "cluster: required with several nomad blocks and none named %q (the clusters are %s)",
				DefaultCluster, strings.Join(list, ", "))
		}
	}
	return errs
}

// requireCycles returns the cycles of the requires of clusters, each once,
// as the names along it with the first repeated at the end. Requires that
// name the cluster itself or no cluster are reported on their own.
func requireCycles(clusters []NomadCluster) [][]string {
	edges := make(map[string][]string, len(clusters))
	for _, n := range clusters {
		if _, dup := edges[n.Name]; !dup {
			edges[n.Name] = n.Requires
		}
	}
	const (
		unvisited = iota
		visiting
		done
	)
	state := make(map[string]int, len(clusters))
	var stack []string
	var cycles [][]string
	var visit func(name string)
	visit = func(name string) {
		state[name] = visiting
		stack = append(stack, name)
		for _, next := range edges[name] {
			if _, ok := edges[next]; !ok || next == name {
				continue
			}
			switch state[next] {
			case unvisited:
				visit(next)
			case visiting:
				at := slices.Index(stack, next)
				cycle := append(slices.Clone(stack[at:]), next)
				cycles = append(cycles, cycle)
			}
		}
		stack = stack[:len(stack)-1]
		state[name] = done
	}
	for _, n := range clusters {
		if state[n.Name] == unvisited {
			visit(n.Name)
		}
	}
	return cycles
}

// ClustersReloadable returns nil when next's Nomad clusters can replace
// old's in a running server, else an error naming each change only a
// restart applies: the set of clusters, and of a cluster its address,
// region, namespaces, token (the default cluster's static one), TLS files
// and server name, and Task API. A cluster's token_file, ui_url, requires
// and bake may change on reload, as may the repositories' clusters.
func ClustersReloadable(old, next *Config) error {
	var errs []error
	before, after := old.Clusters(), next.Clusters()
	byName := make(map[string]NomadCluster, len(before))
	for _, n := range before {
		byName[n.Name] = n
	}
	var added, removed []string
	nextNames := make(map[string]bool, len(after))
	for _, n := range after {
		nextNames[n.Name] = true
		prev, ok := byName[n.Name]
		if !ok {
			added = append(added, fmt.Sprintf("%q", n.Name))
			continue
		}
		var changed []string
		for _, f := range []struct {
			name string
			same bool
		}{
			{"address", prev.Address == n.Address},
			{"region", prev.Region == n.Region},
			{"namespaces", slices.Equal(prev.Namespaces, n.Namespaces)},
			{"token", prev.Token == n.Token},
			// The file's content is read again when it changes; another
			// file takes a new client.
			{"token_file", prev.TokenFile == n.TokenFile},
			{"ca_file", prev.CAFile == n.CAFile},
			{"cert_file", prev.CertFile == n.CertFile},
			{"key_file", prev.KeyFile == n.KeyFile},
			{"tls_server_name", prev.TLSServerName == n.TLSServerName},
			{"task_api", prev.TaskAPI == n.TaskAPI},
		} {
			if !f.same {
				changed = append(changed, f.name)
			}
		}
		if len(changed) > 0 {
			errs = append(errs, keyErrorf(fmt.Sprintf("%s %q", blockNomad, n.Name), "%s changed: only a restart applies that",
				strings.Join(changed, ", ")))
		}
	}
	for _, n := range before {
		if !nextNames[n.Name] {
			removed = append(removed, fmt.Sprintf("%q", n.Name))
		}
	}
	if len(added) > 0 || len(removed) > 0 {
		var parts []string
		if len(added) > 0 {
			parts = append(parts, "added "+strings.Join(added, ", "))
		}
		if len(removed) > 0 {
			parts = append(parts, "removed "+strings.Join(removed, ", "))
		}
		errs = append(errs, keyErrorf(blockNomad, "the set of Nomad clusters changed (%s): only a restart applies that",
			strings.Join(parts, "; ")))
	}
	return errors.Join(errs...)
}

// checkClusterName accepts the name of a nomad block.
func checkClusterName(s string) error {
	if !clusterNamePattern.MatchString(s) {
		return fmt.Errorf("invalid name %q: use 1 to 63 lower-case letters, digits, '-' and '_', starting with a letter or digit", s)
	}
	return nil
}

// checkClusterAddress accepts the address of a nomad block: an http:// or
// https:// URL (the Task API's unix socket is only the default cluster's).
func checkClusterAddress(s string) error {
	if s == "" {
		return errors.New("required: the URL of the cluster's Nomad API")
	}
	if err := checkNomadAddr(s); err != nil {
		return err
	}
	if u, _ := url.Parse(s); u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("invalid address %q: must be an http:// or https:// URL", s)
	}
	return nil
}

func checkDurationNotNegative(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("invalid duration %s: must not be negative", d)
	}
	return nil
}

// clusterNames returns the names of the clusters, in order.
func (c *Config) clusterNames() []string {
	var out []string
	for _, n := range c.Clusters() {
		out = append(out, n.Name)
	}
	return out
}
