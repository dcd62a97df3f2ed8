package packaging_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// cdxBOM is the part of a CycloneDX SBOM the test reads.
type cdxBOM struct {
	BOMFormat    string `json:"bomFormat"`
	SpecVersion  string `json:"specVersion"`
	SerialNumber string `json:"serialNumber"`
	Metadata     struct {
		Component cdxComponent `json:"component"`
	} `json:"metadata"`
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	PURL    string `json:"purl"`
	Hashes  []struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	} `json:"hashes"`
	// Evidence holds the licences cyclonedx-gomod detected in the module.
	Evidence struct {
		Licenses []struct {
			License struct {
				ID string `json:"id"`
			} `json:"license"`
		} `json:"licenses"`
	} `json:"evidence"`
}

// goModRequires returns the versions go.mod requires, by module path.
func goModRequires(t *testing.T, root string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			in = true
		case line == ")":
			in = false
		case in:
			if fields := strings.Fields(line); len(fields) >= 2 {
				out[fields[0]] = fields[1]
			}
		}
	}
	return out
}

// TestRelease_SBOMs: each binary has a CycloneDX SBOM that names Nops at the
// release's version for its platform, the standard library, and the
// modules linked in at the versions go.mod requires, with their hashes and
// licences;
// serial numbers differ between SBOMs.
func TestRelease_SBOMs(t *testing.T) {
	dist, version := release(t)
	requires := goModRequires(t, repoRoot(t))
	// Modules every server links; their licences are known.
	linked := map[string]string{
		"github.com/hashicorp/raft":     "MPL-2.0",
		"github.com/hashicorp/serf":     "MPL-2.0",
		"github.com/go-git/go-git/v5":   "Apache-2.0",
		"github.com/hashicorp/hcl/v2":   "MPL-2.0",
		"github.com/hashicorp/go-hclog": "MIT",
	}
	serials := map[string]string{}
	for _, p := range platforms {
		raw, err := os.ReadFile(filepath.Join(dist, p.sbom(version)))
		if err != nil {
			t.Fatal(err)
		}
		var bom cdxBOM
		if err := json.Unmarshal(raw, &bom); err != nil {
			t.Fatalf("%s: %v", p.sbom(version), err)
		}
		main := bom.Metadata.Component
		if bom.BOMFormat != "CycloneDX" || bom.SpecVersion == "" {
			t.Errorf("%s: bomFormat %q specVersion %q", p, bom.BOMFormat, bom.SpecVersion)
		}
		if main.Name != "github.com/nops-dev/nops" || main.Version != "v"+version {
			t.Errorf("%s: main component %s %s, want github.com/nops-dev/nops v%s", p, main.Name, main.Version, version)
		}
		if !strings.Contains(main.PURL, "goos="+p.os) || !strings.Contains(main.PURL, "goarch="+p.arch) {
			t.Errorf("%s: main component purl %s does not name the platform", p, main.PURL)
		}
		if other, ok := serials[bom.SerialNumber]; ok || bom.SerialNumber == "" {
			t.Errorf("%s: serial number %q empty or the same as %s's", p, bom.SerialNumber, other)
		}
		serials[bom.SerialNumber] = p.String()
		found := map[string]cdxComponent{}
		for _, c := range bom.Components {
			found[c.Name] = c
		}
		if _, ok := found["std"]; !ok {
			t.Errorf("%s: no component for Go's standard library", p)
		}
		for mod, lic := range linked {
			c, ok := found[mod]
			switch {
			case !ok:
				t.Errorf("%s: no component %s", p, mod)
			case c.Version != requires[mod]:
				t.Errorf("%s: %s at %s, go.mod requires %s", p, mod, c.Version, requires[mod])
			case len(c.Evidence.Licenses) == 0 || c.Evidence.Licenses[0].License.ID != lic:
				t.Errorf("%s: %s licences %+v, want %s", p, mod, c.Evidence.Licenses, lic)
			case len(c.Hashes) == 0 || c.Hashes[0].Alg != "SHA-256" || len(c.Hashes[0].Content) != 64:
				t.Errorf("%s: %s hashes %+v, want its SHA-256", p, mod, c.Hashes)
			}
		}
	}
}

// TestRelease_Checksums: SHA256SUMS lists every artifact of the release,
// sorted, and each sum is the file's.
func TestRelease_Checksums(t *testing.T) {
	dist, version := release(t)
	raw, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: bad line %q", line)
		}
		names = append(names, name)
		f, err := os.Open(filepath.Join(dist, name))
		if err != nil {
			t.Errorf("SHA256SUMS lists %s: %v", name, err)
			continue
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum {
			t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, sum)
		}
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("SHA256SUMS is not sorted by name: %v", names)
	}
	want := []string{debName(version, "amd64"), debName(version, "arm64")}
	for _, p := range platforms {
		want = append(want, p.archive(version), p.sbom(version))
	}
	listed := map[string]bool{}
	for _, n := range names {
		listed[n] = true
	}
	for _, w := range want {
		if !listed[w] {
			t.Errorf("SHA256SUMS does not list %s", w)
		}
	}
}

// debVersion is the Debian version of a release version: 1.2.3-rc.1 is
// 1.2.3~rc.1, which Debian sorts before 1.2.3.
func debVersion(v string) string { return strings.Replace(v, "-", "~", 1) }

// dpkgDeb runs dpkg-deb, failing when it is missing and the release is
// required (it builds the release), skipping otherwise.
func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		if required() {
			t.Fatalf("dpkg-deb is missing: %v", err)
		}
		t.Skipf("dpkg-deb is missing: %v", err)
	}
	out, err := exec.Command("dpkg-deb", args...).Output()
	if err != nil {
		t.Fatalf("dpkg-deb %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// debEntry is one line of `dpkg-deb -c`.
type debEntry struct{ perms, owner string }

// TestRelease_Debs: each package's control fields, its files with their
// modes and owners, its conffiles and maintainer scripts (which must parse
// as sh), its unit and config equal to packaging/'s, and its binary (amd64)
// running `version`.
func TestRelease_Debs(t *testing.T) {
	dist, version := release(t)
	root := repoRoot(t)
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			deb := filepath.Join(dist, debName(version, arch))
			for field, want := range map[string]string{
				"Package": "nops", "Version": debVersion(version), "Architecture": arch, "Depends": "adduser",
			} {
				if got := strings.TrimSpace(dpkgDeb(t, "-f", deb, field)); got != want {
					t.Errorf("control %s = %q, want %q", field, got, want)
				}
			}
			files := map[string]debEntry{}
			for _, line := range strings.Split(strings.TrimSpace(dpkgDeb(t, "-c", deb)), "\n") {
				f := strings.Fields(line)
				if len(f) < 6 {
					t.Fatalf("dpkg-deb -c: %q", line)
				}
				files[strings.TrimSuffix(f[len(f)-1], "/")] = debEntry{perms: f[0], owner: f[1]}
			}
			for path, perms := range map[string]string{
				"./usr/bin/nops":                    "-rwxr-xr-x",
				"./lib/systemd/system/nops.service": "-rw-r--r--",
				"./etc/nops.d/nops.hcl":             "-rw-r--r--",
				"./etc/nops.d/nops.env":             "-rw-------",
				"./etc/nops.d/tls":                  "drwxr-x---",
				"./usr/share/doc/nops/copyright":    "-rw-r--r--",
			} {
				if e, ok := files[path]; !ok {
					t.Errorf("%s is missing", path)
				} else if e.perms != perms {
					t.Errorf("%s: %s, want %s", path, e.perms, perms)
				}
			}
			for path, e := range files {
				if e.owner != "root/root" {
					t.Errorf("%s: owner %s, want root/root", path, e.owner)
				}
			}
			tmp := t.TempDir()
			dpkgDeb(t, "-x", deb, tmp)
			dpkgDeb(t, "-e", deb, filepath.Join(tmp, "DEBIAN"))
			sameFile(t, filepath.Join(root, "packaging/systemd/nops.service"), filepath.Join(tmp, "lib/systemd/system/nops.service"))
			sameFile(t, filepath.Join(root, "packaging/config/nops.hcl"), filepath.Join(tmp, "etc/nops.d/nops.hcl"))
			sameFile(t, filepath.Join(root, "packaging/config/nops.env"), filepath.Join(tmp, "etc/nops.d/nops.env"))
			conffiles, err := os.ReadFile(filepath.Join(tmp, "DEBIAN/conffiles"))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(string(conffiles)); strings.Join(got, " ") != "/etc/nops.d/nops.hcl /etc/nops.d/nops.env" {
				t.Errorf("conffiles %v", got)
			}
			for _, s := range []string{"postinst", "prerm", "postrm"} {
				if out, err := exec.Command("sh", "-n", filepath.Join(tmp, "DEBIAN", s)).CombinedOutput(); err != nil {
					t.Errorf("%s does not parse: %v: %s", s, err, out)
				}
			}
			postinst, err := os.ReadFile(filepath.Join(tmp, "DEBIAN/postinst"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"adduser --system", "/var/lib/nops", "[ -d /run/systemd/system ]", "systemctl daemon-reload"} {
				if !strings.Contains(string(postinst), want) {
					t.Errorf("postinst lacks %q", want)
				}
			}
			if runtime.GOOS == "linux" && runtime.GOARCH == arch {
				out, err := exec.Command(filepath.Join(tmp, "usr/bin/nops"), "version").Output()
				if err != nil || !strings.HasPrefix(string(out), "Nops v"+version+" ") {
					t.Errorf("the packaged nops version: %q, %v", out, err)
				}
			}
		})
	}
}

func sameFile(t *testing.T, want, got string) {
	t.Helper()
	a, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("%s differs from %s: dist/ is older than the tree, run `make release`", got, want)
	}
}
