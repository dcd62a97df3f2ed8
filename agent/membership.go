package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
)

const (
	// raftChangeEnqueue bounds the wait for Raft to take a configuration
	// change (add a non-voter, remove a server) into its queue.
	raftChangeEnqueue = 10 * time.Second
	// raftChangeWait bounds the wait for that change to commit: the queue
	// wait plus a few heartbeats of a loaded cluster.
	raftChangeWait = 15 * time.Second
	// peerCallTimeout bounds one call to a peer's RPC port or to a discovery
	// provider: a live server answers in milliseconds, and a slow one must
	// not hold up the join or reconcile loop.
	peerCallTimeout = 5 * time.Second
	// bootstrapPeerTimeout bounds the ask of one peer for its Raft peers
	// before bootstrap; peers are asked in turn, and a silent one puts the
	// bootstrap off to the next try.
	bootstrapPeerTimeout = 3 * time.Second
	// maxPeerAnswer bounds the body read from a peer's status endpoints,
	// which hold a few hundred bytes per server.
	maxPeerAnswer = 1 << 20
	// serfEventBuffer holds serf events while the event loop is busy, so
	// that a burst of joins (a whole cluster starting) does not block serf.
	serfEventBuffer = 256
	// joinRetryFast and joinRetrySlow pace retry-join: fast until there is
	// a leader and another alive server, then slow for servers lost since.
	joinRetryFast = time.Second
	joinRetrySlow = 30 * time.Second
	// peerReconcileInterval paces the leader's check of the Raft peers
	// against serf, besides the checks each serf event triggers.
	peerReconcileInterval = 10 * time.Second
)

// serverInfo is a Nops server as gossip describes it.
type serverInfo struct {
	Name            string
	ID              string
	RPCAddr         string
	HTTPAddr        string
	Region          string
	BootstrapExpect int
	// ACL is the peer's acl.enabled ("true" or "false").
	ACL    string
	Status serf.MemberStatus
}

func parseMember(m serf.Member) (serverInfo, bool) {
	if m.Tags[structs.MemberTagRole] != structs.MemberRoleNops {
		return serverInfo{}, false
	}
	expect, _ := strconv.Atoi(m.Tags[structs.MemberTagBootstrapExpect])
	return serverInfo{
		Name: m.Name, ID: m.Tags[structs.MemberTagID], RPCAddr: m.Tags[structs.MemberTagRPCAddr], HTTPAddr: m.Tags[structs.MemberTagHTTPAddr],
		Region: m.Tags[structs.MemberTagRegion], BootstrapExpect: expect, ACL: m.Tags[structs.MemberTagACL], Status: m.Status,
	}, true
}

// membership runs serf gossip between servers: joining (retry-join and
// discovery), bootstrap with -bootstrap-expect, and, on the leader, keeping
// the Raft configuration in line with the live members.
type membership struct {
	s       *Server
	logger  hclog.Logger
	serf    *serf.Serf
	eventCh chan serf.Event
	// reconcileCh wakes the leader's reconcile of Raft peers.
	reconcileCh chan struct{}
	// bindCh wakes bindLoop.
	bindCh chan struct{}
	// probes counts the identity probes of peers (for tests).
	probes atomic.Uint64
	// merge is the serf merge delegate, told the gossip port once bound.
	merge *mergeDelegate

	mu           sync.Mutex
	bootstrapped bool
	// bindings holds the member each Raft peer speaks through, by node ID
	// (membership_peers.go); this server's own is implied.
	bindings map[raft.ServerID]peerBinding
	// refused holds the members refused at the last check, by name, with
	// the reason, so each is logged once.
	refused map[string]string
	// conflict is the node name conflict seen by the merge delegate
	// since the last join attempt.
	conflict error

	discover         []func(ctx context.Context) ([]string, error)
	consulDeregister func()

	stopCh chan struct{}
	wg     sync.WaitGroup
}

// startMembership starts serf, Consul discovery when configured, and the
// loops that follow serf's events. The server has its membership as soon
// as serf runs, so that an error after that leaves it for Shutdown to stop.
func startMembership(s *Server) error {
	m := &membership{
		s: s, logger: s.logger.Named("serf"),
		eventCh:     make(chan serf.Event, serfEventBuffer),
		reconcileCh: make(chan struct{}, 1),
		bindCh:      make(chan struct{}, 1),
		bindings:    map[raft.ServerID]peerBinding{},
		refused:     map[string]string{},
		stopCh:      make(chan struct{}),
	}
	sc, err := m.serfConfig()
	if err != nil {
		return err
	}
	serfNode, err := serf.Create(sc)
	if err != nil {
		return fmt.Errorf("start serf: %w", err)
	}
	m.serf = serfNode
	m.merge.port.Store(uint32(serfNode.Memberlist().LocalNode().Port))
	s.membership = m
	s.gossip.Store(serfNode)
	cfg := s.config
	if cfg.Consul != nil {
		if err := m.setupConsul(); err != nil {
			return err
		}
	}
	m.wg.Add(2)
	go m.handleEvents()
	go m.bindLoop()
	if len(cfg.RetryJoin) > 0 || len(m.discover) > 0 {
		m.wg.Add(1)
		go m.retryJoin()
	}
	return nil
}

// serfConfig is the configuration of this server's serf: its tags, ports,
// keyring and snapshot.
func (m *membership) serfConfig() (*serf.Config, error) {
	s, cfg := m.s, m.s.config
	sc := serf.DefaultConfig()
	sc.NodeName = s.name
	sc.Tags = map[string]string{
		structs.MemberTagRole: structs.MemberRoleNops, structs.MemberTagID: s.nodeID, structs.MemberTagRPCAddr: s.rpcAddr,
		structs.MemberTagHTTPAddr:        net.JoinHostPort(cfg.Advertise, strconv.Itoa(s.httpLn.Addr().(*net.TCPAddr).Port)),
		structs.MemberTagBootstrapExpect: strconv.Itoa(cfg.BootstrapExpect),
		structs.MemberTagVersion:         Version,
		structs.MemberTagRegion:          cfg.Region,
		structs.MemberTagACL:             strconv.FormatBool(cfg.ACL.Enabled),
		structs.MemberTagBatch:           "1",
	}
	merge := &mergeDelegate{m: m, addr: net.ParseIP(cfg.Advertise)}
	sc.Merge = merge
	sc.EventCh = m.eventCh
	// Serf's and memberlist's loggers write "[LEVEL] ..." lines with no
	// date of their own, so that the writer infers each line's level (a
	// "[DEBUG]" line is not shown at level info).
	w := m.logger.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true})
	sc.Logger = log.New(w, "", 0)
	sc.MemberlistConfig.Logger = sc.Logger
	sc.LogOutput, sc.MemberlistConfig.LogOutput = nil, nil
	sc.MemberlistConfig.BindAddr = cfg.Bind
	// With -serf-port 0 (tests), memberlist binds a port free for both TCP
	// and UDP itself, trying again when another process takes it between
	// the two binds, and advertises the port it bound; picking the port
	// here first would lose that retry.
	sc.MemberlistConfig.BindPort = cfg.SerfPort
	sc.MemberlistConfig.AdvertiseAddr = cfg.Advertise
	sc.MemberlistConfig.AdvertisePort = cfg.SerfPort
	m.merge = merge
	if cfg.BootstrapExpect == 1 || cfg.Dev {
		sc.MemberlistConfig = tuneLocal(sc.MemberlistConfig)
	}
	keyringPath := ""
	if cfg.Dev {
		sc.SnapshotPath = ""
	} else {
		// The serf snapshot lets a restarted server rejoin the members it
		// knew, even when its -retry-join targets are down.
		dir := filepath.Join(cfg.DataDir, "serf")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create serf dir: %w", err)
		}
		sc.SnapshotPath = filepath.Join(dir, "local.snapshot")
		keyringPath = filepath.Join(dir, "keyring")
	}
	if err := m.setupKeyring(sc, keyringPath); err != nil {
		return nil, err
	}
	// A server that restarts with the same name replaces its old self.
	sc.EnableNameConflictResolution = false
	return sc, nil
}

// SerfAddr returns the gossip address of this server.
func (s *Server) SerfAddr() string {
	n := s.membership.serf.Memberlist().LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Join joins the servers at the given serf addresses.
// A join refused because another server uses this server's node name
// returns an error wrapping ErrNodeNameConflict, which is also sent on
// Fatal.
func (s *Server) Join(addrs []string) (int, error) {
	return s.membership.join(addrs)
}

// Members returns the serf members.
func (s *Server) Members() []serf.Member { return s.membership.serf.Members() }

func (m *membership) handleEvents() {
	defer m.wg.Done()
	// Until the cluster is formed, bootstrap is retried on a tick as well
	// as on member events: a peer that could not be asked about its Raft
	// state a moment ago may answer now, with no new event to say so.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-m.stopCh:
			return
		case <-tick.C:
			m.maybeBootstrap()
		case e := <-m.eventCh:
			me, ok := e.(serf.MemberEvent)
			if !ok {
				continue
			}
			for _, mem := range me.Members {
				m.logger.Debug("member event", "event", me.EventType().String(), "member", mem.Name)
				if si, ok := parseMember(mem); ok && me.EventType() == serf.EventMemberJoin {
					if err := m.checkACL(si); err != nil {
						m.logger.Error("refusing to form a cluster with this server", "error", err)
					}
				}
			}
			m.wakeBind()
			if me.EventType() == serf.EventMemberReap {
				m.removeReaped(me.Members)
			}
			if me.EventType() == serf.EventMemberFailed && m.s.autopilot != nil {
				m.s.autopilot.RemoveDeadServers()
			}
			m.maybeBootstrap()
			select {
			case m.reconcileCh <- struct{}{}:
			default:
			}
		}
	}
}

// removeReaped removes from Raft the servers serf has reaped: failed or
// left for so long that gossip forgot them. The leader's reconcile of
// members can no longer see them, so it would never remove them itself.
// Only the member a peer is bound to counts, and only while the peer does
// not answer at its Raft address: anyone with the gossip key can have any
// member reaped at once (a leave intent with prune), the live server's too.
func (m *membership) removeReaped(members []serf.Member) {
	r := m.s.raft
	if r.State() != raft.Leader {
		return
	}
	peers, err := m.peerAddrs()
	if err != nil {
		m.logger.Warn("cannot check reaped members", "error", err)
		return
	}
	for _, mem := range members {
		si, ok := parseMember(mem)
		if !ok || si.ID == m.s.nodeID {
			continue
		}
		id := raft.ServerID(si.ID)
		if kind, _ := m.classify(si, peers); kind != claimOwner {
			continue
		}
		if m.peerAnswers(id, peers[id]) {
			m.logger.Warn("not removing a reaped server that still answers at its RPC address", "server", si.Name, "id", si.ID)
			continue
		}
		m.logger.Info("removing reaped server", "server", si.Name, "id", si.ID)
		if err := m.s.waitFuture(r.RemoveServer(id, 0, raftChangeEnqueue), raftChangeWait); err != nil {
			m.logger.Warn("remove reaped server failed", "server", si.Name, "error", err)
		}
	}
}

// retryJoin joins the configured and discovered servers until the cluster has
// a leader, then keeps trying slowly for servers it has lost.
func (m *membership) retryJoin() {
	defer m.wg.Done()
	addrs := m.s.config.RetryJoin
	for attempt := 0; ; attempt++ {
		targets := append([]string(nil), addrs...)
		for _, d := range m.discover {
			ctx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
			found, err := d(ctx)
			cancel()
			if err != nil {
				m.logger.Warn("discovery failed", "error", err)
			}
			targets = append(targets, found...)
		}
		if len(targets) > 0 {
			n, err := m.join(targets)
			if errors.Is(err, ErrNodeNameConflict) {
				m.logger.Error("cannot join the cluster", "error", err)
				return
			}
			if err != nil && n == 0 {
				m.logger.Warn("join failed; will retry", "addrs", targets, "error", err)
			}
		}
		wait := joinRetryFast
		if addr, _ := m.s.Leader(); addr != "" && m.aliveServers() >= 2 {
			wait = joinRetrySlow
		}
		select {
		case <-m.stopCh:
			return
		case <-time.After(wait):
		}
	}
}

func (m *membership) servers() []serverInfo {
	var out []serverInfo
	for _, mem := range m.serf.Members() {
		if si, ok := parseMember(mem); ok {
			out = append(out, si)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (m *membership) aliveServers() int {
	n := 0
	for _, si := range m.servers() {
		if si.Status == serf.StatusAlive {
			n++
		}
	}
	return n
}

// maybeBootstrap forms a new cluster once bootstrap_expect servers see each
// other. Every server computes the same configuration from the same members,
// so they all bootstrap the same cluster. It never bootstraps a server that
// has Raft state, nor when any peer already belongs to a cluster: existing
// state always wins.
func (m *membership) maybeBootstrap() {
	expect := m.s.config.BootstrapExpect
	if expect <= 1 || m.s.config.Dev {
		return
	}
	m.mu.Lock()
	if m.bootstrapped {
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	if idx := m.s.raft.LastIndex(); idx > 0 {
		m.markBootstrapped()
		return
	}
	var alive []serverInfo
	for _, si := range m.servers() {
		if si.Status != serf.StatusAlive {
			continue
		}
		if si.ID != m.s.nodeID {
			if err := m.verifyMember(si); err != nil {
				m.logger.Warn("not counting member for bootstrap", "member", si.Name, "error", err)
				continue
			}
		}
		if si.BootstrapExpect != expect {
			m.logger.Error("peer has a different bootstrap_expect; not bootstrapping",
				"peer", si.Name, "peer_expect", si.BootstrapExpect, "expect", expect)
			return
		}
		if err := m.checkACL(si); err != nil {
			m.logger.Error("not bootstrapping", "error", err)
			return
		}
		alive = append(alive, si)
	}
	if len(alive) < expect {
		return
	}
	for _, si := range alive {
		if si.ID == m.s.nodeID {
			continue
		}
		peers, err := m.peerRaftPeers(si)
		if err != nil {
			m.logger.Warn("cannot ask peer for its cluster; will retry", "peer", si.Name, "error", err)
			return
		}
		if len(peers) > 0 {
			m.logger.Info("peer already belongs to a cluster; waiting to be added", "peer", si.Name)
			m.markBootstrapped()
			return
		}
	}
	var servers []raft.Server
	for _, si := range alive {
		servers = append(servers, raft.Server{ID: raft.ServerID(si.ID), Address: raft.ServerAddress(si.RPCAddr), Suffrage: raft.Voter})
	}
	m.logger.Info("bootstrapping the cluster", "servers", len(servers))
	if err := m.s.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		m.logger.Error("bootstrap failed", "error", err)
	}
	m.markBootstrapped()
}

func (m *membership) markBootstrapped() {
	m.mu.Lock()
	m.bootstrapped = true
	m.mu.Unlock()
}

// peerRaftPeers asks a peer, over its RPC port, which Raft peers it knows.
func (m *membership) peerRaftPeers(si serverInfo) ([]string, error) {
	client := m.s.rpcHTTPClient(si.RPCAddr)
	ctx, cancel := context.WithTimeout(context.Background(), bootstrapPeerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+si.RPCAddr+"/v1/status/peers?stale", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	var peers []string
	if err := json.Unmarshal(body, &peers); err != nil {
		return nil, fmt.Errorf("decode peers: %w", err)
	}
	return peers, nil
}

// runLeader keeps the Raft configuration in line with serf: alive servers
// join as non-voters (autopilot promotes them once stable), servers that
// left or were reaped are removed. Failed servers are removed by autopilot
// when cleanup_dead_servers is on, within min_quorum; otherwise they stay
// until they come back or an operator removes them. It runs autopilot too.
func (m *membership) runLeader(ctx context.Context) {
	apDone := make(chan struct{})
	go func() {
		defer close(apDone)
		runAutopilot(ctx, m.s.autopilot)
	}()
	defer func() { <-apDone }()
	m.wakeBind()
	tick := time.NewTicker(peerReconcileInterval)
	defer tick.Stop()
	for {
		m.reconcilePeers()
		select {
		case <-ctx.Done():
			return
		case <-m.reconcileCh:
		case <-tick.C:
		}
	}
}

func (m *membership) reconcilePeers() {
	r := m.s.raft
	if r.State() != raft.Leader {
		return
	}
	peers, err := m.peerAddrs()
	if err != nil {
		m.logger.Warn("reconcile peers", "error", err)
		return
	}
	for _, si := range m.servers() {
		kind, _ := m.classify(si, peers)
		switch {
		case kind == claimRefused:
			// Logged once by logRefusals; gossip cannot move, keep or
			// remove a peer on a member's word that is not the peer's.
			continue
		case si.Status == serf.StatusAlive && kind == claimNew:
			m.addPeer(si)
		case si.Status == serf.StatusLeft && kind == claimOwner && si.ID != m.s.nodeID:
			m.logger.Info("removing server that left", "server", si.Name)
			if err := m.s.waitFuture(r.RemoveServer(raft.ServerID(si.ID), 0, raftChangeEnqueue), raftChangeWait); err != nil {
				m.logger.Warn("remove server failed", "server", si.Name, "error", err)
			}
		}
	}
}

// addPeer adds a verified new member as a non-voter, bound to that member.
func (m *membership) addPeer(si serverInfo) {
	if err := m.verifyMember(si); err != nil {
		m.logger.Error("not adding member as a voter", "server", si.Name, "id", si.ID, "error", err)
		return
	}
	if err := m.checkACL(si); err != nil {
		m.logger.Error("not adding server", "server", si.Name, "error", err)
		return
	}
	// A new server joins as a non-voter; autopilot promotes it once it
	// has been healthy for the stabilization time. The binding comes
	// first, so that no event after the add finds the peer unbound.
	id, addr := raft.ServerID(si.ID), raft.ServerAddress(si.RPCAddr)
	m.bind(id, si.Name, addr)
	m.logger.Info("adding server as non-voter", "server", si.Name, "addr", si.RPCAddr)
	if err := m.s.waitFuture(m.s.raft.AddNonvoter(id, addr, 0, raftChangeEnqueue), raftChangeWait); err != nil {
		m.logger.Warn("add non-voter failed", "server", si.Name, "error", err)
	} else if m.s.autopilot != nil {
		m.s.autopilot.RemoveDeadServers()
	}
}

func (m *membership) leave() {
	if m.consulDeregister != nil {
		m.consulDeregister()
	}
	if m.s.raft.State() == raft.Leader {
		// Hand over leadership before leaving, so the cluster keeps going.
		if err := m.s.waitFuture(m.s.raft.LeadershipTransfer(), config.LeadershipTransferTimeout); err != nil {
			m.logger.Warn("leadership transfer before leave", "error", err)
		}
	}
	if err := m.serf.Leave(); err != nil {
		m.logger.Warn("serf leave", "error", err)
	}
}

func (m *membership) shutdown() {
	select {
	case <-m.stopCh:
	default:
		close(m.stopCh)
	}
	_ = m.serf.Shutdown()
	m.wg.Wait()
}
