package agent

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/memberlist"
)

// tuneLocal makes gossip quick for servers on one host.
func tuneLocal(c *memberlist.Config) *memberlist.Config {
	l := memberlist.DefaultLocalConfig()
	c.TCPTimeout = l.TCPTimeout
	c.ProbeInterval = l.ProbeInterval
	c.ProbeTimeout = l.ProbeTimeout
	c.GossipInterval = l.GossipInterval
	c.SuspicionMult = l.SuspicionMult
	c.PushPullInterval = l.PushPullInterval
	return c
}

func decodeGossipKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("gossip key is not base64: %w", err)
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("gossip key decodes to %d bytes: must be 16, 24 or 32", len(key))
}

// rpcHTTPClient returns an HTTP client whose connections go to a server's
// RPC port, announced as HTTP traffic. It has no overall timeout: each
// request carries its own deadline in its context.
func (s *Server) rpcHTTPClient(rpcAddr string) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return s.mux.dial(ctx, rpcAddr, rpcHTTP)
			},
			// Writes forwarded at once each hold a connection: keep as
			// many for the next ones rather than dial again each time.
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}
