//go:build unix

package command

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
)

// SIGHUP reloads the log level and the repositories of a running nops
// serve, without a restart, and names in the log the changed settings only
// a restart applies.
func TestServe_SIGHUPReloadsLogLevelAndRepositories(t *testing.T) {
	bin := testutil.NopsBinary(t)
	first := testutil.NewGitRepo(t)
	first.WriteFile("a.nomad.hcl", `job "a" {}`)
	first.Commit("a")
	second := testutil.NewGitRepo(t)
	second.WriteFile("b.nomad.hcl", `job "b" {}`)
	head := second.Commit("b")

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "nops.hcl")
	logPath := filepath.Join(dir, "nops.log")
	base := fmt.Sprintf("drift_interval = \"500ms\"\nrepository \"first\" {\n  url = %q\n}\n", first.URL())
	writeFile(t, cfgFile, base+"log_level = \"info\"\n")
	port := testutil.FreePorts(t, 1)[0]
	p, err := testutil.StartProcess(testutil.ProcessConfig{
		Name: "nops serve", Bin: bin, LogPath: logPath,
		Args: []string{"serve", "-dev", "-node", "reload", "-http-port", strconv.Itoa(port), "-rpc-port", "0", "-serf-port", "0",
			"-config", cfgFile, "-nomad-addr", testutil.ClosedAddress(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	addr := "http://127.0.0.1:" + strconv.Itoa(port)
	refresh := func(name string) (int, string) {
		resp, err := http.Post(addr+"/v1/repo/"+name+"/refresh", "application/json", nil)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		code, body := refresh("first")
		return code == http.StatusOK, fmt.Errorf("refresh first: %d %s", code, body)
	})
	if code, body := refresh("second"); code != http.StatusNotFound {
		t.Fatalf("refresh of a repository not configured yet: %d %s", code, body)
	}
	readLog := func() string {
		raw, _ := os.ReadFile(logPath)
		return string(raw)
	}
	if strings.Contains(readLog(), "[DEBUG]") {
		t.Fatalf("debug lines at level info:\n%s", readLog())
	}

	// Debug level, a second repository, and a setting only a restart
	// applies.
	writeFile(t, cfgFile, base+fmt.Sprintf("log_level = \"debug\"\nnamespaces = [\"default\", \"other\"]\nrepository \"second\" {\n  url = %q\n}\n", second.URL()))
	if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if exited, _ := p.Exited(); exited {
			t.Fatalf("SIGHUP stopped the server:\n%s", readLog())
		}
		code, body := refresh("second")
		if code != http.StatusOK {
			return false, fmt.Errorf("refresh second: %d %s", code, body)
		}
		var st struct {
			Head string `json:"head"`
		}
		_ = json.Unmarshal([]byte(body), &st)
		return st.Head == head, fmt.Errorf("second is at %q, want %s", st.Head, head)
	})
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		log := readLog()
		after := log[strings.Index(log, "caught SIGHUP"):]
		return strings.Contains(after, "[DEBUG]"), fmt.Errorf("no debug line after the reload:\n%s", after)
	})
	log := readLog()
	for _, want := range []string{"reloaded settings: settings=\"log-level, repository\"",
		"settings changed that only a restart applies: settings=namespaces"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	// The first repository is still watched, under the same process.
	if code, body := refresh("first"); code != http.StatusOK {
		t.Errorf("refresh first after the reload: %d %s", code, body)
	}
}
