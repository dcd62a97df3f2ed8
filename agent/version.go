package agent

import (
	"runtime"
	"runtime/debug"
)

// The build's identity, stamped by the linker (-ldflags -X, see
// scripts/release.sh). These are the one kind of package-level variable the
// project allows: set once at link time, never written at run time.
var (
	// Version is the build's version, without a leading "v". Servers
	// gossip it, and writes new to a version wait for every server to run
	// it (upgrade.go), so a release stamps a real version here.
	Version = "0.2.0-dev"
	// Commit is the full git commit hash the binary was built from.
	Commit = ""
	// BuildDate is the commit's date (RFC 3339, UTC), not the time of the
	// build, so that building the same commit twice gives the same bytes.
	BuildDate = ""
)

// BuildInfo describes the running binary.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"build_date"`
	Go        string `json:"go"`
}

// Build returns the build's identity. A binary built without the release
// flags takes the commit and its date from the VCS stamp of the Go
// toolchain when there is one, and says "unknown" otherwise.
func Build() BuildInfo {
	b := BuildInfo{Version: Version, Commit: Commit, BuildDate: BuildDate, Go: runtime.Version()}
	if b.Commit == "" || b.BuildDate == "" {
		if info, ok := debug.ReadBuildInfo(); ok {
			for _, s := range info.Settings {
				switch {
				case s.Key == "vcs.revision" && b.Commit == "":
					b.Commit = s.Value
				case s.Key == "vcs.time" && b.BuildDate == "":
					b.BuildDate = s.Value
				}
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.BuildDate == "" {
		b.BuildDate = "unknown"
	}
	return b
}

// String is the one line `nops version` prints, e.g.
// "Nops v1.2.3 (commit abc1234, built 2026-12-02T10:00:00Z, go1.26.8)".
func (b BuildInfo) String() string {
	commit := b.Commit
	if len(commit) > 7 {
		commit = commit[:7]
	}
	return "Nops v" + b.Version + " (commit " + commit + ", built " + b.BuildDate + ", " + b.Go + ")"
}
