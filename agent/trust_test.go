package agent_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/agent/tlsutil"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// The first byte of a connection to the RPC port names its protocol.
const (
	rpcRaftByte = 0x01
	rpcHTTPByte = 0x02
)

// dialLayer is the raft.StreamLayer of an attacker: its connections to the
// target's RPC port are opened by dial.
type dialLayer struct {
	dial   func(addr string) (net.Conn, error)
	closed chan struct{}
}

func (l *dialLayer) Accept() (net.Conn, error) { <-l.closed; return nil, net.ErrClosed }
func (l *dialLayer) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}
func (l *dialLayer) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (l *dialLayer) Dial(addr raft.ServerAddress, _ time.Duration) (net.Conn, error) {
	return l.dial(string(addr))
}

// plainDial opens a TCP connection and sends the protocol byte, as a server
// without TLS does.
func plainDial(proto byte) func(string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		return sendProto(conn, err, proto)
	}
}

// sendProto sends the protocol byte on conn, just dialled with the error
// err, and returns it, or closes it if the byte cannot be sent.
func sendProto(conn net.Conn, err error, proto byte) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte{proto}); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// tlsDial opens a TLS connection that presents cert (and does not check
// the server), then sends the protocol byte inside it.
func tlsDial(t *testing.T, certFile, keyFile string, proto byte) func(string) (net.Conn, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return func(addr string) (net.Conn, error) {
		d := &net.Dialer{Timeout: 5 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{
			Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, //nolint:gosec // an attacker
		})
		if err != nil {
			return nil, err
		}
		return sendProto(conn, nil, proto)
	}
}

func raftTerm(t *testing.T, s *nopstest.Server) uint64 {
	t.Helper()
	term, err := strconv.ParseUint(s.Raft().Stats()["term"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return term
}

// fakeLeaderAppend plays a leader with a much higher term that appends and
// commits a global pause on s, over connections opened by dial.
func fakeLeaderAppend(t *testing.T, s *nopstest.Server, dial func(string) (net.Conn, error)) error {
	t.Helper()
	layer := &dialLayer{dial: dial, closed: make(chan struct{})}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 1, Timeout: 5 * time.Second, Logger: hclog.NewNullLogger(),
	})
	defer trans.Close()
	// The fake entry goes right after the server's last one: wait until
	// the server's own writes (those of a new leader) are over, or one
	// that lands in between takes the fake entry's index and the server
	// never applies it.
	waitQuiet(t, s)
	stats := s.Raft().Stats()
	last := s.Raft().LastIndex()
	lastTerm, _ := strconv.ParseUint(stats["last_log_term"], 10, 64)
	term := raftTerm(t, s) + 100
	buf, err := structs.Encode(structs.PauseRequestType, &structs.PauseRequest{
		WriteMeta: structs.WriteMeta{Time: time.Now().UTC(), Actor: "attacker"}, Global: true, Reason: "taken over",
	})
	if err != nil {
		t.Fatal(err)
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
		Term:         term,
		PrevLogEntry: last, PrevLogTerm: lastTerm,
		Entries:           []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: buf}},
		LeaderCommitIndex: last + 1,
	}
	var resp raft.AppendEntriesResponse
	if err := trans.AppendEntries(raft.ServerID(s.NodeID()), raft.ServerAddress(s.RPCAddr()), req, &resp); err != nil {
		return err
	}
	if !resp.Success {
		return fmt.Errorf("append refused by raft (term %d)", resp.Term)
	}
	return nil
}

// waitQuiet waits until a server has applied its whole log and its log
// has not grown for a while.
func waitQuiet(t *testing.T, s *nopstest.Server) {
	t.Helper()
	last, since := s.Raft().LastIndex(), time.Now()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		if n := s.Raft().LastIndex(); n != last {
			last, since = n, time.Now()
		}
		quiet := time.Since(since) >= 300*time.Millisecond && s.Raft().AppliedIndex() == last
		return quiet, fmt.Errorf("the log still grows (last index %d, applied %d)", last, s.Raft().AppliedIndex())
	})
}

// attackerPause returns the pause the fake leader appended, if applied.
func attackerPause(t *testing.T, s *nopstest.Server) *structs.Pause {
	t.Helper()
	pauses, err := s.State().Pauses()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pauses {
		if p.Actor == "attacker" {
			return p
		}
	}
	return nil
}

// TestTrust_PlainRPCPortTakenOver shows the attack the RPC TLS stops: on a
// server without RPC TLS a fake leader with a higher term appends a pause
// that the server applies. It keeps the attack code honest: the same code
// is refused below only because of TLS.
func TestTrust_PlainRPCPortTakenOver(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	if err := fakeLeaderAppend(t, s, plainDial(rpcRaftByte)); err != nil {
		t.Fatalf("the attack failed on a plain RPC port: %v", err)
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return attackerPause(t, s) != nil, errors.New("the fake leader's pause is not applied")
	})
}

// TestTrust_RaftPeerWithoutValidCertificateRefused attacks a server with
// RPC TLS as a fake leader over plain TCP and with certificates that are
// not a server certificate of the cluster: each connection is refused
// before Raft sees a byte, the server's term does not move, and nothing is
// applied.
func TestTrust_RaftPeerWithoutValidCertificateRefused(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(files, false))

	other := nopstest.NewTLS(t, "")
	otherRegionCert, otherRegionKey := files.NewCert(t, tlsutil.CertOptions{Kind: tlsutil.KindServer, Region: "elsewhere"}, "server-elsewhere")
	attacks := []struct {
		name string
		dial func(string) (net.Conn, error)
	}{
		{"plain TCP speaking the Raft byte", plainDial(rpcRaftByte)},
		{"TLS with a server certificate of another CA", tlsDial(t, other.ServerCertFile, other.ServerKeyFile, rpcRaftByte)},
		{"TLS with a CLI certificate of the cluster's CA", tlsDial(t, files.CLICertFile, files.CLIKeyFile, rpcRaftByte)},
		{"TLS with a server certificate of another region", tlsDial(t, otherRegionCert, otherRegionKey, rpcRaftByte)},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			before := raftTerm(t, s)
			if err := fakeLeaderAppend(t, s, a.dial); err == nil {
				t.Fatal("the fake leader's append was accepted")
			}
			if after := raftTerm(t, s); after != before {
				t.Fatalf("the server's term moved from %d to %d: Raft saw the fake leader", before, after)
			}
			if p := attackerPause(t, s); p != nil {
				t.Fatalf("the fake leader's pause was applied: %+v", p)
			}
			if !s.IsLeader() {
				t.Fatal("the server lost its leadership")
			}
		})
	}
	// A write through the real leader still works, and after it there is
	// still no attacker's pause.
	if _, err := s.Apply(structs.PauseRequestType, &structs.PauseRequest{
		WriteMeta: structs.WriteMeta{Time: time.Now().UTC(), Actor: "tester"}, Namespace: "default", JobID: "web", Reason: "legit",
	}); err != nil {
		t.Fatal(err)
	}
	if p := attackerPause(t, s); p != nil {
		t.Fatalf("the fake leader's pause was applied: %+v", p)
	}
}

// forwardRequest sends GET /v1/agent/self on the forwarding side of the
// RPC port and returns what came back (an error when nothing did).
func forwardRequest(dial func(string) (net.Conn, error), addr string) (string, error) {
	conn, err := dial(addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /v1/agent/self HTTP/1.1\r\nHost: nops\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	raw, err := io.ReadAll(bufio.NewReader(conn))
	if len(raw) == 0 && err == nil {
		err = io.EOF
	}
	return string(raw), err
}

// TestTrust_ForwardingWithoutValidCertificateRefused: without RPC TLS the
// forwarding side of the RPC port serves the API to anyone; with it, a
// plain or wrongly certified connection gets nothing.
func TestTrust_ForwardingWithoutValidCertificateRefused(t *testing.T) {
	plain := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	got, err := forwardRequest(plainDial(rpcHTTPByte), plain.RPCAddr())
	if err != nil || !strings.Contains(got, plain.NodeID()) {
		t.Fatalf("control: a plain RPC port should serve the API: %q, %v", got, err)
	}

	files := nopstest.NewTLS(t, "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(files, false))
	other := nopstest.NewTLS(t, "")
	for _, a := range []struct {
		name string
		dial func(string) (net.Conn, error)
	}{
		{"plain TCP", plainDial(rpcHTTPByte)},
		{"TLS with a certificate of another CA", tlsDial(t, other.ServerCertFile, other.ServerKeyFile, rpcHTTPByte)},
		{"TLS with a CLI certificate of the cluster's CA", tlsDial(t, files.CLICertFile, files.CLIKeyFile, rpcHTTPByte)},
	} {
		t.Run(a.name, func(t *testing.T) {
			got, err := forwardRequest(a.dial, s.RPCAddr())
			if err == nil && strings.Contains(got, "HTTP/1.1") {
				t.Fatalf("the forwarding port answered: %q", got)
			}
			if strings.Contains(got, s.NodeID()) {
				t.Fatalf("the forwarding port leaked the API: %q", got)
			}
		})
	}
	// A server's own certificate opens it, inside TLS.
	got, err = forwardRequest(tlsDial(t, files.ServerCertFile, files.ServerKeyFile, rpcHTTPByte), s.RPCAddr())
	if err != nil || !strings.Contains(got, s.NodeID()) {
		t.Fatalf("a server certificate should open the forwarding port: %q, %v", got, err)
	}
}

// TestTrust_HTTPTLS: with HTTP TLS a plain-HTTP client gets no API, and
// with verify_incoming a client without a certificate of the CA is
// refused.
func TestTrust_HTTPTLS(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(files, true))
	if !strings.HasPrefix(s.URL, "https://") {
		t.Fatalf("URL %s is not https", s.URL)
	}
	path := "/v1/agent/self"

	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.HTTPAddr() + path)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), s.NodeID()) {
			t.Fatalf("a plain-HTTP client got the API: %d %s", resp.StatusCode, body)
		}
	}

	noCert := files.ClientConfig(t)
	noCert.Certificates = nil
	other := nopstest.NewTLS(t, "")
	otherCert := files.ClientConfig(t)
	otherCert.Certificates = other.ClientConfig(t).Certificates
	for _, c := range []struct {
		name string
		tc   *tls.Config
	}{{"no client certificate", noCert}, {"a client certificate of another CA", otherCert}} {
		t.Run(c.name, func(t *testing.T) {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c.tc}}
			resp, err := client.Get(s.URL + path)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Fatalf("refused client got an answer: %d %s", resp.StatusCode, body)
			}
		})
	}

	var self structs.AgentSelf
	if code, body := s.Do("GET", path, nil, &self); code != http.StatusOK || self.NodeID != s.NodeID() {
		t.Fatalf("a client with the CLI certificate: %d %s", code, body)
	}
}

// TestTrust_TLSReload: ReloadTLS reads the certificate files again; new
// connections get the new certificate, and a broken file keeps the old one
// in use.
func TestTrust_TLSReload(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(files, true))
	serial := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", s.HTTPAddr(), files.ClientConfig(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()

	cert, err := files.CA.NewCert(tlsutil.CertOptions{Kind: tlsutil.KindServer})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, files.ServerCertFile, cert.CertPEM)
	writeFile(t, files.ServerKeyFile, cert.KeyPEM)
	if err := s.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	second := serial()
	if second == first {
		t.Fatal("the server still presents the old certificate after a reload")
	}

	writeFile(t, files.ServerCertFile, []byte("not a certificate"))
	if err := s.ReloadTLS(); err == nil {
		t.Fatal("reload of a broken certificate file succeeded")
	}
	if serial() != second {
		t.Fatal("a failed reload changed the certificate in use")
	}
	// The RPC port still takes the cluster's own certificate.
	if got, err := forwardRequest(tlsDial(t, files.CLICertFile, files.CLIKeyFile, rpcHTTPByte), s.RPCAddr()); err == nil && strings.Contains(got, s.NodeID()) {
		t.Fatal("the CLI certificate opened the RPC port after a reload")
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// configIndex returns the Raft index of s's latest configuration: any
// change of the peers, even one undone later, moves it.
func configIndex(s *nopstest.Server) string { return s.Raft().Stats()["latest_configuration_index"] }

// onlyPeer fails unless s's Raft configuration is s alone at its address,
// unchanged since the configuration at index before.
func onlyPeer(t *testing.T, s *nopstest.Server, before string) {
	t.Helper()
	if after := configIndex(s); after != before {
		t.Errorf("the raft configuration changed (index %s, was %s)", after, before)
	}
	servers, err := nopstest.RaftServers(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 1 || servers[s.NodeID()].Address != raft.ServerAddress(s.RPCAddr()) {
		t.Fatalf("raft configuration changed: %v", servers)
	}
}

// TestTrust_UntrustedMembersAreNotVoters: a serf member with a bogus RPC
// address, one of another region, and one claiming an existing peer's ID
// from another address are not made voters, and do not move the peer.
func TestTrust_UntrustedMembersAreNotVoters(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	other := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	before := configIndex(s)

	nopstest.FakeMember(t, s, "bogus-addr", nopstest.MemberTags(uuid.NewString(), "127.0.0.1:1", "global"))
	nopstest.FakeMember(t, s, "foreign", nopstest.MemberTags(other.NodeID(), other.RPCAddr(), "elsewhere"))
	nopstest.FakeMember(t, s, "impostor", nopstest.MemberTags(s.NodeID(), "127.0.0.1:2", "global"))
	// A lying peer: its RPC address answers with the node ID of the
	// existing peer it claims to be.
	nopstest.FakeMember(t, s, "mover", nopstest.MemberTags(s.NodeID(), lyingRPC(t, s.NodeID()), "global"))
	nopstest.FakeMember(t, s, "liar", nopstest.MemberTags(uuid.NewString(), other.RPCAddr(), "global"))
	s.ReconcilePeersNow()
	onlyPeer(t, s, before)
	if !s.IsLeader() {
		t.Fatal("the server lost its leadership")
	}
}

// lyingRPC serves, on a plain RPC port of its own, /v1/status/node with the
// node ID id, and returns its address.
func lyingRPC(t *testing.T, id string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	body := fmt.Sprintf(`{"node_id":%q}`, id)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(conn)
				if b, err := br.ReadByte(); err != nil || b != rpcHTTPByte {
					return
				}
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestTrust_MemberWithoutServerCertificateIsNotVoter: with RPC TLS, a
// member whose RPC address answers with the right node ID but without a
// server certificate of the cluster is not made a voter.
func TestTrust_MemberWithoutServerCertificateIsNotVoter(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(files, false))
	// A real server without TLS: it answers /v1/status/node with its ID.
	plain := nopstest.Start(t, "", nopstest.WithoutReconcilers())
	before := configIndex(s)
	nopstest.FakeMember(t, s, "no-cert", nopstest.MemberTags(plain.NodeID(), plain.RPCAddr(), "global"))
	s.ReconcilePeersNow()
	onlyPeer(t, s, before)
}

// TestTrust_DuplicateNodeNameRefused: a server with the name of a server
// of the cluster cannot join it; it says which server has the name.
func TestTrust_DuplicateNodeNameRefused(t *testing.T) {
	first := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) { c.NodeName = "dup" }))
	second := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) { c.NodeName = "dup" }))
	_, err := second.Join([]string{first.SerfAddr()})
	if !errors.Is(err, agent.ErrNodeNameConflict) {
		t.Fatalf("join with a duplicate name: %v", err)
	}
	want := fmt.Sprintf("node name dup is already used by node ID %s at %s", first.NodeID(), first.SerfAddr())
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	select {
	case ferr := <-second.Fatal():
		if !errors.Is(ferr, agent.ErrNodeNameConflict) {
			t.Fatalf("fatal error: %v", ferr)
		}
	default:
		t.Fatal("the conflict was not reported on Fatal")
	}
	for _, m := range first.Members() {
		if m.Name == "dup" && m.Tags["id"] != first.NodeID() {
			t.Fatalf("the first server's member list took the second server: %+v", m)
		}
	}

	// Through -retry-join, the server reports the conflict on Fatal.
	cfg := nopstest.Config(t, t.TempDir())
	cfg.NodeName = "dup"
	cfg.RetryJoin = []string{first.SerfAddr()}
	third := nopstest.StartWith(t, cfg, nopstest.WithoutReconcilers())
	select {
	case ferr := <-third.Fatal():
		if !strings.Contains(ferr.Error(), "node name dup is already used by node ID "+first.NodeID()) {
			t.Fatalf("fatal error: %v", ferr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a server with a duplicate name joined through -retry-join without an error")
	}
}

// TestTrust_GossipKeyRotation rotates the gossip key of a 3-server cluster
// through the API, then restarts a server with its old encrypt setting: its
// keyring file has the new key, and it rejoins.
func TestTrust_GossipKeyRotation(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	s := c.Servers()[1]
	newKey, err := agent.GenerateGossipKey()
	if err != nil {
		t.Fatal(err)
	}
	var resp structs.KeyringResponse
	for _, step := range []struct{ method, path string }{
		{"POST", "/v1/operator/keyring/install"}, {"POST", "/v1/operator/keyring/use"},
	} {
		if code, body := s.Do(step.method, step.path, structs.KeyringOp{Key: newKey}, &resp); code != http.StatusOK || resp.NumErr != 0 || resp.NumResp != 3 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, code, body)
		}
	}
	if code, body := s.Do("DELETE", "/v1/operator/keyring", structs.KeyringOp{Key: nopstest.GossipKey}, &resp); code != http.StatusOK {
		t.Fatalf("remove the old key: %d %s", code, body)
	}
	resp = structs.KeyringResponse{}
	if code, body := s.Do("GET", "/v1/operator/keyring", nil, &resp); code != http.StatusOK || strings.Contains(body, newKey) {
		t.Fatalf("list: %d %s", code, body)
	}
	fp := agent.KeyFingerprint(newKey)
	if len(resp.Keys) != 1 || resp.Keys[fp] != 3 || resp.PrimaryKeys[fp] != 3 {
		t.Fatalf("after rotation: %+v", resp)
	}
	if code, body := s.Do("POST", "/v1/operator/keyring/install", structs.KeyringOp{Key: "c2hvcnQ="}, nil); code != http.StatusBadRequest {
		t.Fatalf("install of a short key: %d %s", code, body)
	}

	// The restarted server starts with the old key in its configuration;
	// its keyring file has the new one.
	r := c.Restart(2)
	c.WaitForLeader(30 * time.Second)
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		alive := 0
		for _, m := range r.Members() {
			if m.Status == serf.StatusAlive {
				alive++
			}
		}
		return alive == 3, fmt.Errorf("the restarted server sees %d alive members", alive)
	})
	resp = structs.KeyringResponse{}
	if code, body := r.Do("GET", "/v1/operator/keyring", nil, &resp); code != http.StatusOK || resp.PrimaryKeys[fp] != 3 {
		t.Fatalf("list after restart: %d %s", code, body)
	}
}

// TestTrust_ReplacedDataDirRejoins: a server started again on its address
// with an empty data dir (a new node ID, the same name) is no name
// conflict: it joins.
func TestTrust_ReplacedDataDirRejoins(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.Kill(2)
	if err := os.RemoveAll(c.Config(2).DataDir); err != nil {
		t.Fatal(err)
	}
	s := c.Start(2)
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		select {
		case err := <-s.Fatal():
			t.Fatalf("the replaced server stopped: %v", err)
		default:
		}
		alive := 0
		for _, m := range s.Members() {
			if m.Status == serf.StatusAlive {
				alive++
			}
		}
		return alive == 3, fmt.Errorf("the replaced server sees %d alive members", alive)
	})
}

// TestTrust_BadTLSFilesFailAtStart: a tls block whose files cannot serve
// stops the start with an error naming the problem.
func TestTrust_BadTLSFilesFailAtStart(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	other := nopstest.NewTLS(t, "")
	clientCert, clientKey := files.NewCert(t, tlsutil.CertOptions{Kind: tlsutil.KindClient}, "client")
	regionCert, regionKey := files.NewCert(t, tlsutil.CertOptions{Kind: tlsutil.KindServer, Region: "elsewhere"}, "elsewhere")
	cases := []struct {
		name   string
		modify func(*config.TLSConfig)
		want   string
	}{
		{"missing key file", func(c *config.TLSConfig) { c.KeyFile = filepath.Join(t.TempDir(), "nope.pem") }, "load cert_file"},
		{"CA of another PKI", func(c *config.TLSConfig) { c.CAFile = other.CAFile }, "cannot serve the RPC port"},
		{"client certificate as a server's", func(c *config.TLSConfig) { c.CertFile, c.KeyFile = clientCert, clientKey }, "not a server certificate"},
		{"server certificate of another region", func(c *config.TLSConfig) { c.CertFile, c.KeyFile = regionCert, regionKey }, "server.global.nops"},
		{"CA file without a certificate", func(c *config.TLSConfig) { c.CAFile = files.ServerKeyFile }, "holds no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := nopstest.Config(t, t.TempDir())
			cfg.TLS = config.TLSConfig{RPC: true, HTTP: true, CAFile: files.CAFile, CertFile: files.ServerCertFile,
				KeyFile: files.ServerKeyFile, VerifyServerHostname: true}
			cfg.InsecureRPC = false
			tc.modify(&cfg.TLS)
			s, err := agent.New(cfg, hclog.NewNullLogger(), agent.Options{})
			if err == nil {
				s.Shutdown()
				t.Fatal("the server started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// TestTrust_IdleRPCConnectionsAreBounded: connections that open the RPC
// port and send nothing hold at most agent.MaxPendingRPC slots; past that
// a new connection is closed at once, and the server keeps working.
func TestTrust_IdleRPCConnectionsAreBounded(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(files, false))
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range agent.MaxPendingRPC {
		c, err := net.Dial("tcp", s.RPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// The server accepts asynchronously: poll until one more connection
	// is refused at once.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		c, err := net.Dial("tcp", s.RPCAddr())
		if err != nil {
			return false, err
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err = c.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		return false, fmt.Errorf("connection %d was kept open: %v", agent.MaxPendingRPC+1, err)
	})
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	// Slots free again: a server's own certificate opens the forwarding
	// port.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		got, err := forwardRequest(tlsDial(t, files.ServerCertFile, files.ServerKeyFile, rpcHTTPByte), s.RPCAddr())
		return err == nil && strings.Contains(got, s.NodeID()), fmt.Errorf("forwarding after the idle connections closed: %q, %v", got, err)
	})
	if !s.IsLeader() {
		t.Fatal("the server lost its leadership")
	}
}
