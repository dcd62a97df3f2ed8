package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/nops-dev/nops/structs"
)

// Errors of membership.
var (
	// ErrNodeNameConflict is a server whose node name another server of
	// the cluster already uses.
	ErrNodeNameConflict = errors.New("node name conflict")
	// ErrUntrustedMember is a serf member whose identity does not check
	// out: another region, an RPC address that does not answer as the
	// member (or, with RPC TLS, without a valid server certificate).
	ErrUntrustedMember = errors.New("member identity does not check out")
	// ErrGossipUnencrypted is a keyring operation on a cluster that gossips
	// in the clear.
	ErrGossipUnencrypted = errors.New("gossip encryption is not enabled (start the servers with encrypt)")
)

// mergeDelegate refuses to merge gossip state in which another server
// claims this server's node name. memberlist would otherwise keep one of
// the two silently, and the servers would never form a cluster. A member
// with this server's name that left, or that gossiped from this server's
// own address (an earlier run of this server, before its data dir was
// replaced), is no conflict.
type mergeDelegate struct {
	m *membership
	// addr and port are this server's gossip address. The delegate runs
	// under memberlist's locks: it must not call into serf or memberlist.
	// port is set once the gossip transport is bound (memberlist picks it
	// when -serf-port is 0), hence atomic.
	addr net.IP
	port atomic.Uint32
}

var _ serf.MergeDelegate = (*mergeDelegate)(nil)

func (d *mergeDelegate) NotifyMerge(members []*serf.Member) error {
	s := d.m.s
	for _, mem := range members {
		if mem.Name != s.name || mem.Tags[structs.MemberTagRole] != structs.MemberRoleNops || mem.Status == serf.StatusLeft {
			continue
		}
		if mem.Addr.Equal(d.addr) && uint32(mem.Port) == d.port.Load() {
			continue
		}
		if id := mem.Tags[structs.MemberTagID]; id != s.nodeID {
			err := fmt.Errorf("%w: node name %s is already used by node ID %s at %s; give every server a unique -node name",
				ErrNodeNameConflict, mem.Name, id, net.JoinHostPort(mem.Addr.String(), strconv.Itoa(int(mem.Port))))
			d.m.setConflict(err)
			d.m.logger.Error("refused gossip from a server with this server's name", "error", err)
			return err
		}
	}
	return nil
}

func (m *membership) setConflict(err error) {
	m.mu.Lock()
	m.conflict = err
	m.mu.Unlock()
}

// takeConflict returns and clears the name conflict seen since the last
// call.
func (m *membership) takeConflict() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.conflict
	m.conflict = nil
	return err
}

// join joins the servers at addrs. A join that failed because another
// server uses this server's name is fatal: the server reports it on
// Fatal, and the caller gets the conflict as the error.
func (m *membership) join(addrs []string) (int, error) {
	m.takeConflict()
	n, err := m.serf.Join(addrs, true)
	if n == 0 {
		if conflict := m.takeConflict(); conflict != nil {
			m.s.fail(conflict)
			return 0, conflict
		}
	}
	return n, err
}

// Fatal is sent the error that stopped the server from working, once: a
// node name another server of the cluster already uses. The caller should
// shut the server down and report it.
func (s *Server) Fatal() <-chan error { return s.fatalCh }

func (s *Server) fail(err error) {
	select {
	case s.fatalCh <- err:
	default:
	}
}

// setupKeyring gives serf its gossip keyring: the keyring file in the data
// dir when a rotation wrote one, else the configured key (written to the
// file so later rotations survive a restart). A dev server keeps no file.
func (m *membership) setupKeyring(sc *serf.Config, keyringPath string) error {
	cfg := m.s.config
	if cfg.Encrypt == "" {
		return nil
	}
	key, err := decodeGossipKey(cfg.Encrypt)
	if err != nil {
		return err
	}
	if keyringPath != "" {
		raw, err := os.ReadFile(keyringPath)
		switch {
		case err == nil:
			kr, inFile, err := loadKeyring(raw)
			if err != nil {
				return fmt.Errorf("gossip keyring file %s: %w", keyringPath, err)
			}
			if !inFile(key) {
				m.logger.Warn("the encrypt key is not in the gossip keyring file; using the keyring file, as rotated with \"nops operator gossip keyring\"",
					"keyring_file", keyringPath)
			}
			sc.MemberlistConfig.Keyring = kr
			sc.KeyringFile = keyringPath
			return nil
		case errors.Is(err, os.ErrNotExist):
		default:
			return fmt.Errorf("read gossip keyring file: %w", err)
		}
	}
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		return fmt.Errorf("gossip keyring: %w", err)
	}
	sc.MemberlistConfig.Keyring = kr
	if keyringPath != "" {
		enc, _ := json.Marshal([]string{cfg.Encrypt})
		if err := os.WriteFile(keyringPath, enc, 0o600); err != nil {
			return fmt.Errorf("write gossip keyring file: %w", err)
		}
		sc.KeyringFile = keyringPath
	}
	return nil
}

// loadKeyring decodes a keyring file as serf writes it: a JSON list of
// base64 keys, the primary first.
func loadKeyring(raw []byte) (*memberlist.Keyring, func([]byte) bool, error) {
	var encoded []string
	if err := json.Unmarshal(raw, &encoded); err != nil {
		return nil, nil, fmt.Errorf("not a JSON list of keys: %w", err)
	}
	if len(encoded) == 0 {
		return nil, nil, errors.New("no key")
	}
	var keys [][]byte
	for _, e := range encoded {
		k, err := decodeGossipKey(e)
		if err != nil {
			return nil, nil, err
		}
		keys = append(keys, k)
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, nil, err
	}
	has := func(key []byte) bool {
		for _, k := range keys {
			if string(k) == string(key) {
				return true
			}
		}
		return false
	}
	return kr, has, nil
}

// verifyMember checks that a serf member is the server it claims to be
// before it becomes a Raft voter: same region, and its RPC address answers
// (over mutual TLS when RPC TLS is on, so with a valid server certificate
// of this region) with the node ID and the serf name the member claims.
func (m *membership) verifyMember(si serverInfo) error {
	region := m.s.config.Region
	if si.Region != region {
		return fmt.Errorf("%w: %s is in region %q, this cluster is %q", ErrUntrustedMember, si.Name, si.Region, region)
	}
	if _, err := uuid.Parse(si.ID); err != nil {
		return fmt.Errorf("%w: %s has no valid node ID", ErrUntrustedMember, si.Name)
	}
	host, _, err := net.SplitHostPort(si.RPCAddr)
	if err != nil || net.ParseIP(host) == nil {
		return fmt.Errorf("%w: %s has no valid RPC address (%q)", ErrUntrustedMember, si.Name, si.RPCAddr)
	}
	self, err := m.probeNode(si.RPCAddr)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUntrustedMember, si.Name, err)
	}
	if self.NodeID != si.ID {
		return fmt.Errorf("%w: %s claims node ID %s, but its RPC address %s answers as %s",
			ErrUntrustedMember, si.Name, si.ID, si.RPCAddr, self.NodeID)
	}
	if self.Name != si.Name {
		return fmt.Errorf("%w: %s claims node ID %s, but its RPC address %s answers under the name %q",
			ErrUntrustedMember, si.Name, si.ID, si.RPCAddr, self.Name)
	}
	return nil
}

// probeNode asks the server at an RPC address which server it is (over
// mutual TLS when RPC TLS is on).
func (m *membership) probeNode(rpcAddr string) (*structs.NodeStatus, error) {
	m.probes.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+rpcAddr+"/v1/status/node", nil)
	if err != nil {
		return nil, fmt.Errorf("RPC address %s: %w", rpcAddr, err)
	}
	client := m.s.rpcHTTPClient(rpcAddr)
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no answer at RPC address %s: %w", rpcAddr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("RPC address %s answers %d", rpcAddr, resp.StatusCode)
	}
	var self structs.NodeStatus
	if err := json.Unmarshal(body, &self); err != nil {
		return nil, fmt.Errorf("decode the answer of RPC address %s: %w", rpcAddr, err)
	}
	return &self, nil
}

// Keyring runs a keyring operation on every server through serf:
// "list", "install", "use" or "remove" (key is the base64 key).
func (s *Server) Keyring(op, key string) (*structs.KeyringResponse, error) {
	if s.membership == nil || !s.membership.serf.EncryptionEnabled() {
		return nil, fmt.Errorf("%w: %w", structs.ErrInvalid, ErrGossipUnencrypted)
	}
	if op != "list" {
		if _, err := decodeGossipKey(key); err != nil {
			return nil, fmt.Errorf("%w: key: %w", structs.ErrInvalid, err)
		}
	}
	km := s.membership.serf.KeyManager()
	var resp *serf.KeyResponse
	var err error
	switch op {
	case "list":
		resp, err = km.ListKeys()
	case "install":
		resp, err = km.InstallKey(key)
	case "use":
		resp, err = km.UseKey(key)
	case "remove":
		resp, err = km.RemoveKey(key)
	default:
		return nil, fmt.Errorf("%w: unknown keyring operation %q", structs.ErrInvalid, op)
	}
	out := &structs.KeyringResponse{Keys: map[string]int{}, PrimaryKeys: map[string]int{}}
	if resp != nil {
		out.NumNodes, out.NumResp, out.NumErr = resp.NumNodes, resp.NumResp, resp.NumErr
		for k, n := range resp.Keys {
			out.Keys[KeyFingerprint(k)] = n
		}
		for k, n := range resp.PrimaryKeys {
			out.PrimaryKeys[KeyFingerprint(k)] = n
		}
		if len(resp.Messages) > 0 {
			out.Messages = resp.Messages
		}
	}
	if err != nil {
		s.logger.Warn("gossip keyring operation failed", "op", op, "error", err)
		return out, fmt.Errorf("keyring %s: %w", op, err)
	}
	s.logger.Info("gossip keyring operation", "op", op, "servers", out.NumResp)
	return out, nil
}

// KeyFingerprint names a base64 gossip key without revealing it: "sha256:"
// and the first 16 hex digits of the SHA-256 of the key's bytes.
func KeyFingerprint(key string) string {
	raw, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		raw = []byte(key)
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// gossipKeyBytes is the size of a generated gossip key: 32 bytes selects
// AES-256, the largest key memberlist takes (16, 24 or 32).
const gossipKeyBytes = 32

// GenerateGossipKey returns a new random 32-byte gossip key, base64.
func GenerateGossipKey() (string, error) {
	key := make([]byte, gossipKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generate gossip key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(key), nil
}
