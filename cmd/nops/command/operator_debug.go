package command

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nops-dev/nops/rpc/client"
)

// maxDebugItem bounds what the bundle keeps of one item (a log stream, a
// profile): a runaway server cannot fill the operator's disk.
const maxDebugItem = 64 << 20

// operatorDebugCommand gathers a debug bundle of the cluster.
type operatorDebugCommand struct {
	m *runner
}

func (c *operatorDebugCommand) Synopsis() string { return "Gather a debug bundle of every server" }

func (c *operatorDebugCommand) Help() string {
	return `Usage: nops operator debug [-duration=<d>] [-output=<dir>] [-log-level=<level>] [options]

  Gathers what is needed to debug the cluster into one .tar.gz, as Nomad's
  operator debug does. From the cluster: the members, the Raft
  configuration, the autopilot configuration and health. From every server
  (through the server asked): its agent self and configuration, its
  metrics, its goroutine stacks and heap profile (when the server runs
  with enable_debug = true), and its logs for -duration. Secrets the
  servers know (Nomad token, gossip keys, repository credentials) are
  redacted by the servers before anything leaves them.

  The bundle's index.txt lists what was gathered and what failed.

Options:

  -duration=<d>
    How long to record the servers' logs. Default: 30s.

  -log-level=<level>
    The level of the recorded logs. Default: debug.

  -output=<dir>
    The directory the bundle is written to. Default: the current directory.
` + apiFlagsHelp
}

// debugBundle collects the files of a bundle.
type debugBundle struct {
	mu    sync.Mutex
	files map[string][]byte
	index []string
}

func (b *debugBundle) add(name string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[name] = data
	b.index = append(b.index, fmt.Sprintf("ok     %s (%d bytes)", name, len(data)))
}

func (b *debugBundle) failed(name string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.index = append(b.index, fmt.Sprintf("failed %s: %v", name, err))
}

func (b *debugBundle) addJSON(name string, v any, err error) {
	if err != nil {
		b.failed(name, err)
		return
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b.failed(name, err)
		return
	}
	b.add(name, append(raw, '\n'))
}

func (b *debugBundle) addStream(name string, rc io.ReadCloser, err error) {
	if err != nil {
		b.failed(name, err)
		return
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxDebugItem))
	if err != nil && len(raw) == 0 {
		b.failed(name, err)
		return
	}
	b.add(name, raw)
}

func (c *operatorDebugCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var duration time.Duration
	var output, level string
	spec := apiArgs{
		name: "operator debug",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&duration, "duration", 30*time.Second, "")
			fs.StringVar(&output, "output", ".", "")
			fs.StringVar(&level, "log-level", "debug", "")
		},
		check: func([]string) error {
			if duration <= 0 || duration > time.Hour {
				return fmt.Errorf("-duration: must be between 0 and 1h, got %s", duration)
			}
			if info, err := os.Stat(output); err != nil || !info.IsDir() {
				return fmt.Errorf("-output: %q is not a directory", output)
			}
			return nil
		},
	}
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		members, _, err := api.Agent().Members(ctx, nil)
		if err != nil {
			return m.fail(fmt.Errorf("list the servers: %w", err))
		}
		var servers []string
		for _, mem := range members {
			if mem.Tags["role"] == "nops" && mem.Status == "alive" {
				servers = append(servers, mem.Name)
			}
		}
		sort.Strings(servers)
		stamp := time.Now().UTC().Format("20060102-150405")
		root := "nops-debug-" + stamp
		b := &debugBundle{files: map[string][]byte{}}
		b.addJSON("cluster/members.json", members, nil)
		fmt.Fprintf(m.stderr, "==> Gathering a debug bundle of %d servers (%s) for %s\n", len(servers), strings.Join(servers, ", "), duration)

		var wg sync.WaitGroup
		// Logs of every server, for the duration.
		for _, srv := range servers {
			wg.Add(1)
			go func(srv string) {
				defer wg.Done()
				lctx, cancel := context.WithTimeout(ctx, duration)
				defer cancel()
				stream, err := api.Agent().Monitor(lctx, srv, level, false)
				b.addStream(path.Join("servers", srv, "monitor.log"), stream, err)
			}(srv)
		}
		conf, _, err := api.Operator().RaftConfiguration(ctx, nil)
		b.addJSON("cluster/raft-configuration.json", conf, err)
		apConf, err := api.Operator().AutopilotGetConfig(ctx)
		b.addJSON("cluster/autopilot-configuration.json", apConf, err)
		health, err := api.Operator().AutopilotHealth(ctx)
		b.addJSON("cluster/autopilot-health.json", health, err)
		for _, srv := range servers {
			for _, item := range []struct{ item, file string }{
				{"self", "self.json"}, {"metrics", "metrics.txt"}, {"goroutine", "goroutine.txt"}, {"heap", "heap.prof"},
			} {
				rc, err := api.Agent().DebugItem(ctx, srv, item.item)
				b.addStream(path.Join("servers", srv, item.file), rc, err)
			}
		}
		wg.Wait()
		if ctx.Err() != nil {
			return m.fail(fmt.Errorf("interrupted: %w", ctx.Err()))
		}
		sort.Strings(b.index)
		b.files["index.txt"] = []byte(fmt.Sprintf("Nops debug bundle, %s, through %s\n\n%s\n", stamp, api.Address(), strings.Join(b.index, "\n")))
		file := filepath.Join(output, root+".tar.gz")
		if err := writeBundle(file, root, b.files); err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(map[string]any{"bundle": file, "servers": servers, "index": b.index})
		}
		fmt.Fprintf(m.stdout, "Created debug bundle %s\n", file)
		return exitOK
	})
}

// writeBundle writes the files into a .tar.gz under root/, readable only
// by its owner.
func writeBundle(file, root string, files map[string][]byte) error {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	now := time.Now()
	for _, name := range names {
		data := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: path.Join(root, name), Mode: 0o600, Size: int64(len(data)), ModTime: now}); err != nil {
			return fmt.Errorf("write bundle: %w", err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("write bundle: %w", err)
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	return nil
}
