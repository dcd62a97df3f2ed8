package packaging_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
)

// releaseStep runs one step of scripts/release.sh into dist with a fixed
// version, commit and date, and returns its combined output and error.
func releaseStep(t *testing.T, dist string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(repoRoot(t), "scripts/release.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "DIST="+dist)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// TestRelease_Reproducible builds the linux/amd64 binary, its archive and
// its package twice, into two directories, with the release flags of
// scripts/release.sh, and compares the bytes. The binary must print the
// version, commit and date stamped with -ldflags -X, as text and JSON.
func TestRelease_Reproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nops twice")
	}
	const (
		version = "9.8.7-repro.1"
		commit  = "0123456789abcdef0123456789abcdef01234567"
		epoch   = int64(1700000000)
	)
	env := []string{"VERSION=" + version, "COMMIT=" + commit, "SOURCE_DATE_EPOCH=1700000000"}
	p := platform{"linux", runtime.GOARCH}
	if runtime.GOOS != "linux" || (p.arch != "amd64" && p.arch != "arm64") {
		t.Skipf("builds and runs a linux/amd64 or linux/arm64 release; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	steps := [][]string{{"build", p.String()}, {"archive", p.String()}}
	_, dpkgErr := exec.LookPath("dpkg-deb")
	if dpkgErr == nil {
		steps = append(steps, []string{"deb", p.arch})
	} else if required() {
		t.Fatalf("dpkg-deb is missing: %v", dpkgErr)
	} else {
		t.Logf("dpkg-deb is missing (%v): the package is not built", dpkgErr)
	}
	var dirs [2]string
	for i := range dirs {
		dirs[i] = t.TempDir()
		for _, step := range steps {
			if out, err := releaseStep(t, dirs[i], env, step...); err != nil {
				t.Fatalf("release.sh %s: %v\n%s", strings.Join(step, " "), err, out)
			}
		}
	}
	files := []string{"build/linux_" + p.arch + "/nops", p.archive(version)}
	if dpkgErr == nil {
		files = append(files, debName(version, p.arch))
	}
	for _, f := range files {
		a, b := sha256File(t, filepath.Join(dirs[0], f)), sha256File(t, filepath.Join(dirs[1], f))
		if a != b {
			t.Errorf("%s: built twice, sha256 %s and %s", f, a, b)
		} else {
			t.Logf("%s: built twice, sha256 %s both times", f, a)
		}
	}
	checkVersionOutput(t, filepath.Join(dirs[0], "build/linux_"+p.arch+"/nops"), agent.BuildInfo{
		Version: version, Commit: commit, Go: runtime.Version(),
		BuildDate: time.Unix(epoch, 0).UTC().Format(time.RFC3339),
	})
}

// TestReleaseScript_RefusesBadInput: a bad version, platform, step or date
// stops the script before it builds anything, with a message naming it.
func TestReleaseScript_RefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"VERSION=v1.2.3"}, []string{"build", "linux/amd64"}, `VERSION="v1.2.3" is not a version`},
		{[]string{"VERSION=1.2"}, []string{"build", "linux/amd64"}, `VERSION="1.2" is not a version`},
		{[]string{"VERSION=1.2.3", "SOURCE_DATE_EPOCH=yesterday"}, []string{"build"}, `SOURCE_DATE_EPOCH="yesterday"`},
		{[]string{"VERSION=1.2.3", "COMMIT=main; rm -rf /"}, []string{"build"}, `COMMIT="main; rm -rf /" is not a git commit hash`},
		{[]string{"VERSION=1.2.3"}, []string{"build", "plan9/386"}, "unknown platform plan9/386"},
		{[]string{"VERSION=1.2.3"}, []string{"deb", "riscv64"}, "unknown package architecture riscv64"},
		{[]string{"VERSION=1.2.3"}, []string{"archive", "linux/amd64"}, "linux/amd64 is not built"},
		{[]string{"VERSION=1.2.3"}, []string{"publish"}, "unknown step publish"},
	} {
		dist := t.TempDir()
		env := append([]string{"COMMIT=0123456789abcdef0123456789abcdef01234567", "SOURCE_DATE_EPOCH=1700000000"}, c.env...)
		out, err := releaseStep(t, dist, env, c.args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%v %v: err %v, output %q; want a failure saying %q", c.env, c.args, err, out, c.want)
		}
		if entries, _ := os.ReadDir(filepath.Join(dist, "build")); len(entries) > 0 {
			t.Errorf("%v %v: built %d things before refusing", c.env, c.args, len(entries))
		}
	}
}
