package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/agent/config"
	agenthttp "github.com/nops-dev/nops/agent/http"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/reconcile"
	"github.com/nops-dev/nops/reconcile/notify"
	"github.com/nops-dev/nops/structs"
)

const (
	// raftLogCacheSize is how many of the newest log entries stay in
	// memory, for as long as entries are written: raftLogCacheIdle after
	// the last one, the cache is emptied.
	raftLogCacheSize = 512
	raftLogCacheIdle = time.Minute
)

// LeaderFunc runs the leader's loops until ctx is cancelled, and returns once
// every loop has stopped.
type LeaderFunc func(ctx context.Context, s *Server)

// Server is one Nops server.
type Server struct {
	config *config.Config
	logger hclog.Logger
	// rootLogger is the logger the server was given; when it is an
	// hclog.InterceptLogger, monitors register their sinks on it.
	rootLogger hclog.Logger
	// live is the configuration in use once a reload applied settings;
	// reloadMu serializes reloads.
	live     atomic.Pointer[config.Config]
	reloadMu sync.Mutex
	nodeID   string
	// name is the node name (nodeName), set with nodeID.
	name string

	fsm       *fsm.FSM
	raft      *raft.Raft
	raftStore *raftboltdb.BoltStore
	// raftLogStore counts the log's batches for the metrics.
	raftLogStore *countingLogStore
	// proposer sends Apply's entries to Raft a group at a time
	// (propose.go).
	proposer     *proposer
	proposerStop chan struct{}
	transport    *guardedTransport
	mux          *rpcMux
	rpcAddr      string
	// tls is nil when neither HTTP nor RPC uses TLS.
	tls *tlsConfigurator

	httpLn     net.Listener
	httpServer *http.Server
	rpcHTTP    *http.Server
	// api serves both HTTP servers and the requests followers forward
	// with the forwarding protocol (package agenthttp).
	api *agenthttp.API
	// requestCtx is the parent of every request's context; Shutdown
	// cancels it, so long polls and forwards waiting for a leader end at
	// once instead of holding the shutdown.
	requestCtx    context.Context
	requestCancel context.CancelFunc
	metrics       *prometheus.Registry
	// retention runs the leader's retention passes (gc.go).
	retention *retention

	membership *membership
	// gossip is membership's serf once it runs, for the proposer, which
	// may propose before (a write that arrives as the server starts).
	gossip atomic.Pointer[serf.Serf]

	// autopilot runs on the leader.
	autopilot *autopilot.Autopilot

	// leader runs the leader loops while this server leads (leader.go).
	leader leadership
	// applyHook is set by tests only (export_internal_test.go): it runs
	// before Raft hands the FSM a batch of entries to apply.
	applyHook atomic.Pointer[func()]

	reconciler Reconciler
	fleet      *reconcile.Fleet
	build      func(s *Server) (LeaderFunc, Reconciler, error)
	kick       *reconcile.KickQueue
	// webhookSecret verifies git pushes (agent/http/webhook_verify.go); empty
	// disables the webhook.
	webhookSecret string

	// notifier delivers the notification outbox while the server leads.
	notifier *notify.Deliverer

	tempDir string

	// fatalCh carries the error that stops the server from working.
	fatalCh chan error

	shutdownOnce sync.Once
	shutdownCh   chan struct{}
	wg           sync.WaitGroup
}

// Options carries what the caller wires into a server.
type Options struct {
	// Leader runs the leader-only loops. Nil runs none.
	Leader LeaderFunc
	// Reconciler answers the reconcilers' API routes (jobs, repositories,
	// orphans, the detection cycle, the git webhook). Nil serves none.
	Reconciler Reconciler
	// Build, when set, is called once the server's state and Raft exist and
	// before the API serves; it may set the leader loops and the reconciler
	// that need the server itself.
	Build func(s *Server) (LeaderFunc, Reconciler, error)
}

// New starts a server: Raft, the RPC and HTTP listeners, and membership.
func New(cfg *config.Config, logger hclog.Logger, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		config:     cfg,
		logger:     logger,
		rootLogger: logger,
		reconciler: opts.Reconciler,
		build:      opts.Build,
		kick:       reconcile.NewKickQueue(),
		shutdownCh: make(chan struct{}),
		fatalCh:    make(chan error, 1),
		metrics:    prometheus.NewRegistry(),
	}
	s.leader = leadership{s: s, fn: opts.Leader, gained: newLeadershipCounter()}
	if cfg.Dev && cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "nops-dev-")
		if err != nil {
			return nil, fmt.Errorf("create dev data dir: %w", err)
		}
		s.tempDir = dir
		cfg.DataDir = dir
	}
	if err := s.setup(); err != nil {
		s.Shutdown()
		return nil, err
	}
	return s, nil
}

// setup builds the server in order: its identity and state, the RPC
// port, Raft and the proposer, the leader's parts, the HTTP API, then
// membership and the leadership monitor. An error leaves what was built
// for Shutdown to stop.
func (s *Server) setup() error {
	cfg := s.config
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	id, err := loadNodeID(cfg.DataDir)
	if err != nil {
		return err
	}
	s.nodeID, s.name = id, nodeName(cfg, id)
	s.logger = s.logger.With("node", s.name)

	if s.fsm, err = fsm.New(s.logger); err != nil {
		return err
	}
	if s.tls, err = newTLSConfigurator(cfg.TLS, cfg.Region, s.logger.Named("tls")); err != nil {
		return err
	}
	warnInsecure(cfg, s.logger)
	if err := s.listenRPC(); err != nil {
		return err
	}

	// The proposer outlives the HTTP servers' grace period and Raft: it
	// stops once Raft has shut down, when every outcome Raft gives is
	// given. It hears from the FSM, which Raft starts to run at once.
	s.proposerStop = make(chan struct{})
	s.proposer = newProposer(func(buf []byte, timeout time.Duration) raft.ApplyFuture { return s.raft.Apply(buf, timeout) },
		s.proposerStop, structs.ErrShuttingDown)
	s.proposer.canBatch = func() bool { return canBatch(s.gossip.Load(), s.raft, cfg.Region) }
	s.fsm.SetOnApply(s.proposer.committed)
	if err := s.setupRaft(); err != nil {
		return err
	}
	s.wg.Add(1)
	go s.proposer.run(&s.wg)
	if s.notifier, err = newNotifier(s); err != nil {
		return err
	}
	s.autopilot = newAutopilot(s)

	if s.build != nil {
		leader, rec, err := s.build(s)
		if err != nil {
			return err
		}
		if leader != nil {
			s.leader.fn = leader
		}
		if rec != nil {
			s.reconciler = rec
		}
	}
	if err := s.serveHTTP(); err != nil {
		return err
	}
	if err := startMembership(s); err != nil {
		return err
	}
	registerMetrics(s)

	s.wg.Add(1)
	go s.leader.monitor()
	s.logger.Info("server started", "http", s.HTTPAddr(), "rpc", s.rpcAddr, "data_dir", cfg.DataDir,
		"bootstrap_expect", cfg.BootstrapExpect)
	return nil
}

// listenRPC opens the RPC port and starts its mux, which hands each
// connection to Raft, forwarding or the internal HTTP server by its first
// byte.
func (s *Server) listenRPC() error {
	cfg := s.config
	rpcLn, err := net.Listen("tcp", net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		return fmt.Errorf("listen on rpc port: %w", err)
	}
	port := rpcLn.Addr().(*net.TCPAddr).Port
	advertise := &net.TCPAddr{IP: net.ParseIP(cfg.Advertise), Port: port}
	if advertise.IP == nil {
		rpcLn.Close()
		return fmt.Errorf("advertise address %q is not an IP address", cfg.Advertise)
	}
	s.rpcAddr = advertise.String()
	s.mux = newRPCMux(rpcLn, advertise, s.tls.forRPC(), s.logger.Named("rpc"))
	go s.mux.serve()
	return nil
}

// serveHTTP opens the HTTP port and serves the API on it, on the RPC
// port's internal HTTP server, and to forwarded requests.
func (s *Server) serveHTTP() error {
	cfg := s.config
	httpLn, err := net.Listen("tcp", net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.HTTPPort)))
	if err != nil {
		return fmt.Errorf("listen on http port: %w", err)
	}
	s.httpLn = httpLn
	// TLS wraps the connection cap, so that the server sees a *tls.Conn
	// and requests carry their TLS state (the Origin check's scheme, the
	// session cookie's Secure flag).
	httpLn = s.tls.wrapHTTPListener(httpLn, func(ln net.Listener) net.Listener { return agenthttp.LimitListener(cfg, ln) })
	api := agenthttp.New(HTTPBackend{s}, s.logger.Named("forward"))
	s.requestCtx, s.requestCancel = context.WithCancel(context.Background())
	base := func(net.Listener) context.Context { return s.requestCtx }
	s.httpServer = agenthttp.NewHTTPServer(cfg, api.Handler())
	s.httpServer.BaseContext = base
	s.httpServer.ErrorLog = httpErrorLog(s.logger)
	s.rpcHTTP = agenthttp.NewHTTPServer(cfg, api.Internal())
	s.rpcHTTP.BaseContext = base
	s.rpcHTTP.ErrorLog = httpErrorLog(s.logger)
	s.wg.Add(3)
	s.api = api
	go api.ServeForwarding(newChanListener(s.mux, s.mux.fwdCh))
	go s.serve("http", s.httpServer, httpLn)
	go s.serve("rpc http", s.rpcHTTP, newChanListener(s.mux, s.mux.httpCh))
	return nil
}

// serve runs an HTTP server on ln until Shutdown closes it; any other end
// is logged.
func (s *Server) serve(name string, srv *http.Server, ln net.Listener) {
	defer s.wg.Done()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		s.logger.Error(name+" server stopped", "error", err)
	}
}

// nodeName is the server's name: the configured one, else the short form
// of its node ID.
func nodeName(cfg *config.Config, nodeID string) string {
	if cfg.NodeName != "" {
		return cfg.NodeName
	}
	return structs.ShortID(nodeID)
}

// loadNodeID reads the node ID persisted in the data dir, or creates it.
func loadNodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "node-id")
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if _, perr := uuid.Parse(id); perr != nil {
			return "", fmt.Errorf("node ID in %s is not a UUID: %w", path, perr)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read node ID: %w", err)
	}
	id := uuid.NewString()
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write node ID: %w", err)
	}
	return id, nil
}

func (s *Server) setupRaft() error {
	cfg := s.config
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create raft dir: %w", err)
	}
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("open raft store: %w", err)
	}
	s.raftStore = store
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, s.logger.Named("raft"))
	if err != nil {
		return fmt.Errorf("open snapshot store: %w", err)
	}
	layer := &raftLayer{newChanListener(s.mux, s.mux.raftCh)}
	s.transport = newGuardedTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 3, Timeout: 10 * time.Second, Logger: s.logger.Named("raft.transport"),
	}), s.logger.Named("raft.transport"))

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(s.nodeID)
	rc.Logger = s.logger.Named("raft")
	rc.SnapshotThreshold = cfg.RaftSnapshotThreshold
	if cfg.RaftSnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.RaftSnapshotInterval
	}
	// Writes that arrive together go to the log, to the followers and to
	// the FSM together: one disk sync and one apply transaction for the
	// lot.
	rc.BatchApplyCh = true
	timings := cfg.RaftTimings()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = timings.HeartbeatTimeout, timings.ElectionTimeout, timings.LeaderLeaseTimeout
	s.leader.notify = make(chan bool, 10)
	rc.NotifyCh = s.leader.notify

	// Raft panics on a log it cannot run on, at every start: such a log
	// stops the start with an error that says how to recover instead.
	if err := checkRaftLog(dir, store, store, snaps); err != nil {
		return err
	}
	if err := recoverFromPeersFile(s, rc, dir, store, store, snaps, s.transport); err != nil {
		return err
	}
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return fmt.Errorf("read raft state: %w", err)
	}
	// The newest entries stay in memory while the log is written, so
	// that the leader replicates and applies them without reading them
	// back from disk.
	s.raftLogStore = newCountingLogStore(store)
	logs := newLogCache(raftLogCacheSize, raftLogCacheIdle, s.raftLogStore)
	r, err := raft.NewRaft(rc, &hookedFSM{FSM: s.fsm, hook: &s.applyHook}, logs, store, snaps, s.transport)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	s.raft = r
	if !existing && cfg.BootstrapExpect == 1 {
		s.logger.Info("bootstrapping a single-server cluster")
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: raft.ServerAddress(s.rpcAddr), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap: %w", err)
		}
	}
	return nil
}

// NodeID returns the server's persistent node ID (its Raft server ID).
func (s *Server) NodeID() string { return s.nodeID }

// RPCAddr returns the advertised Raft and forwarding address.
func (s *Server) RPCAddr() string { return s.rpcAddr }

// HTTPAddr returns the address the HTTP API listens on.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// State returns the replicated state store.
func (s *Server) State() *fsm.StateStore { return s.fsm.State() }

// Raft returns the server's Raft node.
func (s *Server) Raft() *raft.Raft { return s.raft }

// Logger returns the server's logger.
func (s *Server) Logger() hclog.Logger { return s.logger }

// Config returns the server's configuration.
func (s *Server) Config() *config.Config { return s.config }

// Metrics returns the server's Prometheus registry, which /metrics serves.
func (s *Server) Metrics() *prometheus.Registry { return s.metrics }

// IsLeader reports whether this server is the Raft leader and has
// established its leadership: its barrier has passed, so its state holds
// every entry committed before it took over. A server elected a moment ago
// is not the leader yet for writes and consistent reads: they wait (or are
// forwarded) until it is.
func (s *Server) IsLeader() bool {
	return s.leader.ready.Load() && s.raft.State() == raft.Leader
}

// Leader returns the leader's RPC address and ID, empty when unknown.
func (s *Server) Leader() (string, string) {
	addr, id := s.raft.LeaderWithID()
	return string(addr), string(id)
}

// Kick wakes the leader loops after a change that can move a job (a
// decision, a pause, a window change) for what k says changed.
func (s *Server) Kick(k structs.Kick) { s.kick.Push(k) }

// Kicked returns the queue Kick adds to.
func (s *Server) Kicked() *reconcile.KickQueue { return s.kick }

// Apply proposes a request through Raft and waits until it is applied on
// this server. It returns the entry's index. A business error of the FSM is
// returned as is (wrapping structs.ErrConflict and friends); on a follower it
// returns structs.ErrNotLeader.
func (s *Server) Apply(t structs.MessageType, req any) (uint64, error) {
	index, resp, err := s.raftApply(t, req)
	if err != nil {
		return 0, err
	}
	if resp, ok := resp.(error); ok && resp != nil {
		return index, resp
	}
	return index, nil
}

// raftApply encodes an entry, proposes it through the proposer (group
// commit) and returns its index and the FSM's answer once this server
// applied it. Raft's not-leader errors become structs.ErrNotLeader.
func (s *Server) raftApply(t structs.MessageType, req any) (uint64, any, error) {
	if err := checkMinimumVersion(t, req, s.gossip.Load(), s.config.Region); err != nil {
		return 0, nil, err
	}
	buf, err := structs.Encode(t, req)
	if err != nil {
		return 0, nil, err
	}
	r := s.proposer.propose(buf)
	if r.err != nil {
		return 0, nil, proposeError(t, r.err)
	}
	return r.index, r.resp, nil
}

// proposeError names what a failed proposal means for its caller. Raft
// refuses an entry it never sent (not the leader, a leadership transfer
// under way): nothing was applied, and the request may go to the leader.
// An entry sent before the leader was deposed (raft.ErrLeadershipLost) may
// still commit under the next leader: its outcome is unknown, never "not
// applied", or a client that retried it would apply it twice.
func proposeError(t structs.MessageType, err error) error {
	switch {
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w (%w): %w", structs.ErrLeadershipLost, structs.ErrNotLeader, err)
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", structs.ErrNotLeader, err)
	}
	return fmt.Errorf("raft apply %s: %w", t, err)
}

// leaderPoll is how often WaitForLeader looks: an election takes hundreds
// of milliseconds, and a look is a cheap read.
const leaderPoll = 25 * time.Millisecond

// shutdownGrace bounds how long Shutdown lets running HTTP and forwarded
// requests finish.
const shutdownGrace = 5 * time.Second

// WaitForLeader blocks until the cluster has a leader or the timeout runs
// out.
func (s *Server) WaitForLeader(ctx context.Context, timeout time.Duration) (string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(leaderPoll)
	defer tick.Stop()
	for {
		if addr, _ := s.Leader(); addr != "" {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-s.shutdownCh:
			return "", structs.ErrShuttingDown
		case <-deadline.C:
			return "", structs.ErrNoLeader
		case <-tick.C:
		}
	}
}

// Leave leaves the cluster gracefully: serf leave, and, as leader, hand the
// leadership over first.
func (s *Server) Leave() {
	if s.membership != nil {
		s.membership.leave()
	}
}

// Shutdown stops the server. It is safe to call more than once.
func (s *Server) Shutdown() {
	s.shutdownOnce.Do(func() {
		close(s.shutdownCh)
		s.leader.revoke()
		if s.membership != nil {
			s.membership.shutdown()
		}
		if s.requestCancel != nil {
			s.requestCancel()
		}
		// The HTTP servers and the forwarding protocol drain together,
		// before raft stops: a write running on them gets its answer, or
		// loses its connection after shutdownGrace.
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		var drain sync.WaitGroup
		for _, srv := range []*http.Server{s.httpServer, s.rpcHTTP} {
			if srv == nil {
				continue
			}
			drain.Add(1)
			go func() {
				defer drain.Done()
				if err := srv.Shutdown(ctx); err != nil {
					// Requests still running past the deadline lose their
					// connections.
					_ = srv.Close()
				}
			}()
		}
		drain.Add(1)
		go func() {
			defer drain.Done()
			_ = s.api.ShutdownForwarding(ctx)
		}()
		drain.Wait()
		if s.raft != nil {
			if err := s.raft.Shutdown().Error(); err != nil {
				s.logger.Warn("raft shutdown", "error", err)
			}
		}
		if s.proposerStop != nil {
			close(s.proposerStop)
		}
		if s.transport != nil {
			_ = s.transport.Close()
		}
		if s.mux != nil {
			_ = s.mux.Close()
		}
		if s.raftStore != nil {
			_ = s.raftStore.Close()
		}
		s.wg.Wait()
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
		s.logger.Info("server stopped")
	})
}
