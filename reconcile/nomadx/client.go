// Package nomadx is the layer between Nops and the Nomad HTTP API: parsing job
// files through Nomad, planning with a diff, check-and-set registers, health of
// a registered version, dispatch of hook jobs with idempotency tokens, and the
// hashes Nops uses to tell whether two specs or two diffs are the same.
//
// Guarantees:
//
//   - Every request to Nomad goes through one counting transport, so Stats (and
//     the optional Prometheus counters) account for every call, including the
//     ones made through API().
//   - A register is always a check-and-set (Register never overwrites a job
//     changed since the index the caller read); a lost race is reported as
//     ErrIndexMismatch.
//   - A dispatch always carries an idempotency token, so repeating it returns
//     the run Nomad already created instead of a second one.
//   - PlanResult.Text is rendered from a redacted copy of the diff (package
//     redact); the raw diff stays in PlanResult.Diff for hashing only.
//   - SpecHash, JobHash and DiffHash depend only on the spec or diff, never on
//     fields Nomad fills in at registration or on counts left to an autoscaler.
//   - With a token file, every request carries the file's current token: a
//     changed file is read again, and a request Nomad refuses (401, 403) is
//     sent once more if the file then holds a new token.
//   - WatchJobs reports the end of a stream (a break, or Nomad closing it)
//     as a last batch with Err set, then closes its channel.
package nomadx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/reconcile/redact"
	"github.com/nops-dev/nops/structs"
)

// Config selects the Nomad cluster. Empty fields fall back to the standard
// Nomad environment variables (NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION,
// NOMAD_CACERT, NOMAD_CAPATH, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY,
// NOMAD_TLS_SERVER_NAME, NOMAD_SKIP_VERIFY), then to Nomad's defaults;
// explicit settings always win.
type Config struct {
	// Address of a Nomad agent, for example https://nomad.example:4646.
	Address string
	// Token is the ACL secret ID sent with every request.
	Token string
	// TokenFile, instead of Token, names a file that holds the token (a
	// secret ID or a workload identity). It is read again when it changes
	// and when Nomad refuses the token, without a restart.
	TokenFile string
	// Region sent with every request; empty means the agent's region.
	Region string
	// Cluster is the name Nops gives the Nomad cluster (SPEC section 16);
	// empty means structs.DefaultCluster.
	Cluster string
	// NoEnv leaves the NOMAD_* environment variables out (the token,
	// region, namespace and TLS files): a cluster of a nomad block is
	// configured by its block alone.
	NoEnv bool

	// CACert, ClientCert and ClientKey are PEM file paths for TLS.
	CACert     string
	ClientCert string
	ClientKey  string
	// TLSServerName overrides the server name checked in Nomad's certificate.
	TLSServerName string
	// TLSSkipVerify disables certificate verification (never in production).
	TLSSkipVerify bool

	// RedactKeys are extra secret-looking key fragments, added to
	// redact.DefaultKeys, used to redact PlanResult.Text.
	RedactKeys []string

	// Registerer, when set, receives the counters nops_nomad_requests_total
	// and nops_nomad_request_errors_total (label "operation").
	Registerer prometheus.Registerer

	// BlockingWait bounds blocking queries (WaitJobs); 0 means 5 minutes.
	BlockingWait time.Duration
}

// Client talks to one Nomad cluster. It is safe for concurrent use.
type Client struct {
	api      *api.Client
	logger   hclog.Logger
	counters *counters
	redactor *redact.Redactor
	wait     time.Duration
	address  string
	cluster  string
}

// New builds a Client. It does not contact Nomad.
func New(cfg Config, logger hclog.Logger) (*Client, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	apiCfg, tokens, err := apiConfig(cfg, logger)
	if err != nil {
		return nil, err
	}
	transport, err := newTransport(apiCfg.Address)
	if err != nil {
		return nil, err
	}
	httpClient := &http.Client{Transport: transport}
	if err := api.ConfigureTLS(httpClient, apiCfg.TLSConfig); err != nil {
		return nil, fmt.Errorf("configure TLS for Nomad: %w", err)
	}

	ctrs, err := newCounters(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	var next http.RoundTripper = transport
	if tokens != nil {
		next = &tokenTransport{next: transport, token: tokens}
	}
	httpClient.Transport = &countingTransport{next: next, counters: ctrs}
	apiCfg.HttpClient = httpClient

	client, err := api.NewClient(apiCfg)
	if err != nil {
		return nil, fmt.Errorf("create Nomad client: %w", err)
	}
	wait := cfg.BlockingWait
	if wait <= 0 {
		wait = 5 * time.Minute
	}
	return &Client{
		api:      client,
		logger:   logger,
		counters: ctrs,
		redactor: redact.New(cfg.RedactKeys...),
		wait:     wait,
		address:  apiCfg.Address,
		cluster:  structs.ClusterName(cfg.Cluster),
	}, nil
}

// apiConfig is the Nomad API's configuration of cfg, and the token file
// to send, when cfg names one, in place of a token.
func apiConfig(cfg Config, logger hclog.Logger) (*api.Config, *tokenFile, error) {
	apiCfg := api.DefaultConfig()
	if cfg.NoEnv {
		apiCfg.SecretID, apiCfg.Region, apiCfg.Namespace, apiCfg.HttpAuth = "", "", "", nil
		apiCfg.TLSConfig = &api.TLSConfig{}
	}
	if cfg.Address != "" {
		apiCfg.Address = cfg.Address
	}
	if cfg.Token != "" && cfg.TokenFile != "" {
		return nil, nil, errors.New("set either a Nomad token or a token file, not both")
	}
	if cfg.Token != "" {
		apiCfg.SecretID = cfg.Token
	}
	var tokens *tokenFile
	if cfg.TokenFile != "" {
		// The transport sends the file's token; NOMAD_TOKEN must not.
		apiCfg.SecretID = ""
		var err error
		if tokens, err = newTokenFile(cfg.TokenFile, logger); err != nil {
			return nil, nil, err
		}
	}
	if cfg.Region != "" {
		apiCfg.Region = cfg.Region
	}
	if cfg.CACert != "" {
		apiCfg.TLSConfig.CACert = cfg.CACert
	}
	if cfg.ClientCert != "" {
		apiCfg.TLSConfig.ClientCert = cfg.ClientCert
	}
	if cfg.ClientKey != "" {
		apiCfg.TLSConfig.ClientKey = cfg.ClientKey
	}
	if cfg.TLSServerName != "" {
		apiCfg.TLSConfig.TLSServerName = cfg.TLSServerName
	}
	if cfg.TLSSkipVerify {
		apiCfg.TLSConfig.Insecure = true
	}
	return apiCfg, tokens, nil
}

// newTransport returns the pooled transport to the Nomad agent at address:
// http, https, or a unix socket.
func newTransport(address string) (*http.Transport, error) {
	u, err := url.Parse(address)
	if err != nil {
		return nil, fmt.Errorf("invalid Nomad address %q: %w", address, err)
	}
	// The standard transport (proxy from the environment, dial and idle
	// timeouts), pooled: one idle connection a core and one more, as
	// Nomad's own client keeps.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = runtime.GOMAXPROCS(0) + 1
	transport.TLSHandshakeTimeout = 10 * time.Second
	transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	transport.ForceAttemptHTTP2 = false
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("invalid Nomad address %q: missing host", address)
		}
	case "unix":
		socket := u.Path
		if socket == "" {
			return nil, fmt.Errorf("invalid Nomad address %q: missing socket path", address)
		}
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
	default:
		return nil, fmt.Errorf("invalid Nomad address %q: scheme must be http, https or unix", address)
	}
	return transport, nil
}

// API returns the underlying Nomad API client for calls this package does not
// wrap. Its requests are counted too.
func (c *Client) API() *api.Client { return c.api }

// Address returns the Nomad address in use.
func (c *Client) Address() string { return c.address }

// Stats returns a snapshot of the request counters.
func (c *Client) Stats() Stats { return c.counters.snapshot() }

// Redactor returns the redactor used for PlanResult.Text.
func (c *Client) Redactor() *redact.Redactor { return c.redactor }

// Ping asks the agent for its leader, a cheap check that Nomad is reachable.
func (c *Client) Ping(ctx context.Context) error {
	var leader string
	if _, err := c.api.Raw().Query("/v1/status/leader", &leader, c.queryOpts(ctx, "status.leader", "")); err != nil {
		return fmt.Errorf("reach Nomad at %s: %w", c.address, err)
	}
	if leader == "" {
		return fmt.Errorf("reach Nomad at %s: no cluster leader", c.address)
	}
	return nil
}

func (c *Client) queryOpts(ctx context.Context, op, ns string) *api.QueryOptions {
	q := &api.QueryOptions{Namespace: ns}
	return q.WithContext(withOperation(ctx, op))
}

func (c *Client) writeOpts(ctx context.Context, op, ns string) *api.WriteOptions {
	w := &api.WriteOptions{Namespace: ns}
	return w.WithContext(withOperation(ctx, op))
}

// statusCode returns the HTTP status of a Nomad error answer, or 0.
func statusCode(err error) int {
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) && ure.HasStatusCode() {
		return ure.StatusCode()
	}
	var pure *api.UnexpectedResponseError
	if errors.As(err, &pure) && pure != nil && pure.HasStatusCode() {
		return pure.StatusCode()
	}
	return 0
}

func isNotFound(err error) bool {
	return err != nil && statusCode(err) == http.StatusNotFound
}

// notFoundAs returns notFound (ErrJobNotFound, ErrDeploymentNotFound) for
// Nomad's 404, and err otherwise.
func notFoundAs(err, notFound error) error {
	if isNotFound(err) {
		return notFound
	}
	return err
}

func namespaceOrDefault(ns string) string {
	if ns == "" {
		return api.DefaultNamespace
	}
	return ns
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Cluster returns the name of the client's Nomad cluster.
func (c *Client) Cluster() string { return c.cluster }
