package agent_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// Bytes of the RPC port's framing: the mux's protocol byte of Raft and
// hashicorp/raft's NetworkTransport type byte of AppendEntries.
const (
	muxRaftByte          = 0x01
	raftAppendEntriesRPC = 0x00
	// tlsAlertRecord is the first byte of a TLS alert record.
	tlsAlertRecord = 0x15
)

// poisonedAppendEntries is the forged AppendEntries of the reported
// attack: a far newer term, one entry a million indexes past the log and a
// commit index that points at it.
func poisonedAppendEntries() *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("attacker"), Addr: []byte("127.0.0.1:1")},
		Term:              1000,
		Entries:           []*raft.Log{{Index: 1000000, Term: 1000, Type: raft.LogCommand}},
		LeaderCommitIndex: 1000000,
	}
}

// sendRaftRPC opens a plain TCP connection to addr and sends the Raft
// protocol byte and req framed as NetworkTransport frames an
// AppendEntries. It returns the connection, to read the answer from within
// 30 seconds.
func sendRaftRPC(t *testing.T, addr string, req *raft.AppendEntriesRequest) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var buf bytes.Buffer
	buf.Write([]byte{muxRaftByte, raftAppendEntriesRPC})
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = true
	enc := codec.NewEncoder(&buf, h)
	if err := enc.Encode(req); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readRaftAnswer decodes NetworkTransport's answer to an RPC: an error
// string, then the response.
func readRaftAnswer(conn net.Conn) (string, *raft.AppendEntriesResponse, error) {
	dec := codec.NewDecoder(bufio.NewReader(conn), &codec.MsgpackHandle{})
	var rpcErr string
	if err := dec.Decode(&rpcErr); err != nil {
		return "", nil, fmt.Errorf("reading the answer's error: %w", err)
	}
	var resp raft.AppendEntriesResponse
	if err := dec.Decode(&resp); err != nil {
		return "", nil, fmt.Errorf("reading the response: %w", err)
	}
	return rpcErr, &resp, nil
}

// One forged AppendEntries on a plain RPC port (insecure_rpc) neither
// stops the server nor poisons its data dir: the request is refused with
// an error that says why, the server leads again, and it starts again from
// its data dir.
func TestRPCAttack_PoisonedAppendEntriesIsRefused(t *testing.T) {
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/README", "no jobs")
	repo.Commit("empty")
	c := nopstest.StartProcessCluster(t, 1, testutil.ClosedAddress(t), repo.URL()+"#main:jobs", "-insecure-rpc")
	p := c.Server(0)

	rpcErr, resp, err := readRaftAnswer(sendRaftRPC(t, p.RPCAddr, poisonedAppendEntries()))
	if err != nil {
		t.Fatalf("no answer to a forged AppendEntries (server running: %t): %v", p.Running(), err)
	}
	if resp.Success || !strings.Contains(rpcErr, "refused AppendEntries") || !strings.Contains(rpcErr, "1000000") {
		t.Fatalf("answer: error %q, success %t; want a refusal that names index 1000000", rpcErr, resp.Success)
	}

	c.Leader()
	c.Stop(0)
	c.Restart(0)
	c.Leader()
}

// With RPC TLS the same plain-TCP packet never reaches Raft: the handshake
// fails on its first byte, the server answers at most a TLS alert, and its
// term and log stay as they were.
func TestRPCAttack_PlainPacketRefusedByRPCTLS(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(files, false))
	term, last := s.Raft().Stats()["term"], s.Raft().LastIndex()

	// The server closes the connection after the failed handshake; a
	// deadline instead would fail the read.
	raw, err := io.ReadAll(sendRaftRPC(t, s.RPCAddr(), poisonedAppendEntries()))
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the answer: %v (after %q)", err, raw)
	}
	if len(raw) > 0 && raw[0] != tlsAlertRecord {
		t.Fatalf("the server answered a plain-TCP Raft RPC with %d bytes that are not a TLS alert: %q", len(raw), raw)
	}
	if got := s.Raft().Stats()["term"]; got != term {
		t.Errorf("term moved from %s to %s", term, got)
	}
	if got := s.Raft().LastIndex(); got != last {
		t.Errorf("last index moved from %d to %d", last, got)
	}
	if !s.IsLeader() {
		t.Error("the server is no longer the leader")
	}
}

// lockedBuffer is a buffer a logger writes to from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A server that runs with insecure_rpc says at start, as a warning, that
// anyone who reaches its RPC port controls the cluster; with RPC TLS it
// does not.
func TestInsecureRPC_WarnsAtStart(t *testing.T) {
	const warning = "RPC TLS IS DISABLED (insecure_rpc)"
	start := func(t *testing.T, mutate func(*config.Config)) string {
		var out lockedBuffer
		cfg := nopstest.Config(t, t.TempDir())
		mutate(cfg)
		s, err := agent.New(cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &out}), agent.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.Shutdown()
		return out.String()
	}
	t.Run("insecure", func(t *testing.T) {
		log := start(t, func(*config.Config) {})
		if !strings.Contains(log, "[WARN]") || !strings.Contains(log, warning) || !strings.Contains(log, "anyone who can reach it controls the cluster") {
			t.Fatalf("no warning that the RPC port is open to anyone:\n%s", log)
		}
	})
	t.Run("rpc tls", func(t *testing.T) {
		f := nopstest.NewTLS(t, "")
		log := start(t, func(c *config.Config) {
			c.InsecureRPC = false
			c.TLS = config.TLSConfig{RPC: true, CAFile: f.CAFile, CertFile: f.ServerCertFile, KeyFile: f.ServerKeyFile}
		})
		if strings.Contains(log, warning) {
			t.Fatalf("warned of insecure RPC with RPC TLS on:\n%s", log)
		}
	})
}
