package reconcile_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestLeakedGitTokenAppearsNowhere watches repositories whose URLs carry
// credentials in each form an operator writes them (a token alone, a user
// and password, an scp-like address with a password): the fetches use them,
// and none of them reaches the API, the events, the logs, the Raft log or a
// snapshot.
func TestLeakedGitTokenAppearsNowhere(t *testing.T) {
	t.Parallel()
	const (
		token    = "ghp_leakTOKEN0123456789"
		user     = "deployer"
		password = "leakPASSWORD9876"
		scpPass  = "leakSCPPASS5555"
	)
	nomad, repo := startWorld(t, map[string]string{jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyNone)...)})
	tokenURL := strings.Replace(repo.ServeHTTP(t, testutil.WithBasicAuth(token, "")), "http://", "http://"+token+"@", 1)
	passURL := strings.Replace(repo.ServeHTTP(t, testutil.WithBasicAuth(user, password)), "http://", "http://"+user+":"+password+"@", 1)
	scpURL := user + ":" + scpPass + "@127.0.0.1:nowhere/repo.git"

	var logs testutil.SyncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "nops", Level: hclog.Trace, Output: &logs})
	dir := t.TempDir()
	cfg := nopstest.Config(t, dir)
	cfg.NomadAddr = nomad.Addr
	for name, url := range map[string]string{"token": tokenURL, "pass": passURL, "scp": scpURL} {
		cfg.Repositories = append(cfg.Repositories, config.Repository{Name: name, URL: url, Branch: "main",
			Path: lcRepoPath, PollInterval: 200 * time.Millisecond})
	}
	srv, err := agent.New(cfg, logger, agent.ReconcileOptions(cfg, logger, nil))
	if err != nil {
		t.Fatalf("start nops server: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			srv.Shutdown()
		}
	})
	base := "http://" + srv.HTTPAddr()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return srv.IsLeader(), fmt.Errorf("server is not the leader yet")
	})

	// The credentials work: both HTTP repositories are fetched, and the
	// scp-like one fails (there is no SSH server) and says so.
	var repos []*structs.RepoStatus
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		repos = nil
		if err := getJSON(base+"/v1/repos", &repos); err != nil {
			return false, err
		}
		by := map[string]*structs.RepoStatus{}
		for _, r := range repos {
			by[r.Name] = r
		}
		if by["token"] == nil || by["token"].Head != repo.Head() || by["pass"] == nil || by["pass"].Head != repo.Head() {
			return false, fmt.Errorf("the HTTP repositories are not fetched yet: %+v", repos)
		}
		if by["scp"] == nil || by["scp"].FetchError == "" {
			return false, fmt.Errorf("the scp-like repository has no fetch error yet")
		}
		return true, nil
	})

	secrets := []string{token, password, scpPass}
	check := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s holds the secret %q", where, s)
			}
		}
	}
	for _, path := range []string{"/v1/repos", "/v1/events", "/v1/jobs", "/v1/agent/self"} {
		body, err := getRaw(base + path)
		if err != nil {
			t.Fatal(err)
		}
		check("GET "+path, body)
	}
	snap, err := getRaw(base + "/v1/operator/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	check("the snapshot archive", untar(t, []byte(snap)))

	srv.Shutdown()
	stopped = true
	check("the logs", logs.String())
	// Every entry of the Raft log, once the server let go of it.
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft", "raft.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	if last == 0 {
		t.Fatal("the Raft log is empty")
	}
	var all bytes.Buffer
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err == nil {
			all.Write(l.Data)
		}
	}
	check("the Raft log", all.String())
	if !strings.Contains(all.String(), "127.0.0.1") {
		t.Fatalf("the Raft log holds no repository status at all: the check above proves nothing")
	}
}

// untar returns every file of a snapshot archive, concatenated.
func untar(t *testing.T, archive []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	for {
		if _, err := tr.Next(); err != nil {
			break
		}
		_, _ = io.Copy(&out, tr)
	}
	if out.Len() == 0 {
		t.Fatal("empty snapshot archive")
	}
	return out.String()
}
