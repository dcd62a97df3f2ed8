// Package packaging_test checks the release that `make release`
// (scripts/release.sh) writes to dist/, and the files it packs from
// packaging/: the archives and what they hold, the binaries' stamps and
// build flags, the SBOMs, SHA256SUMS, the Debian packages, the systemd unit
// and the default configuration. It also builds a release of one platform
// twice and compares the bytes.
//
// The checks of dist/ fail when dist/ holds no release of the expected
// version and NOPS_REQUIRE_RELEASE=1 or CI=true (the GNUmakefile exports
// the first; .ci/run runs `make release` before `make test`), and are
// skipped otherwise. The expected version is NOPS_RELEASE_VERSION, else the
// source's (agent.Version), which is what `make release` stamps by default.
package packaging_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/testutil"
)

const (
	envRequireRelease = "NOPS_REQUIRE_RELEASE"
	envReleaseVersion = "NOPS_RELEASE_VERSION"
	stampPkg          = "github.com/nops-dev/nops/agent"
)

// platform is one target of the release.
type platform struct{ os, arch string }

var platforms = []platform{
	{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"},
}

func (p platform) String() string { return p.os + "/" + p.arch }

func (p platform) exe() string {
	if p.os == "windows" {
		return "nops.exe"
	}
	return "nops"
}

func (p platform) archive(version string) string {
	ext := "tar.gz"
	if p.os == "windows" {
		ext = "zip"
	}
	return fmt.Sprintf("nops_%s_%s_%s.%s", version, p.os, p.arch, ext)
}

func (p platform) sbom(version string) string {
	return fmt.Sprintf("nops_%s_%s_%s.sbom.cdx.json", version, p.os, p.arch)
}

func debName(version, arch string) string { return fmt.Sprintf("nops_%s_%s.deb", version, arch) }

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func required() bool {
	return os.Getenv(envRequireRelease) == "1" || os.Getenv("CI") == "true"
}

// release returns dist/ and the version of the release in it, or fails or
// skips the test when there is none.
func release(t *testing.T) (dist, version string) {
	t.Helper()
	version = os.Getenv(envReleaseVersion)
	if version == "" {
		version = agent.Version
	}
	dist = filepath.Join(repoRoot(t), "dist")
	var missing []string
	for _, name := range []string{"SHA256SUMS", platforms[0].archive(version)} {
		if _, err := os.Stat(filepath.Join(dist, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("dist/ holds no release of version %s (missing %s): run `make release` (VERSION=%s)",
			version, strings.Join(missing, ", "), version)
		if required() {
			t.Fatalf("%s; required because %s=1 or CI=true", msg, envRequireRelease)
		}
		t.Skip(msg)
	}
	return dist, version
}

// entry is one file of an archive.
type entry struct {
	mode     os.FileMode
	uid, gid int
	mtime    time.Time
	data     []byte
}

func readArchive(t *testing.T, path string) map[string]entry {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, f := range zr.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(rc)
			_ = rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[f.Name] = entry{mode: f.Mode().Perm(), mtime: f.Modified, data: data}
		}
		return out
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !gz.ModTime.IsZero() || gz.Name != "" {
		t.Errorf("%s: the gzip header records a time (%v) or a name (%q): not reproducible", path, gz.ModTime, gz.Name)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: %s has owner names %q/%q", path, h.Name, h.Uname, h.Gname)
		}
		out[h.Name] = entry{mode: os.FileMode(h.Mode).Perm(), uid: h.Uid, gid: h.Gid, mtime: h.ModTime, data: data}
	}
	return out
}

// checkBuildFlags checks bi was built for p with CGO off and -trimpath (with
// which Go records no -ldflags: the stamps are checked in the bytes).
func checkBuildFlags(t *testing.T, p platform, bi *buildinfo.BuildInfo) {
	t.Helper()
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": p.os, "GOARCH": p.arch} {
		if settings[k] != want {
			t.Errorf("built with %s=%q, want %q", k, settings[k], want)
		}
	}
}

// hostStamps runs the binary of this machine from its archive and returns
// what it says of itself.
func hostStamps(t *testing.T, dist, version string) agent.BuildInfo {
	t.Helper()
	p := platform{runtime.GOOS, runtime.GOARCH}
	files := readArchive(t, filepath.Join(dist, p.archive(version)))
	path := filepath.Join(t.TempDir(), p.exe())
	if err := os.WriteFile(path, files[p.exe()].data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version", "-json").Output()
	if err != nil {
		t.Fatalf("%s version -json: %v", p, err)
	}
	var b agent.BuildInfo
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("%s version -json: %v: %s", p, err, out)
	}
	if b.Version != version || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(b.Commit) {
		t.Fatalf("%s version -json = %+v: want version %s and a full commit hash", p, b, version)
	}
	if _, err := time.Parse(time.RFC3339, b.BuildDate); err != nil {
		t.Fatalf("%s: build date %q: %v", p, b.BuildDate, err)
	}
	checkVersionOutput(t, path, b)
	return b
}

// checkFormat checks the binary is of p's format and machine, and static.
func checkFormat(t *testing.T, p platform, bin []byte) {
	t.Helper()
	r := bytes.NewReader(bin)
	switch p.os {
	case "linux":
		f, err := elf.NewFile(r)
		if err != nil {
			t.Fatalf("%s: not ELF: %v", p, err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.arch]
		if f.Machine != want {
			t.Errorf("%s: ELF machine %v, want %v", p, f.Machine, want)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s: has a program interpreter: not a static binary", p)
			}
		}
	case "darwin":
		f, err := macho.NewFile(r)
		if err != nil {
			t.Fatalf("%s: not Mach-O: %v", p, err)
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[p.arch]
		if f.Cpu != want {
			t.Errorf("%s: Mach-O CPU %v, want %v", p, f.Cpu, want)
		}
	case "windows":
		f, err := pe.NewFile(r)
		if err != nil {
			t.Fatalf("%s: not PE: %v", p, err)
		}
		if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
			t.Errorf("%s: PE machine %#x, want amd64", p, f.Machine)
		}
	}
}

// TestRelease_Archives: the binary for this machine runs and prints the
// release's version, a commit of this repository and that commit's date;
// each archive holds exactly the binary, LICENSE and README.md, root-owned
// with fixed modes and that date; each binary is of its platform, static,
// built with -trimpath and CGO off by the same Go, and holds the same stamps.
func TestRelease_Archives(t *testing.T) {
	dist, version := release(t)
	root := repoRoot(t)
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	host := hostStamps(t, dist, version)
	when, err := time.Parse(time.RFC3339, host.BuildDate)
	if err != nil {
		t.Fatal(err)
	}
	commit, buildDate := host.Commit, host.BuildDate
	for _, p := range platforms {
		t.Run(p.os+"_"+p.arch, func(t *testing.T) {
			files := readArchive(t, filepath.Join(dist, p.archive(version)))
			if len(files) != 3 {
				t.Errorf("holds %d files, want 3 (%s, LICENSE, README.md)", len(files), p.exe())
			}
			for name, want := range map[string]os.FileMode{p.exe(): 0o755, "LICENSE": 0o644, "README.md": 0o644} {
				f, ok := files[name]
				if !ok {
					t.Fatalf("%s is missing", name)
				}
				if f.mode != want || f.uid != 0 || f.gid != 0 {
					t.Errorf("%s: mode %v owner %d:%d, want %v 0:0", name, f.mode, f.uid, f.gid, want)
				}
			}
			if !bytes.Equal(files["LICENSE"].data, license) || !bytes.Equal(files["README.md"].data, readme) {
				t.Error("LICENSE or README.md differs from the tree's: dist/ is older than the tree, run `make release`")
			}
			bin := files[p.exe()].data
			checkFormat(t, p, bin)
			bi, err := buildinfo.Read(bytes.NewReader(bin))
			if err != nil {
				t.Fatalf("build info: %v", err)
			}
			checkBuildFlags(t, p, bi)
			if bi.GoVersion != host.Go {
				t.Errorf("built with %s, the %s binary with %s", bi.GoVersion, runtime.GOOS+"/"+runtime.GOARCH, host.Go)
			}
			// The same stamps as the binary that ran: its version, commit and date are in the bytes.
			for _, stamp := range []string{"Nops v", host.Version, host.Commit, host.BuildDate} {
				if !bytes.Contains(bin, []byte(stamp)) {
					t.Errorf("the binary does not hold the stamp %q", stamp)
				}
			}
			for name, f := range files {
				if !f.mtime.Equal(when) {
					t.Errorf("%s: time %v, want the build date %v", name, f.mtime, when)
				}
			}
		})
	}
	checkCommitDate(t, root, commit, buildDate)
}

func checkVersionOutput(t *testing.T, path string, want agent.BuildInfo) {
	t.Helper()
	out, err := exec.Command(path, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("nops version: %v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want.String() {
		t.Errorf("nops version = %q, want %q", got, want.String())
	}
	out, err = exec.Command(path, "version", "-json").Output()
	if err != nil {
		t.Fatalf("nops version -json: %v", err)
	}
	var got agent.BuildInfo
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("nops version -json: %v: %s", err, out)
	}
	if got != want {
		t.Errorf("nops version -json = %+v, want %+v", got, want)
	}
}

// checkCommitDate checks that commit is one of this repository and that
// buildDate is its committer date, when git can tell.
func checkCommitDate(t *testing.T, root, commit, buildDate string) {
	t.Helper()
	if commit == "" {
		return
	}
	out, err := exec.Command("git", "-C", root, "show", "-s", "--format=%ct", commit).Output()
	if err != nil {
		if required() {
			t.Errorf("git show %s: %v (the stamped commit must be one of this repository)", commit, err)
		} else {
			t.Logf("git cannot show the stamped commit %s (%v): its date is not checked", commit, err)
		}
		return
	}
	var secs int64
	if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &secs); err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(secs, 0).UTC().Format(time.RFC3339); buildDate != want {
		t.Errorf("stamped build date %s, but commit %s is of %s", buildDate, commit, want)
	}
}
