package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/agent/gctune"
	"github.com/nops-dev/nops/cmd/nops/command/configcheck"
)

// serveCommand runs a server until the context is cancelled (SIGINT or
// SIGTERM), then leaves the cluster and shuts down.
type serveCommand struct {
	m *runner
	// shutdownTimeout bounds the graceful leave and shutdown; zero means
	// defaultShutdownTimeout.
	shutdownTimeout time.Duration
}

func (c *serveCommand) Synopsis() string { return "Run a Nops server" }

func (c *serveCommand) Help() string { return config.Usage() }

func (c *serveCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	cfg, err := config.Load(args, m.lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(m.stdout, c.Help())
		return exitOK
	}
	if err != nil {
		return c.configError(err)
	}
	if cfg.ValidateOnly {
		return configcheck.Run(cfg, m.stdout, m.stderr)
	}
	// SIGHUP is caught before the server starts serving: one that
	// arrives while it starts (a supervisor that sends it as soon as the
	// port answers) waits here and is applied once the server is up,
	// where the default action would end the process, or drop the signal
	// in a process that inherited it ignored.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// An InterceptLogger: nops monitor streams the logs through sinks
	// registered on it, and SIGHUP changes its level.
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:       "nops",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		JSONFormat: cfg.LogJSON,
		Output:     m.stderr,
	})
	for _, w := range cfg.Warnings {
		logger.Warn(w)
	}
	// The garbage collector's heap floor is the process's, so the command
	// sets it, not the server; so is the sampling of allocations.
	runtime.MemProfileRate = memProfileRate(cfg.EnableDebug, runtime.MemProfileRate)
	gc := gctune.Start(cfg.GCMinHeap, logger.Named("gctune"))
	defer gc.Stop()
	srv, cleanup, err := startServer(cfg, logger)
	if err != nil {
		return m.fail(err)
	}
	self := srv.Config()
	fmt.Fprintf(m.stdout, "==> Nops server started (version %s)\n\n", agent.Version)
	for _, kv := range [][2]string{
		{"Node", fmt.Sprintf("%s (%s)", self.NodeName, srv.NodeID())},
		{"HTTP addr", srv.HTTPAddr()},
		{"RPC addr", srv.RPCAddr()},
		{"Data dir", self.DataDir},
		{"Dev mode", fmt.Sprint(self.Dev)},
	} {
		fmt.Fprintf(m.stdout, "%13s: %s\n", kv[0], kv[1])
	}
	fmt.Fprintln(m.stdout, "\n==> Log data will now stream in as it occurs:")

	code := exitOK
wait:
	for {
		select {
		case <-ctx.Done():
			logger.Info("caught signal: leaving the cluster and shutting down")
			break wait
		case <-hup:
			c.reload(srv, args, logger)
		case err := <-srv.Fatal():
			logger.Error("the server cannot work; shutting down", "error", err)
			fmt.Fprintf(m.stderr, "Error: %v\n", err)
			code = exitError
			break wait
		}
	}
	timeout := c.shutdownTimeout
	if timeout == 0 {
		timeout = defaultShutdownTimeout
	}
	if err := stopServer(srv, timeout); err != nil {
		logger.Error("shutdown", "error", err)
		code = exitError
	}
	if cleanup != nil {
		cleanup()
	}
	fmt.Fprintln(m.stdout, "==> Nops server stopped")
	return code
}

// reload answers SIGHUP: it loads the configuration again and has the
// server apply what it can change while running (log level, TLS
// certificates, repositories, job defaults, autopilot block; see
// agent.Server.Reload), and names in the log every other changed setting,
// which only a restart applies. A configuration that no longer loads
// changes nothing but the TLS certificates, read again from their files.
func (c *serveCommand) reload(srv *agent.Server, args []string, logger hclog.Logger) {
	logger.Info("caught SIGHUP: reloading the configuration")
	cfg, err := config.Load(args, c.m.lookupEnv)
	if err != nil {
		logger.Error("the configuration no longer loads; nothing but the TLS certificates is reloaded, and a restart would fail", "error", err)
		if err := srv.ReloadTLS(); err != nil {
			logger.Error("reload of the TLS certificates failed; the old ones stay in use", "error", err)
		}
		return
	}
	res, err := srv.Reload(cfg)
	if err != nil {
		logger.Error("some settings could not be reloaded; they keep their old values", "error", err)
	}
	if len(res.Applied) > 0 {
		logger.Info("reloaded settings", "settings", strings.Join(res.Applied, ", "))
	}
	if len(res.RestartOnly) > 0 {
		logger.Warn("settings changed that only a restart applies", "settings", strings.Join(res.RestartOnly, ", "))
	}
}

// defaultShutdownTimeout bounds a graceful leave and shutdown.
const defaultShutdownTimeout = 30 * time.Second

// stopServer leaves the cluster gracefully and shuts the server down. It
// gives up waiting after timeout, so a stuck shutdown cannot keep the
// process from exiting.
func stopServer(srv *agent.Server, timeout time.Duration) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Leave()
		srv.Shutdown()
	}()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the server did not finish shutting down within %s", timeout)
	}
}

// startServer builds the options through buildOptions and starts a server.
func startServer(cfg *config.Config, logger hclog.Logger) (*agent.Server, func(), error) {
	opts, cleanup, err := buildOptions(cfg, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("wire the server: %w", err)
	}
	srv, err := agent.New(cfg, logger, opts)
	if err != nil {
		if cleanup != nil {
			cleanup()
		}
		return nil, nil, fmt.Errorf("start the server: %w", err)
	}
	return srv, cleanup, nil
}

// configError prints every configuration problem. A problem with the
// command line itself is a usage error (2); bad values are errors (1).
func (c *serveCommand) configError(err error) int {
	problems := strings.Split(err.Error(), "\n")
	usage := false
	fmt.Fprintln(c.m.stderr, "Error: invalid configuration:")
	for _, p := range problems {
		// config.Load prefixes the errors of the command line's syntax.
		if strings.HasPrefix(p, "flags: ") {
			usage = true
		}
		fmt.Fprintf(c.m.stderr, "  * %s\n", p)
	}
	if usage {
		fmt.Fprintln(c.m.stderr, "\nUsage: nops serve [options]\n\nRun \"nops serve -h\" for the options.")
		return exitUsage
	}
	return exitError
}

// memProfileRate is the runtime's sampling rate of allocations for a
// server whose rate is now current: current with enable_debug, which serves
// the heap profile (Go's default, one sample every 512 KiB, or what
// GODEBUG=memprofilerate set); none without it (enable_debug is not
// reloaded), where the samples and the table of their call stacks the
// runtime keeps (1.4 MB, resident where the samples fall) would serve
// nothing.
func memProfileRate(enableDebug bool, current int) int {
	if enableDebug {
		return current
	}
	return 0
}
