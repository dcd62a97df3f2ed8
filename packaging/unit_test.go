package packaging_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nops-dev/nops/testutil"
)

// parseUnit reads a systemd unit: every line is blank, a comment, a
// [Section] or Key=Value; values of a key repeated add up.
func parseUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unit := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if unit[section] != nil {
				t.Errorf("%s:%d: section [%s] twice", path, n, section)
			}
			unit[section] = map[string][]string{}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" || !regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`).MatchString(key) {
				t.Errorf("%s:%d: not Key=Value in a section: %q", path, n, line)
				continue
			}
			unit[section][key] = append(unit[section][key], value)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return unit
}

// TestSystemdUnit checks packaging/systemd/nops.service: it runs the
// installed binary on the installed config as the nops user, reloads with
// SIGHUP (which `nops serve` answers by reloading), stops with SIGINT (a
// graceful leave), raises the open-file limit and is hardened; the data dir
// it may write is the default config's. systemd-analyze verify, when the
// machine has it, must have nothing to say about it.
func TestSystemdUnit(t *testing.T) {
	root := repoRoot(t)
	path := filepath.Join(root, "packaging/systemd/nops.service")
	unit := parseUnit(t, path)
	for _, c := range []struct{ section, key, want string }{
		{"Unit", "After", "network-online.target"},
		{"Unit", "Wants", "network-online.target"},
		{"Service", "ExecStart", "/usr/bin/nops serve -config /etc/nops.d/"},
		{"Service", "ExecReload", "/bin/kill -HUP $MAINPID"},
		{"Service", "KillSignal", "SIGINT"},
		{"Service", "User", "nops"},
		{"Service", "Group", "nops"},
		{"Service", "Restart", "on-failure"},
		{"Service", "EnvironmentFile", "-/etc/nops.d/nops.env"},
		{"Service", "NoNewPrivileges", "yes"},
		{"Service", "ProtectSystem", "strict"},
		{"Service", "ReadWritePaths", "/var/lib/nops"},
		{"Service", "ProtectHome", "yes"},
		{"Service", "PrivateTmp", "yes"},
		{"Service", "PrivateDevices", "yes"},
		{"Service", "CapabilityBoundingSet", ""},
		{"Service", "RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"},
		{"Service", "SystemCallFilter", "@system-service"},
		{"Install", "WantedBy", "multi-user.target"},
	} {
		got := unit[c.section][c.key]
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("[%s] %s = %q, want exactly %q", c.section, c.key, got, c.want)
		}
	}
	if got := unit["Service"]["LimitNOFILE"]; len(got) != 1 {
		t.Errorf("[Service] LimitNOFILE = %q, want one value", got)
	} else if n, err := strconv.Atoi(got[0]); err != nil || n < 65536 {
		t.Errorf("[Service] LimitNOFILE = %q, want a number of at least 65536", got[0])
	}
	// The unit may write only the data dir of the config it runs.
	cfg, err := os.ReadFile(filepath.Join(root, "packaging/config/nops.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^data_dir\s*=\s*"/var/lib/nops"$`).Match(cfg) {
		t.Error(`packaging/config/nops.hcl does not set data_dir = "/var/lib/nops", the unit's ReadWritePaths`)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze is missing (%v): the unit was checked by the parse above only", err)
		return
	}
	// verify checks that ExecStart's binary exists: point it at a real
	// nops binary, in a copy of the unit.
	bin := testutil.NopsBinary(t)
	dir := t.TempDir()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	good := strings.Replace(string(src), "ExecStart=/usr/bin/nops ", "ExecStart="+bin+" ", 1)
	bad := strings.Replace(good, "ProtectSystem=strict", "ProtectSytem=strict", 1)
	for name, text := range map[string]string{"nops.service": good, "bad.service": bad} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "nops.service")).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The check can fail: a misspelt key is reported.
	out, _ = exec.Command(analyze, "verify", filepath.Join(dir, "bad.service")).CombinedOutput()
	if !strings.Contains(string(out), "ProtectSytem") {
		t.Errorf("systemd-analyze verify says nothing of a misspelt key: %q", out)
	}
}
