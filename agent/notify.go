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
	var nomad *nomadapi.Client
	for _, n := range s.config.Notify {
		if n.Kind != config.NotifyKindNomad || nomad != nil {
			continue
		}
		// The same Nomad identity as the reconcilers': the token, or the
		// token file (re-read on rotation; also the Task API's).
		c, err := nomadx.New(nomadx.Config{
			Address: s.config.NomadAddr, Token: s.config.NomadToken, TokenFile: s.config.NomadTokenFile,
			Region: s.config.NomadRegion, RedactKeys: s.config.SecretKeyFragments(), Registerer: s.metrics,
		}, s.logger.Named("notify.nomad"))
		if err != nil {
			return nil, fmt.Errorf("nomad client for notifications: %w", err)
		}
		nomad = c.API()
	}
	targets, err := notifyTargets(s.config, os.LookupEnv, nil, nomad)
	if err != nil {
		return nil, err
	}
	return notify.New(s, notify.Config{
		Targets: targets, UIURL: s.config.UIURL, Retention: s.config.NotifyRetention,
		Leader: s.name, Registerer: s.metrics,
	}, s.logger), nil
}

// notifyTargets builds the notify targets of a configuration. client sends the HTTP
// requests (nil: a client with a notifyClientTimeout timeout); nomad is the client nomad
// targets dispatch through.
func notifyTargets(cfg *config.Config, lookupEnv func(string) (string, bool), client *http.Client, nomad *nomadapi.Client) ([]*notify.Target, error) {
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
			if nomad == nil {
				return nil, fmt.Errorf("notify %q: a nomad target needs the server's Nomad client", nc.Name)
			}
			ns := nc.NomadNamespace
			if ns == "" {
				ns = "default"
			}
			t.Sender = &notify.NomadDispatch{Client: nomad, Namespace: ns, JobID: nc.NomadJob}
		default:
			return nil, fmt.Errorf("notify %q: kind %q is not supported", nc.Name, nc.Kind)
		}
		out = append(out, t)
	}
	return out, nil
}
