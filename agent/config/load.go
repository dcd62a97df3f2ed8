package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// Environment variables read as defaults, below config files, so that a
// server started in a shell set up for the nomad and consul CLIs finds them.
const (
	envNomadAddr   = "NOMAD_ADDR"
	envNomadToken  = "NOMAD_TOKEN"
	envNomadRegion = "NOMAD_REGION"
	envConsulAddr  = "CONSUL_HTTP_ADDR"
	envConsulToken = "CONSUL_HTTP_TOKEN"
)

// loader applies the layers of configuration to one Config and collects
// every problem on the way.
type loader struct {
	cfg       *Config
	lookupEnv func(string) (string, bool)
	// origin records where each top-level setting was last set, for
	// settings set by a file, the environment or a flag.
	origin map[string]string
	// bad records the top-level settings that had a bad value in some
	// layer, so that Validate does not report them a second time.
	bad  map[string]bool
	errs []error
}

// Load builds the configuration of `nops serve` from args (the arguments
// after `serve`), from environment variables read through lookupEnv (nil
// reads none) and from the config files named by -config (or NOPS_CONFIG,
// comma-separated). A -config that names a directory loads its *.hcl and
// *.json files in lexical order.
//
// Per key, a flag wins over the environment, the environment over config
// files, a later file over an earlier one, and any of them over the default.
// NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, CONSUL_HTTP_ADDR and
// CONSUL_HTTP_TOKEN replace the built-in defaults. With nomad blocks the
// single-cluster -nomad-* settings must not be set, and the NOMAD_*
// variables are not used: every cluster is its block (Clusters).
//
// The configuration returned has passed Validate. Otherwise the error joins
// every problem found (errors.Join), each naming its key, and its file and
// line for config files. -h and -help return flag.ErrHelp; print Usage.
func Load(args []string, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	l := &loader{
		cfg:       Default(),
		lookupEnv: lookupEnv,
		origin:    make(map[string]string),
		bad:       make(map[string]bool),
	}
	fields := l.cfg.fields()

	flags, err := parseFlags(args, fields)
	if errors.Is(err, flag.ErrHelp) {
		return nil, flag.ErrHelp
	}
	flagsOK := err == nil
	if err != nil {
		l.errs = append(l.errs, err)
	}

	l.applyEnvDefaults(fields)
	for _, p := range l.configPaths(flags) {
		l.loadPath(p)
	}
	l.applyEnv(fields)
	l.applyFlags(fields, flags)
	l.applyRepoFlags(flags)
	l.applyValidateFlag(flags)
	l.finalize()
	if !l.checkNomadBlocks() {
		l.resolveNomadIdentity()
	}

	// After a flag syntax error the rest of the command line is unread:
	// required settings may look missing when they are not.
	if flagsOK {
		l.validate()
	}
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return l.cfg, nil
}

// recorder is the flag.Value of every flag: it keeps the text given, which
// is applied once the lower layers are loaded.
type recorder struct {
	values  []string
	boolean bool
}

func (r *recorder) String() string { return strings.Join(r.values, ",") }

func (r *recorder) Set(s string) error {
	r.values = append(r.values, s)
	return nil
}

func (r *recorder) IsBoolFlag() bool { return r.boolean }

// newFlagSet returns a flag set with every flag of `nops serve`, each
// recording into the returned map.
func newFlagSet(fields []field) (*flag.FlagSet, map[string]*recorder) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	recs := make(map[string]*recorder)
	for _, f := range fields {
		r := &recorder{boolean: f.v.isBool()}
		recs[f.name] = r
		fs.Var(r, f.name, f.usage)
	}
	for _, name := range []string{flagConfig, flagRepo, flagValidate} {
		r := &recorder{boolean: name == flagValidate}
		recs[name] = r
		fs.Var(r, name, "")
	}
	return fs, recs
}

func parseFlags(args []string, fields []field) (map[string]*recorder, error) {
	fs, recs := newFlagSet(fields)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return recs, err
		}
		return recs, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return recs, fmt.Errorf("flags: unexpected argument %q: nops serve takes only flags", fs.Arg(0))
	}
	return recs, nil
}

// applyEnvDefaults replaces built-in defaults with the variables of the
// nomad CLI.
func (l *loader) applyEnvDefaults(fields []field) {
	byName := fieldsByName(fields)
	for _, d := range []struct{ env, key string }{
		{envNomadAddr, "nomad-addr"},
		{envNomadToken, "nomad-token"},
		{envNomadRegion, "nomad-region"},
	} {
		s, ok := l.lookupEnv(d.env)
		if !ok || s == "" {
			continue
		}
		if err := byName[d.key].v.parse(s); err != nil {
			l.bad[d.key] = true
			l.errs = append(l.errs, fmt.Errorf("env %s (default of %s): %w", d.env, d.key, err))
		}
	}
}

// configPaths returns the config files to load: every -config flag, else
// NOPS_CONFIG.
func (l *loader) configPaths(flags map[string]*recorder) []string {
	if r := flags[flagConfig]; len(r.values) > 0 {
		var out []string
		for _, p := range r.values {
			if p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	if s, ok := l.lookupEnv(envName(flagConfig)); ok {
		return structs.SplitList(s)
	}
	return nil
}

func (l *loader) applyEnv(fields []field) {
	for _, f := range fields {
		name := f.envName()
		s, ok := l.lookupEnv(name)
		if !ok || s == "" {
			continue
		}
		if err := f.v.parse(s); err != nil {
			l.bad[f.name] = true
			l.errs = append(l.errs, fmt.Errorf("env %s: %w", name, err))
			continue
		}
		l.origin[f.name] = "env " + name
	}
}

func (l *loader) applyFlags(fields []field, flags map[string]*recorder) {
	for _, f := range fields {
		r := flags[f.name]
		if len(r.values) == 0 {
			continue
		}
		values := r.values
		if _, isList := f.v.(*typed[[]string]); isList {
			// Repeated list flags add up: -retry-join a -retry-join b.
			values = []string{strings.Join(r.values, ",")}
		}
		ok := true
		for _, s := range values {
			if err := f.v.parse(s); err != nil {
				ok = false
				l.bad[f.name] = true
				l.errs = append(l.errs, fmt.Errorf("flag -%s: %w", f.name, err))
			}
		}
		if ok {
			l.origin[f.name] = "flag -" + f.name
		}
	}
}

// applyValidateFlag sets ValidateOnly from -validate (-validate=false
// leaves it off).
func (l *loader) applyValidateFlag(flags map[string]*recorder) {
	for _, s := range flags[flagValidate].values {
		on, err := strconv.ParseBool(s)
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("flag -%s: %q is not a boolean", flagValidate, s))
			continue
		}
		l.cfg.ValidateOnly = on
	}
}

// applyRepoFlags adds one repository per -repo flag (else per item of
// NOPS_REPO), named repo, repo-2, repo-3...
func (l *loader) applyRepoFlags(flags map[string]*recorder) {
	specs, source := flags[flagRepo].values, "flag -"+flagRepo
	if len(specs) == 0 {
		s, _ := l.lookupEnv(envName(flagRepo))
		specs, source = structs.SplitList(s), "env "+envName(flagRepo)
	}
	for i, spec := range specs {
		name := flagRepo
		if i > 0 {
			name = flagRepo + "-" + strconv.Itoa(i+1)
		}
		r, err := ParseRepoSpec(name, spec)
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("%s: %w", source, err))
			continue
		}
		l.cfg.Repositories = append(l.cfg.Repositories, r)
	}
}

// ParseRepoSpec parses the value of -repo, url#branch:path, into a
// repository with the given name. Branch and path are optional
// (url, url#branch, url#branch:path, url#:path); missing ones take their
// defaults.
func ParseRepoSpec(name, spec string) (Repository, error) {
	r := newRepository(name)
	u, frag, hasFrag := strings.Cut(strings.TrimSpace(spec), "#")
	if u == "" {
		return r, fmt.Errorf("invalid repository %q: missing URL (use url#branch:path)", hideUserinfo(spec))
	}
	r.URL = u
	if hasFrag {
		branch, p, hasPath := strings.Cut(frag, ":")
		if branch != "" {
			r.Branch = branch
		}
		if hasPath {
			if p == "" {
				return r, fmt.Errorf("invalid repository %q: empty path after ':' (use url#branch:path)", hideUserinfo(spec))
			}
			r.Path = p
		}
	}
	return r, nil
}

// finalize resolves settings that depend on others, once every layer is in.
func (l *loader) finalize() {
	c := l.cfg
	if c.Dev {
		for _, key := range []string{"bind", "advertise"} {
			v := c.Bind
			if key == "advertise" {
				v = c.Advertise
			}
			if origin, ok := l.origin[key]; ok && v != DevAddress {
				l.bad[key] = true
				l.errs = append(l.errs, keyErrorf(key, "a -dev server uses %s; remove %s=%s (set by %s)", DevAddress, key, v, origin))
			}
		}
	} else if _, set := l.origin["advertise"]; !set {
		if _, bindSet := l.origin["bind"]; bindSet {
			if ip := net.ParseIP(c.Bind); ip != nil && !ip.IsUnspecified() {
				c.Advertise = c.Bind
			}
		}
	}

	// Join addresses without a port use the serf port of this server,
	// since servers of one cluster normally share their ports.
	port := c.SerfPort
	if port == 0 {
		port = DefaultSerfPort
	}
	for i, a := range c.RetryJoin {
		if host, p, err := splitJoinAddr(a); err == nil && p == "" {
			c.RetryJoin[i] = net.JoinHostPort(host, strconv.Itoa(port))
		}
	}

	l.checkSecretEnv()
}

// checkSecretEnv checks that every environment variable named for a
// secret is set, so that a missing secret stops the server at start rather
// than at the first fetch or notification.
func (l *loader) checkSecretEnv() {
	c := l.cfg
	need := func(key, env string) {
		if env == "" {
			return
		}
		if s, ok := l.lookupEnv(env); !ok || s == "" {
			l.errs = append(l.errs, keyErrorf(key, "environment variable %s is not set", env))
		}
	}
	for _, r := range c.Repositories {
		if a := r.Auth; a != nil {
			key := fmt.Sprintf("repository %q: auth", r.Name)
			need(key+": password_env", a.PasswordEnv)
			need(key+": token_env", a.TokenEnv)
			need(key+": ssh_key_passphrase_env", a.SSHKeyPassphraseEnv)
		}
	}
	for _, n := range c.Notify {
		need(fmt.Sprintf("notify %q: url_env", n.Name), n.URLEnv)
		need(fmt.Sprintf("notify %q: secret_env", n.Name), n.SecretEnv)
	}
	need("webhook: secret_env", c.Webhook.SecretEnv)
}

// validate runs Validate, leaving out problems already reported for a
// setting whose value was rejected by a layer.
func (l *loader) validate() {
	err := l.cfg.Validate()
	if err == nil {
		return
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		var ke *keyError
		if errors.As(e, &ke) && l.bad[ke.key] {
			continue
		}
		l.errs = append(l.errs, e)
	}
}

func fieldsByName(fields []field) map[string]field {
	m := make(map[string]field, len(fields))
	for _, f := range fields {
		m[f.name] = f
	}
	return m
}
