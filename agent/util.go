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

// freePortTries bounds the TCP ports freeUDPTCPPort tries: one taken for
// UDP is rare, so 50 misses in a row mean something else is wrong.
const freePortTries = 50

// freeUDPTCPPort finds a port free for both TCP and UDP, as gossip needs.
func freeUDPTCPPort(bind string) (int, error) {
	for i := 0; i < freePortTries; i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(bind, "0"))
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		pc, err := net.ListenPacket("udp", net.JoinHostPort(bind, fmt.Sprint(port)))
		if err != nil {
			continue
		}
		pc.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no port free for both tcp and udp")
}

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
