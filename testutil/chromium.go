package testutil

import (
	"os"
	"testing"
)

// Environment variables of the browser tests.
const (
	EnvChromiumBin     = "NOPS_CHROMIUM_BIN"
	EnvRequireChromium = "NOPS_REQUIRE_CHROMIUM"
	// EnvScreenshotDir is where the browser tests save their
	// screenshots; a temporary directory when unset.
	EnvScreenshotDir = "NOPS_SCREENSHOT_DIR"
)

// ChromiumBinary returns the path of Chromium for the browser tests:
// $NOPS_CHROMIUM_BIN, else /usr/bin/chromium (Debian's package, which
// `make bootstrap` installs). When it is missing the test fails if
// NOPS_REQUIRE_CHROMIUM=1 or CI=true, and is skipped otherwise.
func ChromiumBinary(t testing.TB) string {
	t.Helper()
	if path := os.Getenv(EnvChromiumBin); path != "" {
		if err := checkExecutable(path); err != nil {
			t.Fatalf("testutil: $%s: %v", EnvChromiumBin, err)
		}
		return path
	}
	for _, path := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if checkExecutable(path) == nil {
			return path
		}
	}
	msg := "chromium not available; run `make chromium` (apt-get install chromium) or set $" + EnvChromiumBin
	if required(EnvRequireChromium) {
		t.Fatalf("testutil: %s (required because %s=1 or CI=true)", msg, EnvRequireChromium)
	}
	t.Skipf("testutil: %s", msg)
	return ""
}

// ScreenshotDir returns the directory for a test's screenshots.
func ScreenshotDir(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv(EnvScreenshotDir); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("testutil: $%s: %v", EnvScreenshotDir, err)
		}
		return dir
	}
	return t.TempDir()
}
