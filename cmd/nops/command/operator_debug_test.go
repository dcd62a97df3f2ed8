package command

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// readBundle returns the files of a debug bundle by their path under its
// root directory.
func readBundle(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := h.Name[strings.Index(h.Name, "/")+1:]
		out[name] = string(raw)
	}
	return out
}

// The debug bundle of a 3-server cluster holds every server's self,
// metrics, profiles and logs, and none of the secrets planted in the
// servers' configuration and logs.
func TestOperatorDebug_BundleHasEveryServerAndNoSecret(t *testing.T) {
	const (
		nomadToken = "5f1e2d3c-planted-nomad-token"
		gitToken   = "ghp_plantedGitToken0123456789"
		// A token written as the URL's user name, with no password.
		loneToken = "ghp_plantedLoneToken987654321"
	)
	repoURL := "https://x-access-token:" + gitToken + "@git.example.invalid/org/app.git"
	loneURL := "https://" + loneToken + "@git.example.invalid/org/other.git"
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.NomadToken = nomadToken
		cfg.EnableDebug = true
		cfg.Repositories = []config.Repository{
			{Name: "app", URL: repoURL, Branch: "main", Path: ".", PollInterval: time.Minute},
			{Name: "other", URL: loneURL, Branch: "main", Path: ".", PollInterval: time.Minute},
		}
	}))
	secrets := []string{nomadToken, gitToken, loneToken, nopstest.GossipKey}

	// Every server logs the secrets while the bundle records.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, s := range c.Servers() {
		go func(s *nopstest.Server) {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					s.Logger().Debug("planted line", "nomad_token", nomadToken, "url", repoURL, "other_url", loneURL, "gossip_key", nopstest.GossipKey)
				}
			}
		}(s)
	}

	out := t.TempDir()
	res := newCLI(t, c.Server(1)).run("operator", "debug", "-duration", "3s", "-output", out)
	if res.code != 0 {
		t.Fatalf("operator debug: %d\n%s\n%s", res.code, res.stdout, res.stderr)
	}
	matches, _ := filepath.Glob(filepath.Join(out, "nops-debug-*.tar.gz"))
	if len(matches) != 1 || !strings.Contains(res.stdout, matches[0]) {
		t.Fatalf("bundle files %v; output %q", matches, res.stdout)
	}
	files := readBundle(t, matches[0])
	for _, name := range []string{"index.txt", "cluster/members.json", "cluster/raft-configuration.json",
		"cluster/autopilot-configuration.json", "cluster/autopilot-health.json"} {
		if files[name] == "" {
			t.Errorf("bundle has no %s; index:\n%s", name, files["index.txt"])
		}
	}
	for _, s := range c.Servers() {
		dir := "servers/" + s.Config().NodeName + "/"
		for _, item := range []struct{ file, want string }{
			{"self.json", `"node_id": "` + s.NodeID()},
			{"metrics.txt", "nops_raft_applied_index"},
			{"goroutine.txt", "goroutine "},
			{"heap.prof", ""},
			{"monitor.log", "planted line"},
		} {
			got, ok := files[dir+item.file]
			if !ok || got == "" || !strings.Contains(got, item.want) {
				t.Errorf("%s%s: missing or without %q (%d bytes); index:\n%s", dir, item.file, item.want, len(got), files["index.txt"])
			}
		}
		if !strings.Contains(files[dir+"monitor.log"], "[redacted]") {
			t.Errorf("%smonitor.log shows no redaction", dir)
		}
		if !strings.Contains(files[dir+"self.json"], `"NomadToken": "[redacted]"`) {
			t.Errorf("%sself.json does not show the Nomad token as redacted:\n%s", dir, files[dir+"self.json"])
		}
	}
	for name, data := range files {
		for _, secret := range secrets {
			if strings.Contains(data, secret) {
				t.Errorf("%s holds the secret %q", name, secret)
			}
		}
	}
}

func TestOperatorDebug_BadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"operator", "debug", "-duration", "0s"},
		{"operator", "debug", "-duration", "2h"},
		{"operator", "debug", "-output", "/nonexistent/dir"},
		{"monitor", "-log-level", "loud"},
		{"operator", "autopilot", "set-config"},
		{"operator", "autopilot", "set-config", "-min-quorum", "-1"},
		{"operator", "autopilot", "set-config", "-last-contact-threshold", "0s"},
	} {
		res := newCLI(t, nil).run(args...)
		if res.code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, res.code, exitUsage, res.stderr)
		}
	}
}
