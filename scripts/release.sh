#!/usr/bin/env bash
# Builds the release of Nops into dist/ (docs/release.md):
#
#   nops_${VERSION}_${os}_${arch}.tar.gz     nops, LICENSE, README.md (windows: .zip, nops.exe)
#   nops_${VERSION}_${os}_${arch}.sbom.cdx.json   CycloneDX SBOM of that binary
#   nops_${VERSION}_${arch}.deb              linux amd64 and arm64 packages (packaging/)
#   SHA256SUMS                               of every file above (and of the OCI image
#                                            archive of `make image` when it is there)
#
# usage: scripts/release.sh [all]                 everything above
#        scripts/release.sh build [os/arch...]     only the binaries, into dist/build/<os>_<arch>/
#        scripts/release.sh archive os/arch...     the archives of binaries built before
#        scripts/release.sh deb amd64|arm64...     the packages of linux binaries built before
#        scripts/release.sh sbom os/arch...        the SBOMs of binaries built before
#        scripts/release.sh sums                   SHA256SUMS of the artifacts there
#
# Environment: VERSION (default: the source's version, agent.Version), GO
# (default go), SOURCE_DATE_EPOCH and COMMIT (default: those of the checked
# out commit, from git), DIST (default: dist/ of the repository; the release
# test builds into temporary ones).
#
# Reproducible: the binaries are static (CGO_ENABLED=0), built with -trimpath
# and no build ID, and stamped with the commit and the commit's date, never
# the time of the build; archives and packages take every time from
# SOURCE_DATE_EPOCH and list their files in a fixed order with owner root.
# Building the same commit twice gives the same bytes
# (packaging/release_test.go checks it).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

GO=${GO:-go}
# cyclonedx-gomod v1.10.0 (Apache-2.0), installed into dist/build/tools.
CYCLONEDX=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
PLATFORMS=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64)
DEB_ARCHES=(amd64 arm64)
dist=${DIST:-$root/dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
build=$dist/build

die() {
	echo "release: $*" >&2
	exit 1
}

source_version() {
	sed -n 's/^\tVersion = "\(.*\)"$/\1/p' agent/version.go
}

VERSION=${VERSION:-$(source_version)}
# A semantic version without a leading v: servers compare it (agent/upgrade.go).
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]] ||
	die "VERSION=\"$VERSION\" is not a version like 1.2.3 or 1.2.3-rc.1 (no leading v)"

if [[ -z ${COMMIT:-} || -z ${SOURCE_DATE_EPOCH:-} ]]; then
	command -v git >/dev/null || die "git is missing: set COMMIT and SOURCE_DATE_EPOCH"
	git rev-parse --git-dir >/dev/null 2>&1 || die "not a git checkout: set COMMIT and SOURCE_DATE_EPOCH"
fi
COMMIT=${COMMIT:-$(git rev-parse HEAD)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
[[ $COMMIT =~ ^[0-9a-f]{7,64}$ ]] || die "COMMIT=\"$COMMIT\" is not a git commit hash"
[[ $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH=\"$SOURCE_DATE_EPOCH\" is not a number of seconds"
export SOURCE_DATE_EPOCH
BUILD_DATE=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null || true) ]]; then
	echo "release: warning: the work tree has uncommitted changes; the binaries carry commit $COMMIT all the same" >&2
fi

pkg=github.com/nops-dev/nops/agent
LDFLAGS="-s -w -buildid= -X $pkg.Version=$VERSION -X $pkg.Commit=$COMMIT -X $pkg.BuildDate=$BUILD_DATE"

# build_one os/arch: the static binary in dist/build/<os>_<arch>/.
build_one() {
	local os=${1%/*} arch=${1#*/} exe=nops
	[[ $os == windows ]] && exe=nops.exe
	local out=$build/${os}_${arch}
	mkdir -p "$out"
	echo "==> Building $os/$arch"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOFLAGS=-buildvcs=false \
		"$GO" build -trimpath -ldflags "$LDFLAGS" -o "$out/$exe" ./cmd/nops
}

# archive os/arch: the tar.gz (zip for windows) with the binary, LICENSE and README.md.
archive() {
	local os=${1%/*} arch=${1#*/}
	local name=nops_${VERSION}_${os}_${arch} stage=$build/${os}_${arch}
	cp LICENSE README.md "$stage/"
	chmod 0644 "$stage/LICENSE" "$stage/README.md"
	if [[ $os == windows ]]; then
		chmod 0755 "$stage/nops.exe"
		"$GO" run ./scripts/zipdet -o "$dist/$name.zip" -mtime "$SOURCE_DATE_EPOCH" -C "$stage" nops.exe LICENSE README.md
		return
	fi
	chmod 0755 "$stage/nops"
	tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--format=gnu -C "$stage" -cf - nops LICENSE README.md | gzip -n -9 >"$dist/$name.tar.gz"
}

# sbom os/arch: the CycloneDX SBOM of the binary, read from the module
# list the Go linker embeds in it (cyclonedx-gomod's bin mode): exactly the
# modules linked in, with their go.sum hashes and licences, Go's standard
# library, and the release's version for Nops itself. (The app mode would
# take Nops's version from git tags instead, and cannot read a git
# worktree.) Its serial number derives from the artifact's name and it has
# no timestamp, so that it is reproducible too. The licences are read from
# the module cache only (GOPROXY=off): no module is fetched for them. The
# tool asks `go mod download` for each module outside any module, where Go
# would check it against the checksum database, which GOPROXY=off also
# turns off: on a machine that never looked a module up there, every
# licence came out empty. GOSUMDB=off: the build just verified each of
# these modules against go.sum when it downloaded them.
sbom() {
	local os=${1%/*} arch=${1#*/} exe=nops
	[[ $os == windows ]] && exe=nops.exe
	local name=nops_${VERSION}_${os}_${arch}
	local h
	h=$(printf '%s' "$name" | sha256sum | cut -c1-32)
	local serial="${h:0:8}-${h:8:4}-5${h:13:3}-8${h:17:3}-${h:20:12}"
	echo "==> SBOM $os/$arch"
	GOOS=$os GOARCH=$arch GOPROXY=off GOSUMDB=off "$build/tools/cyclonedx-gomod" bin -json -licenses -std -notimestamp -serial "$serial" \
		-version "v$VERSION" -output "$dist/$name.sbom.cdx.json" "$build/${os}_${arch}/$exe" 2>"$build/$name.sbom.log" ||
		{ cat "$build/$name.sbom.log" >&2; die "cyclonedx-gomod failed for $os/$arch"; }
}

# deb arch: the Debian package of the linux binary, the unit and the default config.
deb() {
	local arch=$1 root=$build/deb_$1
	# Debian sorts 1.2.3~rc.1 before 1.2.3, as semver sorts 1.2.3-rc.1.
	local debversion=${VERSION/-/\~}
	rm -rf "$root"
	install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
		"$root/etc/nops.d" "$root/usr/share/doc/nops"
	install -d -m 0750 "$root/etc/nops.d/tls"
	install -m 0755 "$build/linux_$arch/nops" "$root/usr/bin/nops"
	install -m 0644 packaging/systemd/nops.service "$root/lib/systemd/system/nops.service"
	install -m 0644 packaging/config/nops.hcl "$root/etc/nops.d/nops.hcl"
	install -m 0600 packaging/config/nops.env "$root/etc/nops.d/nops.env"
	install -m 0644 LICENSE "$root/usr/share/doc/nops/copyright"
	for s in postinst prerm postrm; do
		install -m 0755 "packaging/deb/$s" "$root/DEBIAN/$s"
	done
	install -m 0644 packaging/deb/conffiles "$root/DEBIAN/conffiles"
	local size
	size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
	sed -e "s/@VERSION@/$debversion/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
		packaging/deb/control >"$root/DEBIAN/control"
	chmod 0644 "$root/DEBIAN/control"
	dpkg-deb --root-owner-group -Zxz --build "$root" "$dist/nops_${VERSION}_${arch}.deb" >/dev/null
	echo "==> Built nops_${VERSION}_${arch}.deb"
}

sums() {
	(
		cd "$dist"
		local files=()
		for p in "${PLATFORMS[@]}"; do
			local os=${p%/*} arch=${p#*/} ext=tar.gz
			[[ $os == windows ]] && ext=zip
			files+=("nops_${VERSION}_${os}_${arch}.$ext" "nops_${VERSION}_${os}_${arch}.sbom.cdx.json")
		done
		for a in "${DEB_ARCHES[@]}"; do
			files+=("nops_${VERSION}_$a.deb")
		done
		[[ -f nops_${VERSION}_oci.tar ]] && files+=("nops_${VERSION}_oci.tar")
		printf '%s\n' "${files[@]}" | LC_ALL=C sort | xargs sha256sum >SHA256SUMS
	)
}

main() {
	local step=${1:-all}
	[[ $# -gt 0 ]] && shift
	case $step in
	sbom)
		[[ -x $build/tools/cyclonedx-gomod ]] || GOBIN=$build/tools "$GO" install "$CYCLONEDX"
		for p in "$@"; do
			[[ " ${PLATFORMS[*]} " == *" $p "* ]] || die "unknown platform $p: one of ${PLATFORMS[*]}"
			sbom "$p"
		done
		;;
	sums)
		sums
		;;
	build | archive)
		local targets=("$@")
		[[ ${#targets[@]} -gt 0 ]] || targets=("${PLATFORMS[@]}")
		for p in "${targets[@]}"; do
			[[ " ${PLATFORMS[*]} " == *" $p "* ]] || die "unknown platform $p: one of ${PLATFORMS[*]}"
			if [[ $step == build ]]; then
				build_one "$p"
			else
				[[ -d $build/${p/\//_} ]] || die "$p is not built: run the build step first"
				archive "$p"
			fi
		done
		;;
	deb)
		[[ $# -gt 0 ]] || die "deb needs an architecture: ${DEB_ARCHES[*]}"
		for a in "$@"; do
			[[ " ${DEB_ARCHES[*]} " == *" $a "* ]] || die "unknown package architecture $a: one of ${DEB_ARCHES[*]}"
			[[ -x $build/linux_$a/nops ]] || die "linux/$a is not built: run the build step first"
			deb "$a"
		done
		;;
	all)
		[[ $# -eq 0 ]] || die "all takes no arguments"
		[[ -f LICENSE ]] || die "LICENSE is missing"
		command -v dpkg-deb >/dev/null || die "dpkg-deb is missing: install Debian's dpkg"
		echo "==> Nops $VERSION, commit $COMMIT, built $BUILD_DATE"
		rm -rf "$build"
		find "$dist" -maxdepth 1 -name "nops_${VERSION}_*" ! -name "*_oci.tar" -delete
		rm -f "$dist/SHA256SUMS"
		echo "==> Installing cyclonedx-gomod ${CYCLONEDX#*@}"
		GOBIN=$build/tools "$GO" install "$CYCLONEDX"
		for p in "${PLATFORMS[@]}"; do
			build_one "$p"
			archive "$p"
			sbom "$p"
		done
		for a in "${DEB_ARCHES[@]}"; do
			deb "$a"
		done
		sums
		echo "==> dist/ holds:"
		(cd "$dist" && ls -l SHA256SUMS nops_"${VERSION}"_*)
		;;
	*)
		die "unknown step $step: all, build, archive, deb, sbom or sums"
		;;
	esac
}

# One line, so that bash has read all of it before it runs: editing this
# file during a release cannot change what the release runs.
main "$@"; exit
