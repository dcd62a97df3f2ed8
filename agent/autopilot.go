package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	autopilot "github.com/hashicorp/raft-autopilot"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/structs"
)

// Autopilot runs on the leader, as Consul's and Nomad's do
// (github.com/hashicorp/raft-autopilot): it tracks the health of every Raft
// server (last contact, last index and term), promotes a new server from
// non-voter to voter once it has been healthy for the stabilization time,
// and removes failed servers from Raft, never below min_quorum voters and
// never a majority at once.
//
// New servers reach Raft only through the leader's reconcile of members
// (membership.reconcilePeers), which checks their identity first (region,
// RPC identity and name, no address move) and adds them as non-voters;
// autopilot only promotes, and only removes, peers through the member each
// is bound to (membership_peers.go).
const (
	// autopilotUpdateInterval paces the health checks of the servers.
	autopilotUpdateInterval = 2 * time.Second
	// autopilotReconcileInterval paces promotions and dead-server cleanup.
	autopilotReconcileInterval = 5 * time.Second
	// maxRaftStatsAnswer bounds the body read from a peer's
	// /v1/status/raft: a few dozen numbers, or a short error.
	maxRaftStatsAnswer = 64 << 10
)

// newAutopilot builds the server's autopilot, with its metrics; it runs
// on the leader only (runAutopilot).
func newAutopilot(s *Server) *autopilot.Autopilot {
	d := &autopilotDelegate{s: s, clients: map[string]*http.Client{}}
	ap := autopilot.New(s.raft, d,
		autopilot.WithLogger(s.logger.Named("autopilot")),
		autopilot.WithUpdateInterval(autopilotUpdateInterval),
		autopilot.WithReconcileInterval(autopilotReconcileInterval),
		autopilot.WithPromoter(&knownServerPromoter{StablePromoter: autopilot.StablePromoter{}}),
	)
	s.metrics.MustRegister(newAutopilotCollector(s, ap))
	return ap
}

// runAutopilot runs autopilot until ctx is cancelled, and returns once it
// has stopped.
func runAutopilot(ctx context.Context, ap *autopilot.Autopilot) {
	if ap == nil {
		return
	}
	ap.Start(ctx)
	<-ctx.Done()
	<-ap.Stop()
}

// AutopilotConfig returns the autopilot configuration in force: the one an
// operator stored in Raft, else the autopilot block of the configuration.
func (s *Server) AutopilotConfig() *structs.AutopilotConfig {
	if c, err := s.State().AutopilotConfig(); err == nil && c != nil {
		return c
	}
	ac := s.liveConfig().Autopilot
	minQuorum := uint(0)
	if ac.MinQuorum > 0 {
		minQuorum = uint(ac.MinQuorum)
	}
	return &structs.AutopilotConfig{
		CleanupDeadServers: ac.CleanupDeadServers, LastContactThreshold: ac.LastContactThreshold,
		MaxTrailingLogs: ac.MaxTrailingLogs, MinQuorum: minQuorum, ServerStabilizationTime: ac.ServerStabilizationTime,
	}
}

// autopilotDelegate is Nops as raft-autopilot sees it.
type autopilotDelegate struct {
	s *Server

	mu      sync.Mutex
	clients map[string]*http.Client
}

var _ autopilot.ApplicationIntegration = (*autopilotDelegate)(nil)

func (d *autopilotDelegate) AutopilotConfig() *autopilot.Config {
	c := d.s.AutopilotConfig()
	return &autopilot.Config{
		CleanupDeadServers:      c.CleanupDeadServers,
		LastContactThreshold:    c.LastContactThreshold,
		MaxTrailingLogs:         c.MaxTrailingLogs,
		MinQuorum:               c.MinQuorum,
		ServerStabilizationTime: c.ServerStabilizationTime,
	}
}

// NotifyState does nothing: the health endpoint and the metrics read the
// state back through GetState.
func (d *autopilotDelegate) NotifyState(*autopilot.State) {}

// KnownServers lists the Nops servers gossip knows in this region. A Raft
// peer is described by the member it is bound to (membership_peers.go);
// members that claim a peer's node ID under another name or address are
// left out: gossip cannot move a peer, nor keep a dead one alive, nor make
// a live one look failed. A peer not bound yet is described by the most
// alive of the members that claim its ID and address, without a name, so
// that it is neither promoted nor removed on their word. A peer no member
// speaks for (its member reaped, or forced out of gossip by a forged
// leave) is listed as of unknown status, so that its removal too goes
// through RemoveFailedServer and its checks rather than autopilot's
// direct removal of servers gossip does not know.
func (d *autopilotDelegate) KnownServers() map[raft.ServerID]*autopilot.Server {
	s := d.s
	if s.membership == nil {
		return nil
	}
	peers, err := s.membership.peerAddrs()
	if err != nil {
		return nil
	}
	_, leaderID := s.Leader()
	out := map[raft.ServerID]*autopilot.Server{}
	unproven := map[raft.ServerID]*autopilot.Server{}
	for _, mem := range s.membership.serf.Members() {
		si, ok := parseMember(mem)
		if !ok || si.Region != s.config.Region || si.ID == "" {
			continue
		}
		id := raft.ServerID(si.ID)
		srv := &autopilot.Server{
			ID: id, Name: si.Name, Address: raft.ServerAddress(si.RPCAddr), NodeStatus: nodeStatus(si.Status),
			Version: mem.Tags[structs.MemberTagVersion], Meta: map[string]string{structs.MemberTagHTTPAddr: si.HTTPAddr},
			RaftVersion: raft.ProtocolVersionMax, IsLeader: si.ID == leaderID,
		}
		switch kind, _ := s.membership.classify(si, peers); kind {
		case claimNew, claimOwner:
			out[id] = srv
		case claimUnproven:
			srv.Name = ""
			if prev, ok := unproven[id]; !ok || prev.NodeStatus != autopilot.NodeAlive {
				unproven[id] = srv
			}
		}
	}
	for id, srv := range unproven {
		if _, ok := out[id]; !ok {
			out[id] = srv
		}
	}
	for id, addr := range peers {
		if _, ok := out[id]; ok {
			continue
		}
		b, _ := s.membership.binding(id, addr)
		out[id] = &autopilot.Server{ID: id, Name: b.Name, Address: addr, NodeStatus: autopilot.NodeUnknown,
			RaftVersion: raft.ProtocolVersionMax, IsLeader: string(id) == leaderID}
	}
	return out
}

func nodeStatus(st serf.MemberStatus) autopilot.NodeStatus {
	switch st {
	case serf.StatusAlive:
		return autopilot.NodeAlive
	case serf.StatusFailed:
		return autopilot.NodeFailed
	case serf.StatusLeft:
		return autopilot.NodeLeft
	}
	return autopilot.NodeUnknown
}

// FetchServerStats asks every server, over its RPC port, for its Raft
// index, term and last contact with the leader. A server that does not
// answer in time has no stats, and autopilot counts it unhealthy.
func (d *autopilotDelegate) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	out := map[raft.ServerID]*autopilot.ServerStats{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, srv := range servers {
		if string(id) == d.s.nodeID {
			// The goroutines of the servers met before this one may
			// be writing already.
			st := localRaftStats(d.s.raft)
			mu.Lock()
			out[id] = autopilotStats(st)
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(id raft.ServerID, addr string) {
			defer wg.Done()
			st, err := d.fetch(ctx, addr)
			if err != nil {
				d.s.logger.Named("autopilot").Debug("server stats", "server", id, "error", err)
				return
			}
			mu.Lock()
			out[id] = autopilotStats(st)
			mu.Unlock()
		}(id, string(srv.Address))
	}
	wg.Wait()
	d.pruneClients(servers)
	return out
}

func (d *autopilotDelegate) client(addr string) *http.Client {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.clients[addr]
	if !ok {
		c = d.s.rpcHTTPClient(addr)
		d.clients[addr] = c
	}
	return c
}

// pruneClients drops the clients of servers no longer known, so that the
// cache never outgrows the cluster.
func (d *autopilotDelegate) pruneClients(servers map[raft.ServerID]*autopilot.Server) {
	keep := map[string]bool{}
	for _, srv := range servers {
		keep[string(srv.Address)] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for addr, c := range d.clients {
		if !keep[addr] {
			c.CloseIdleConnections()
			delete(d.clients, addr)
		}
	}
}

func (d *autopilotDelegate) fetch(ctx context.Context, addr string) (*structs.RaftStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status/raft", nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.client(addr).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRaftStatsAnswer))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	var st structs.RaftStats
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decode raft stats: %w", err)
	}
	return &st, nil
}

// RemoveFailedServer removes a failed server that autopilot chose (within
// min_quorum and never a majority): it is marked as left in gossip, and
// removed from Raft. Only a peer whose bound member is the failed one is
// removed, and not while it still answers at its Raft address.
func (d *autopilotDelegate) RemoveFailedServer(srv *autopilot.Server) {
	s := d.s
	logger := s.logger.Named("autopilot")
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if s.membership == nil {
			return
		}
		if err := s.membership.checkFailedPeer(srv.ID, srv.Name); err != nil {
			logger.Warn("not removing failed server", "server", srv.Name, "id", srv.ID, "error", err)
			return
		}
		logger.Info("removing failed server", "server", srv.Name, "id", srv.ID)
		if s.membership.hasMember(srv.Name, srv.ID) {
			if err := s.membership.serf.RemoveFailedNode(srv.Name); err != nil {
				logger.Warn("mark failed server as left", "server", srv.Name, "error", err)
			}
		}
		if s.raft.State() != raft.Leader {
			return
		}
		if err := s.waitFuture(s.raft.RemoveServer(srv.ID, 0, raftChangeEnqueue), raftChangeWait); err != nil {
			logger.Warn("remove failed server", "server", srv.Name, "error", err)
		}
	}()
}

// knownServerPromoter promotes, as the stable promoter does, stable
// non-voters, but only those whose bound member gossip knows alive
// (KnownServers gives the others no name).
type knownServerPromoter struct {
	autopilot.StablePromoter
}

func (p *knownServerPromoter) CalculatePromotionsAndDemotions(c *autopilot.Config, st *autopilot.State) autopilot.RaftChanges {
	changes := p.StablePromoter.CalculatePromotionsAndDemotions(c, st)
	kept := changes.Promotions[:0]
	for _, id := range changes.Promotions {
		if srv, ok := st.Servers[id]; ok && srv.Server.NodeStatus == autopilot.NodeAlive && srv.Server.Name != "" {
			kept = append(kept, id)
		}
	}
	changes.Promotions = kept
	return changes
}

// autopilotStats is a server's Raft stats as autopilot takes them.
func autopilotStats(st *structs.RaftStats) *autopilot.ServerStats {
	contact := time.Duration(st.LastContactMillis) * time.Millisecond
	if st.LastContactMillis < 0 {
		contact = -1
	}
	return &autopilot.ServerStats{LastContact: contact, LastTerm: st.LastTerm, LastIndex: st.LastIndex}
}

func localRaftStats(r *raft.Raft) *structs.RaftStats {
	stats := r.Stats()
	out := &structs.RaftStats{LastIndex: r.LastIndex()}
	out.LastTerm, _ = strconv.ParseUint(stats["last_log_term"], 10, 64)
	switch c := stats["last_contact"]; c {
	case "never":
		out.LastContactMillis = -1
	case "0", "":
	default:
		if d, err := time.ParseDuration(c); err == nil {
			out.LastContactMillis = d.Milliseconds()
		} else {
			out.LastContactMillis = -1
		}
	}
	if r.State() == raft.Leader {
		out.LastContactMillis = 0
	}
	return out
}

// autopilotCollector exports the leader's autopilot view as metrics; a
// follower exports none, as only the leader runs autopilot.
type autopilotCollector struct {
	s                  *Server
	ap                 *autopilot.Autopilot
	healthy, tolerance *prometheus.Desc
	// serverHealthy is autopilot's health of each server, by ID and name.
	serverHealthy *prometheus.Desc
}

var _ prometheus.Collector = (*autopilotCollector)(nil)

func newAutopilotCollector(s *Server, ap *autopilot.Autopilot) *autopilotCollector {
	return &autopilotCollector{
		s:         s,
		ap:        ap,
		healthy:   prometheus.NewDesc("nops_autopilot_healthy", "1 when autopilot sees every Raft server healthy (on the leader only).", nil, nil),
		tolerance: prometheus.NewDesc("nops_autopilot_failure_tolerance", "How many more voters may fail before quorum is lost (on the leader only).", nil, nil),
		serverHealthy: prometheus.NewDesc("nops_autopilot_server_healthy",
			"1 when autopilot sees the server healthy: alive, in contact with the leader and caught up with its log (on the leader only, one series per Raft server).",
			[]string{"id", "server"}, nil),
	}
}

func (c *autopilotCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.healthy
	ch <- c.tolerance
	ch <- c.serverHealthy
}

func (c *autopilotCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.IsLeader() {
		return
	}
	st := c.ap.GetState()
	if st == nil || len(st.Servers) == 0 {
		return
	}
	healthy := 0.0
	if st.Healthy {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, healthy)
	ch <- prometheus.MustNewConstMetric(c.tolerance, prometheus.GaugeValue, float64(st.FailureTolerance))
	for id, srv := range st.Servers {
		v := 0.0
		if srv.Health.Healthy {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.serverHealthy, prometheus.GaugeValue, v, string(id), srv.Server.Name)
	}
}
