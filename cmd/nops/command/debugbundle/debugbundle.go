// Package debugbundle gathers the debug bundle of a Nops cluster through
// the HTTP API of one server, as `nops operator debug` writes it: from the
// cluster, the members, the Raft configuration and the autopilot
// configuration and health; from every alive server, its agent self, its
// metrics, its goroutine stacks and heap profile, and its logs for a while.
//
// Guarantees: an item that cannot be had is listed as failed in the
// bundle's index.txt and the others are still gathered; no item keeps more
// than 64 MiB, so a runaway server cannot fill the operator's disk; the
// archive is written readable only by its owner. Secrets never reach the
// bundle: the servers redact them before anything leaves them.
package debugbundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/nops-dev/nops/structs"
)

// maxItem bounds what the bundle keeps of one item (a log stream, a
// profile): a runaway server cannot fill the operator's disk.
const maxItem = 64 << 20

// Options are what to gather.
type Options struct {
	// Duration is how long to record the servers' logs.
	Duration time.Duration
	// LogLevel is the level of the recorded logs.
	LogLevel string
	// Progress, when set, is told which servers are gathered from.
	Progress io.Writer
}

// Bundle is a gathered debug bundle, ready to be written.
type Bundle struct {
	// Root is the directory of the archive's files: nops-debug-<UTC time>.
	Root string
	// Servers are the alive Nops servers gathered from, sorted.
	Servers []string
	// Index lists, sorted, every item gathered and every item that failed.
	Index []string

	files map[string][]byte
}

// collector collects the files of a bundle from concurrent requests.
type collector struct {
	mu    sync.Mutex
	files map[string][]byte
	index []string
}

func (b *collector) add(name string, data []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[name] = data
	b.index = append(b.index, fmt.Sprintf("ok     %s (%d bytes)", name, len(data)))
}

func (b *collector) failed(name string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.index = append(b.index, fmt.Sprintf("failed %s: %v", name, err))
}

func (b *collector) addJSON(name string, v any, err error) {
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

func (b *collector) addStream(name string, rc io.ReadCloser, err error) {
	if err != nil {
		b.failed(name, err)
		return
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxItem))
	if err != nil && len(raw) == 0 {
		b.failed(name, err)
		return
	}
	b.add(name, raw)
}

// Gather gathers a bundle through api. It fails when the servers cannot be
// listed or ctx ends; an item that cannot be had is only listed as failed.
func Gather(ctx context.Context, api *client.Client, opts Options) (*Bundle, error) {
	members, _, err := api.Agent().Members(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list the servers: %w", err)
	}
	servers := aliveServers(members)
	stamp := time.Now().UTC().Format("20060102-150405")
	b := &collector{files: map[string][]byte{}}
	b.addJSON("cluster/members.json", members, nil)
	if opts.Progress != nil {
		fmt.Fprintf(opts.Progress, "==> Gathering a debug bundle of %d servers (%s) for %s\n", len(servers), strings.Join(servers, ", "), opts.Duration)
	}
	var wg sync.WaitGroup
	b.gatherLogs(ctx, &wg, api, servers, opts)
	b.gatherCluster(ctx, api)
	b.gatherServers(ctx, api, servers)
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	sort.Strings(b.index)
	b.files["index.txt"] = []byte(fmt.Sprintf("Nops debug bundle, %s, through %s\n\n%s\n", stamp, api.Address(), strings.Join(b.index, "\n")))
	return &Bundle{Root: "nops-debug-" + stamp, Servers: servers, Index: b.index, files: b.files}, nil
}

// aliveServers returns the names of the alive Nops servers among members,
// sorted.
func aliveServers(members []structs.Member) []string {
	var servers []string
	for _, mem := range members {
		if mem.Tags["role"] == "nops" && mem.Status == "alive" {
			servers = append(servers, mem.Name)
		}
	}
	sort.Strings(servers)
	return servers
}

// gatherLogs records the logs of every server for opts.Duration, each in a
// goroutine that wg waits for.
func (b *collector) gatherLogs(ctx context.Context, wg *sync.WaitGroup, api *client.Client, servers []string, opts Options) {
	for _, srv := range servers {
		wg.Add(1)
		go func(srv string) {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, opts.Duration)
			defer cancel()
			stream, err := api.Agent().Monitor(lctx, srv, opts.LogLevel, false)
			b.addStream(path.Join("servers", srv, "monitor.log"), stream, err)
		}(srv)
	}
}

// gatherCluster reads the Raft configuration and the autopilot
// configuration and health.
func (b *collector) gatherCluster(ctx context.Context, api *client.Client) {
	conf, _, err := api.Operator().RaftConfiguration(ctx, nil)
	b.addJSON("cluster/raft-configuration.json", conf, err)
	apConf, err := api.Operator().AutopilotGetConfig(ctx)
	b.addJSON("cluster/autopilot-configuration.json", apConf, err)
	health, err := api.Operator().AutopilotHealth(ctx)
	b.addJSON("cluster/autopilot-health.json", health, err)
}

// gatherServers reads the debug items of every server.
func (b *collector) gatherServers(ctx context.Context, api *client.Client, servers []string) {
	for _, srv := range servers {
		for _, item := range []struct{ item, file string }{
			{"self", "self.json"}, {"metrics", "metrics.txt"}, {"goroutine", "goroutine.txt"}, {"heap", "heap.prof"},
		} {
			rc, err := api.Agent().DebugItem(ctx, srv, item.item)
			b.addStream(path.Join("servers", srv, item.file), rc, err)
		}
	}
}

// Write writes the bundle into dir as <Root>.tar.gz, its files under
// Root/, readable only by its owner, and returns the archive's path.
func (b *Bundle) Write(dir string) (string, error) {
	file := filepath.Join(dir, b.Root+".tar.gz")
	if err := writeBundle(file, b.Root, b.files); err != nil {
		return "", err
	}
	return file, nil
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
