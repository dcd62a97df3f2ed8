package agent

import (
	"fmt"
	"net/http"
	"os"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/reconcile/notify"
)

// notifyClientTimeout bounds one notification request when the caller
// gives no HTTP client: a receiver that takes longer is retried later.
const notifyClientTimeout = 10 * time.Second

// newNotifier builds the notification delivery loop from the notify
// blocks. It runs only while the server leads.
func newNotifier(s *Server) (*notify.Deliverer, error) {
	clients := map[string]*nomadapi.Client{}
	for _, n := range s.config.Notify {
		if n.Kind != config.NotifyKindNomad {
			continue
		}
		name := notifyCluster(s.config, n)
		if clients[name] != nil {
			continue
		}
		c, ok := s.config.Cluster(name)
		if !ok {
			return nil, fmt.Errorf("notify %q: no Nomad cluster %q", n.Name, name)
		}
		// The same Nomad identity as the cluster's reconcilers: the token,
		// or the token file (re-read on rotation; also the Task API's).
		client, err := nomadx.New(nomadx.Config{
			Cluster: c.Name, NoEnv: len(s.config.Nomads) > 0,
			Address: c.Address, Token: c.Token, TokenFile: c.TokenFile, Region: c.Region,
			CACert: c.CAFile, ClientCert: c.CertFile, ClientKey: c.KeyFile, TLSServerName: c.TLSServerName,
			RedactKeys: s.config.SecretKeyFragments(),
		}, s.logger.Named("notify.nomad").With("cluster", c.Name))
		if err != nil {
			return nil, fmt.Errorf("nomad client of cluster %s for notifications: %w", c.Name, err)
		}
		clients[name] = client.API()
	}
	targets, err := notifyTargets(s.config, os.LookupEnv, nil, func(n config.NotifyConfig) *nomadapi.Client {
		return clients[notifyCluster(s.config, n)]
	})
	if err != nil {
		return nil, err
	}
	return notify.New(s, notify.Config{
		Targets: targets, UIURL: s.config.UIURL, Retention: s.config.NotifyRetention,
		Leader: s.name, Registerer: s.metrics,
	}, s.logger), nil
}

// notifyCluster is the Nomad cluster a nomad target dispatches to: the one
// it names, else the first cluster.
func notifyCluster(cfg *config.Config, n config.NotifyConfig) string {
	if n.NomadCluster != "" {
		return n.NomadCluster
	}
	return cfg.Clusters()[0].Name
}

// notifyTargets builds the notify targets of a configuration. client sends the HTTP
// requests (nil: a client with a notifyClientTimeout timeout); nomad returns the client
// a nomad target dispatches through (that of its cluster).
func notifyTargets(cfg *config.Config, lookupEnv func(string) (string, bool), client *http.Client, nomad func(config.NotifyConfig) *nomadapi.Client) ([]*notify.Target, error) {
	if client == nil {
		client = &http.Client{Timeout: notifyClientTimeout}
	}
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	var out []*notify.Target
	for _, nc := range cfg.Notify {
		nc = nc.WithDefaults()
		secret, err := nc.ResolveSecret(lookupEnv)
		if err != nil {
			return nil, err
		}
		var url string
		if nc.URL != "" || nc.URLEnv != "" {
			if url, err = nc.ResolveURL(lookupEnv); err != nil {
				return nil, err
			}
		}
		t := &notify.Target{
			Name: nc.Name, Events: nc.Events, Namespaces: nc.Namespaces, Jobs: nc.Jobs,
			GiveUpAfter: nc.GiveUpAfter, RetryInitial: nc.RetryInitial, RetryMax: nc.RetryMax,
		}
		switch nc.Kind {
		case config.NotifyKindWebhook:
			t.Sender = &notify.Webhook{URL: url, Secret: secret, Client: client}
		case config.NotifyKindSlack:
			t.Sender = &notify.Slack{WebhookURL: url, Token: secret, Channel: nc.Channel, Client: client}
		case config.NotifyKindEmail:
			t.Sender = &notify.Email{Addr: nc.SMTPAddr, From: nc.From, To: nc.To, Username: nc.Username, Password: secret,
				RequireTLS: nc.RequireTLS}
		case config.NotifyKindNomad:
			var c *nomadapi.Client
			if nomad != nil {
				c = nomad(nc)
			}
			if c == nil {
				return nil, fmt.Errorf("notify %q: a nomad target needs the server's Nomad client", nc.Name)
			}
			ns := nc.NomadNamespace
			if ns == "" {
				ns = "default"
			}
			t.Sender = &notify.NomadDispatch{Client: c, Namespace: ns, JobID: nc.NomadJob}
		default:
			return nil, fmt.Errorf("notify %q: kind %q is not supported", nc.Name, nc.Kind)
		}
		out = append(out, t)
	}
	return out, nil
}
