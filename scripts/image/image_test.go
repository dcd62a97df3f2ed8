package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/testutil"
)

// Environment of TestImage_Dist: NOPS_REQUIRE_IMAGE=1 makes it check the
// archive that `make image` wrote (NOPS_IMAGE_TAR, else every
// dist/nops_*_oci.tar), and fail when there is none.
const (
	envRequireImage = "NOPS_REQUIRE_IMAGE"
	envImageTar     = "NOPS_IMAGE_TAR"
)

// The build the test makes: a nops binary stamped as the release build is
// (the flags of `make image`), with a version of its own.
const (
	testVersion  = "0.0.0-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testCreated  = "2026-11-30T08:15:00Z"
)

var (
	amd64 = platform{"linux", "amd64"}
	arm64 = platform{"linux", "arm64"}
)

// TestImage builds the image twice from the same inputs into temporary
// files: the two archives are the same byte for byte; then it reads the
// archive back and checks the layout, the config, the files, and that
// /nops of the host's platform runs and prints the stamped version.
//
// Only the amd64 binary is nops (one cross build is what the test
// affords); the arm64 one is a small static program, which is enough to
// check that each platform gets its own binary. TestImage_Dist checks the
// real release archive, with nops for both.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the test runs the linux/amd64 nops it builds; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	root := repoRoot(t)
	dir := t.TempDir()
	nopsBin := goBuild(t, root, "./cmd/nops", amd64, filepath.Join(dir, "nops-amd64"),
		"-s -w -buildid= -X github.com/nops-dev/nops/agent.Version="+testVersion+
			" -X github.com/nops-dev/nops/agent.Commit="+testRevision)
	stubBin := buildStub(t, arm64, filepath.Join(dir, "stub-arm64"))

	args := func(out string) []string {
		return []string{"-version", testVersion, "-revision", testRevision, "-created", testCreated,
			"-binary", "linux/amd64=" + nopsBin, "-binary", "linux/arm64=" + stubBin, "-out", out}
	}
	first, second := filepath.Join(dir, "first", "image.tar"), filepath.Join(dir, "second", "image.tar")
	var printed bytes.Buffer
	if err := run(args(first), &printed); err != nil {
		t.Fatal(err)
	}
	if err := run(args(second), io.Discard); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(first); err != nil || info.Mode().Perm() != 0o644 {
		t.Errorf("the archive: %v, mode %v, want one readable by all (0644)", err, info.Mode())
	}
	a, b := readFile(t, first), readFile(t, second)
	if !bytes.Equal(a, b) {
		t.Fatalf("two builds from the same inputs differ: sha256 %x and %x", sha256.Sum256(a), sha256.Sum256(b))
	}
	t.Logf("build output:\n%s", printed.String())

	created, _ := time.Parse(time.RFC3339, testCreated)
	got := checkArchive(t, first, expected{
		version: testVersion, revision: testRevision, created: created,
		binaries: map[platform][]byte{amd64: readFile(t, nopsBin), arm64: readFile(t, stubBin)},
	})
	if !strings.Contains(printed.String(), got.indexDigest.String()) {
		t.Errorf("the build printed %q, without the index digest %s", printed.String(), got.indexDigest)
	}
	if want := strconv.Itoa(len(a)) + " bytes"; !strings.Contains(printed.String(), want) {
		t.Errorf("the build printed %q, without the archive size %s", printed.String(), want)
	}
}

// TestImage_Dist checks the archive `make image` wrote, nops for both
// platforms, the same way; it is skipped unless NOPS_REQUIRE_IMAGE=1.
func TestImage_Dist(t *testing.T) {
	if os.Getenv(envRequireImage) != "1" {
		t.Skipf("set %s=1 (make image does) to check the archive in dist/", envRequireImage)
	}
	root := repoRoot(t)
	paths := []string{os.Getenv(envImageTar)}
	if paths[0] == "" {
		var err error
		if paths, err = filepath.Glob(filepath.Join(root, "dist", "nops_*_oci.tar")); err != nil {
			t.Fatal(err)
		}
	} else if !filepath.IsAbs(paths[0]) {
		paths[0] = filepath.Join(root, paths[0])
	}
	if len(paths) == 0 {
		t.Fatalf("no dist/nops_*_oci.tar: run `make image` (%s=1 requires one)", envRequireImage)
	}
	for _, p := range paths {
		version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "nops_"), "_oci.tar")
		t.Run(version, func(t *testing.T) {
			got := checkArchive(t, p, expected{version: version})
			for _, pl := range got.platforms {
				t.Logf("%s: manifest %s, layer %d bytes compressed", pl.platform, pl.manifestDigest, pl.layerSize)
			}
			t.Logf("%s: %d bytes, index %s", filepath.Base(p), got.tarSize, got.indexDigest)
		})
	}
}

// TestRun_BadInput: each bad input is refused with an error that names
// it, and no archive is written.
func TestRun_BadInput(t *testing.T) {
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	notELF := filepath.Join(dir, "not-elf")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "image.tar")
	base := func(extra ...string) []string {
		return append([]string{"-version", "1.0.0", "-revision", "abc", "-created", testCreated, "-out", out}, extra...)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no version", []string{"-revision", "abc", "-created", testCreated, "-out", out, "-binary", "linux/amd64=" + self}, "-version is required"},
		{"no binary", base(), "-binary is required"},
		{"bad created", []string{"-version", "1", "-revision", "abc", "-created", "yesterday", "-out", out, "-binary", "linux/amd64=" + self}, "-created"},
		{"version not a tag", append(base("-binary", "linux/amd64="+self), "-version", "1.0/x"), "not usable as an image tag"},
		{"unknown platform", base("-binary", "linux/s390x="+self), `platform "linux/s390x"`},
		{"platform twice", base("-binary", "linux/amd64="+self, "-binary", "linux/amd64="+self), "given twice"},
		{"no CA bundle", base("-binary", "linux/amd64="+self, "-ca-bundle", filepath.Join(dir, "none.crt")), "none.crt does not exist"},
		{"CA bundle without PEM", base("-binary", "linux/amd64="+self, "-ca-bundle", notELF), "holds no PEM certificate"},
		{"not ELF", base("-binary", "linux/amd64="+notELF), "binary for linux/amd64: " + notELF},
		{"missing binary", base("-binary", "linux/amd64="+filepath.Join(dir, "gone")), "gone"},
		{"stray argument", base("-binary", "linux/amd64="+self, "extra"), `unexpected argument "extra"`},
	}
	// The test binary is an ELF of the host's machine: given as the other
	// platform it is refused for its machine.
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{"wrong machine", base("-binary", "linux/arm64="+self), "built for EM_X86_64, want EM_AARCH64"})
	}
	// A dynamically linked program (the system's ls) is refused: the image
	// has no loader.
	if ls, err := exec.LookPath("ls"); err == nil && runtime.GOARCH == "amd64" && isDynamic(ls) {
		cases = append(cases, struct {
			name string
			args []string
			want string
		}{"dynamic binary", base("-binary", "linux/amd64="+ls), "dynamically linked"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := run(c.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Dir(out)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused build left %s behind (%v)", filepath.Dir(out), err)
			}
		})
	}
}

func isDynamic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goBuild builds pkg of the module at root for p, static and trimmed, as
// `make image` does, and returns the binary's path.
func goBuild(t *testing.T, root, pkg string, p platform, out, ldflags string) string {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.os, "GOARCH="+p.arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s for %s: %v\n%s", pkg, p, err, b)
	}
	return out
}

// buildStub builds a small static program for p: a binary of the right
// machine that costs little to build.
func buildStub(t *testing.T, p platform, out string) string {
	t.Helper()
	src := t.TempDir()
	files := map[string]string{
		"go.mod":  "module stub\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() { println(\"stub\") }\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return goBuild(t, src, ".", p, out, "-s -w -buildid=")
}

// expected is what checkArchive requires of an archive. Fields left zero
// are read from the archive and checked for consistency instead: the
// revision and creation time from the labels, and the binaries must then
// be static executables of their platform.
type expected struct {
	version  string
	revision string
	created  time.Time
	binaries map[platform][]byte
}

// checkArchive reads the archive at path back and checks all of it; it
// returns the digests and sizes it read.
func checkArchive(t *testing.T, path string, exp expected) *summary {
	t.Helper()
	dir := untar(t, path)
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("read the OCI layout: %v", err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json: want one image index, got %+v", tm.Manifests)
	}
	wantAnn := map[string]string{annotationRefName: exp.version, annotationImageName: defaultRepository + ":" + exp.version}
	if ann := tm.Manifests[0].Annotations; !maps.Equal(ann, wantAnn) {
		t.Errorf("index.json annotations %v, want %v", ann, wantAnn)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Every digest and size in the index, its manifests, configs and
	// layers (decompressed too) matches its blob.
	if err := validate.Index(idx); err != nil {
		t.Fatalf("the image index does not validate: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	sum := &summary{indexDigest: tm.Manifests[0].Digest, tarSize: int64(len(readFile(t, path)))}
	var got []platform
	for _, d := range im.Manifests {
		if d.MediaType != types.OCIManifestSchema1 || d.Platform == nil {
			t.Fatalf("index entry %s: media type %s, platform %v", d.Digest, d.MediaType, d.Platform)
		}
		p := platform{d.Platform.OS, d.Platform.Architecture}
		got = append(got, p)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		ps := checkImage(t, img, p, &exp)
		ps.manifestDigest = d.Digest
		sum.platforms = append(sum.platforms, ps)
	}
	if want := []platform{amd64, arm64}; !slices.Equal(got, want) {
		t.Fatalf("index platforms %v, want %v", got, want)
	}
	checkDockerManifest(t, dir, idx, exp.version)
	return sum
}

// checkImage checks one platform's image: manifest, config and files.
func checkImage(t *testing.T, img v1.Image, p platform, exp *expected) platformSummary {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("%s: manifest media types %s, config %s", p, m.MediaType, m.Config.MediaType)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		t.Fatalf("%s: want one gzip OCI layer, got %+v", p, m.Layers)
	}
	checkConfig(t, img, p, exp)
	nops := checkFiles(t, img, p, exp)
	if p.os == runtime.GOOS && p.arch == runtime.GOARCH {
		checkRuns(t, nops, exp)
	}
	return platformSummary{platform: p, layerSize: m.Layers[0].Size}
}

func checkConfig(t *testing.T, img v1.Image, p platform, exp *expected) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	labels := cf.Config.Labels
	if exp.revision == "" {
		exp.revision = labels["org.opencontainers.image.revision"]
		if len(exp.revision) < 7 {
			t.Errorf("%s: revision label %q is not a commit", p, exp.revision)
		}
	}
	if exp.created.IsZero() {
		if exp.created, err = time.Parse(time.RFC3339, labels["org.opencontainers.image.created"]); err != nil {
			t.Fatalf("%s: created label: %v", p, err)
		}
	}
	if cf.OS != p.os || cf.Architecture != p.arch || !cf.Created.Time.Equal(exp.created) {
		t.Errorf("%s: config os %s, arch %s, created %s", p, cf.OS, cf.Architecture, cf.Created.Time)
	}
	c := cf.Config
	if c.User != "65532:65532" || c.WorkingDir != "/data" || !slices.Equal(c.Entrypoint, []string{"/nops"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("%s: user %q, workdir %q, entrypoint %q, cmd %q", p, c.User, c.WorkingDir, c.Entrypoint, c.Cmd)
	}
	if want := []string{"NOPS_DATA_DIR=/data", "NOPS_CONFIG=/etc/nops.d"}; !slices.Equal(c.Env, want) {
		t.Errorf("%s: env %q, want %q", p, c.Env, want)
	}
	wantPorts := []string{
		strconv.Itoa(config.DefaultHTTPPort) + "/tcp", strconv.Itoa(config.DefaultRPCPort) + "/tcp",
		strconv.Itoa(config.DefaultSerfPort) + "/tcp", strconv.Itoa(config.DefaultSerfPort) + "/udp",
	}
	if got := sortedKeys(c.ExposedPorts); !slices.Equal(got, sortedStrings(wantPorts)) {
		t.Errorf("%s: exposed ports %v, want %v", p, got, wantPorts)
	}
	if got := sortedKeys(c.Volumes); !slices.Equal(got, []string{"/data"}) {
		t.Errorf("%s: volumes %v, want /data", p, got)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.version":     exp.version,
		"org.opencontainers.image.revision":    exp.revision,
		"org.opencontainers.image.source":      "https://github.com/nops-dev/nops",
		"org.opencontainers.image.licenses":    "MPL-2.0",
		"org.opencontainers.image.title":       "Nops",
		"org.opencontainers.image.description": imageDescription,
		"org.opencontainers.image.created":     exp.created.UTC().Format(time.RFC3339),
	}
	if !maps.Equal(labels, wantLabels) {
		t.Errorf("%s: labels %v, want %v", p, labels, wantLabels)
	}
	if len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(exp.created) {
		t.Errorf("%s: history %+v", p, cf.History)
	}
}

// layerFile is one entry of an image's filesystem.
type layerFile struct {
	hdr  *tar.Header
	body []byte
}

// checkFiles checks the image's filesystem, flattened, and returns /nops.
func checkFiles(t *testing.T, img v1.Image, p platform, exp *expected) []byte {
	t.Helper()
	files := map[string]layerFile{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: read the layer: %v", p, err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.Trim(strings.TrimPrefix(hdr.Name, "./"), "/")
		files[name] = layerFile{hdr: hdr, body: body}
		if !hdr.ModTime.Equal(exp.created) {
			t.Errorf("%s: %s has time %s, want the commit's %s", p, name, hdr.ModTime, exp.created)
		}
	}
	want := []struct {
		name     string
		typ      byte
		mode     int64
		uid, gid int
	}{
		{"data", tar.TypeDir, 0o750, 65532, 65532},
		{"etc", tar.TypeDir, 0o755, 0, 0},
		{"etc/group", tar.TypeReg, 0o644, 0, 0},
		{"etc/nops.d", tar.TypeDir, 0o755, 0, 0},
		{"etc/passwd", tar.TypeReg, 0o644, 0, 0},
		{"etc/ssl", tar.TypeDir, 0o755, 0, 0},
		{"etc/ssl/certs", tar.TypeDir, 0o755, 0, 0},
		{"etc/ssl/certs/ca-certificates.crt", tar.TypeReg, 0o644, 0, 0},
		{"nops", tar.TypeReg, 0o755, 0, 0},
		{"tmp", tar.TypeDir, 0o1777, 0, 0},
	}
	if got := sortedKeys(files); len(got) != len(want) {
		t.Errorf("%s: files %v, want %d", p, got, len(want))
	}
	for _, w := range want {
		f, ok := files[w.name]
		if !ok {
			t.Errorf("%s: /%s is missing", p, w.name)
			continue
		}
		if f.hdr.Typeflag != w.typ || f.hdr.Mode != w.mode || f.hdr.Uid != w.uid || f.hdr.Gid != w.gid {
			t.Errorf("%s: /%s type %c mode %o owner %d:%d, want %c %o %d:%d", p, w.name,
				f.hdr.Typeflag, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, w.typ, w.mode, w.uid, w.gid)
		}
	}
	if !strings.Contains(string(files["etc/passwd"].body), "\nnops:x:65532:65532:nops:/data:/sbin/nologin\n") {
		t.Errorf("%s: /etc/passwd has no nops user:\n%s", p, files["etc/passwd"].body)
	}
	if !strings.Contains(string(files["etc/group"].body), "\nnops:x:65532:\n") {
		t.Errorf("%s: /etc/group has no nops group:\n%s", p, files["etc/group"].body)
	}
	if ca := files["etc/ssl/certs/ca-certificates.crt"].body; !bytes.Equal(ca, readFile(t, defaultCABundle)) {
		t.Errorf("%s: the CA bundle (%d bytes) is not the build machine's %s", p, len(ca), defaultCABundle)
	}
	nops := files["nops"].body
	if want, ok := exp.binaries[p]; ok && !bytes.Equal(nops, want) {
		t.Errorf("%s: /nops (%d bytes) is not the binary given for %s (%d bytes)", p, len(nops), p, len(want))
	}
	bin := filepath.Join(t.TempDir(), "nops")
	if err := os.WriteFile(bin, nops, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkBinary(bin, p); err != nil {
		t.Errorf("%s: /nops: %v", p, err)
	}
	return nops
}

// checkRuns runs /nops of the host's platform: `nops version` prints the
// stamped version, and its JSON the version and, when the build stamps
// one, the commit of the revision label.
func checkRuns(t *testing.T, nops []byte, exp *expected) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nops")
	if err := os.WriteFile(bin, nops, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "Nops v"+exp.version+" ") {
		t.Fatalf("/nops version: %v: %q, want it to start with %q", err, out, "Nops v"+exp.version+" ")
	}
	out, err = exec.Command(bin, "version", "-json").Output()
	if err != nil {
		t.Fatalf("/nops version -json: %v", err)
	}
	var v map[string]string
	if err := json.Unmarshal(out, &v); err != nil || v["version"] != exp.version {
		t.Fatalf("/nops version -json: %q (%v), want version %q", out, err, exp.version)
	}
	if c, ok := v["commit"]; ok && !strings.HasPrefix(exp.revision, c) {
		t.Errorf("/nops version -json: commit %q, want the revision label %q", c, exp.revision)
	}
}

// checkDockerManifest checks manifest.json: one entry per platform, in
// the index's order, naming its config and layer blobs and tagged
// <repository>:<version>-<arch>.
func checkDockerManifest(t *testing.T, dir string, idx v1.ImageIndex, version string) {
	t.Helper()
	var entries []dockerManifestEntry
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "manifest.json")), &entries); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(im.Manifests) {
		t.Fatalf("manifest.json has %d entries, the index %d images", len(entries), len(im.Manifests))
	}
	for i, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		e := entries[i]
		wantTag := defaultRepository + ":" + version + "-" + d.Platform.Architecture
		if e.Config != blobPath(m.Config.Digest) || len(e.Layers) != 1 || e.Layers[0] != blobPath(m.Layers[0].Digest) ||
			!slices.Equal(e.RepoTags, []string{wantTag}) {
			t.Errorf("manifest.json entry %d: %+v, want config %s, layer %s, tag %s", i, e,
				blobPath(m.Config.Digest), blobPath(m.Layers[0].Digest), wantTag)
		}
	}
}

// untar unpacks the archive into a temporary directory, refusing any
// entry that is not a plain file or directory inside it.
func untar(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		names = append(names, hdr.Name)
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if !strings.HasPrefix(target, dir+string(filepath.Separator)) || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Fatalf("%s: entry %q (owner %d:%d) is not a plain entry of the layout", path, hdr.Name, hdr.Uid, hdr.Gid)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(target, b, 0o644)
			}
		default:
			t.Fatalf("%s: entry %q has type %c", path, hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("%s: entries are not in lexical order: %v", path, names)
	}
	return dir
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return sortedStrings(keys)
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
