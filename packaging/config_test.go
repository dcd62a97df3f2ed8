package packaging_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nops-dev/nops/testutil"
)

// nops runs the nops binary in dir with only the environment given (no
// NOPS_* variable of the caller's), and returns its exit code and outputs.
func nops(t *testing.T, bin, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("nops %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// TestDefaultConfig_Validates runs `nops serve -validate` on
// packaging/config/nops.hcl, with its /etc/nops.d/tls files and data dir
// moved to a temporary directory that holds a CA and a server certificate
// made by `nops tls`: it is valid with a gossip key from `nops operator
// gossip keygen`, and says TLS (HTTP and RPC), ACLs and gossip encryption
// are on. Without the key, with a client certificate in place of the
// server's, or without the files, the server would not start, and
// -validate says why.
func TestDefaultConfig_Validates(t *testing.T) {
	bin := testutil.NopsBinary(t)
	root := repoRoot(t)
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	if err := os.Mkdir(tlsDir, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}, {"tls", "cert", "create", "-client"}} {
		if code, out, errOut := nops(t, bin, tlsDir, nil, args...); code != 0 {
			t.Fatalf("nops %s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	code, key, errOut := nops(t, bin, dir, nil, "operator", "gossip", "keygen")
	if code != 0 {
		t.Fatalf("gossip keygen: exit %d: %s", code, errOut)
	}
	key = strings.TrimSpace(key)

	src, err := os.ReadFile(filepath.Join(root, "packaging/config/nops.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	for old, repl := range map[string]string{"/etc/nops.d/tls/": tlsDir + "/", `"/var/lib/nops"`: `"` + filepath.Join(dir, "data") + `"`} {
		if !strings.Contains(text, old) {
			t.Fatalf("packaging/config/nops.hcl no longer names %s", old)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	cfg := filepath.Join(dir, "nops.hcl")
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	validate := []string{"serve", "-config", cfg, "-validate"}

	code, out, errOut := nops(t, bin, dir, []string{"NOPS_ENCRYPT=" + key}, validate...)
	if code != 0 {
		t.Fatalf("serve -validate: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"Configuration is valid.",
		"Data dir: " + filepath.Join(dir, "data"),
		"Bootstrap expect: 3",
		"TLS: http and rpc; certificate server.global.nops",
		"ACLs: on",
		"Gossip: encrypted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve -validate output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("serve -validate created the data dir (stat: %v); it must write nothing", err)
	}

	code, _, errOut = nops(t, bin, dir, nil, validate...)
	if code != 1 || !strings.Contains(errOut, "encrypt: a gossip encryption key is required") {
		t.Errorf("without a gossip key: exit %d, %q; want 1 and the encrypt error", code, errOut)
	}

	for _, f := range []string{"global-server-nops.pem", "global-server-nops-key.pem"} {
		client := strings.Replace(f, "server", "client", 1)
		raw, err := os.ReadFile(filepath.Join(tlsDir, client))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tlsDir, f), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errOut = nops(t, bin, dir, []string{"NOPS_ENCRYPT=" + key}, validate...)
	if code != 1 || !strings.Contains(errOut, "cannot serve the RPC port") {
		t.Errorf("with a client certificate: exit %d, %q; want 1 and the RPC error", code, errOut)
	}

	if err := os.RemoveAll(tlsDir); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = nops(t, bin, dir, []string{"NOPS_ENCRYPT=" + key}, validate...)
	if code != 1 || !strings.Contains(errOut, "no such file or directory") {
		t.Errorf("without the TLS files: exit %d, %q; want 1 and the missing file", code, errOut)
	}
}
