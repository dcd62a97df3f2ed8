package testutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Environment variables that locate the binaries the tests run and say
// whether a missing one fails the test instead of skipping it.
const (
	EnvNomadBin      = "NOPS_NOMAD_BIN"
	EnvConsulBin     = "NOPS_CONSUL_BIN"
	EnvNopsBin       = "NOPS_BIN"
	EnvRequireNomad  = "NOPS_REQUIRE_NOMAD"
	EnvRequireConsul = "NOPS_REQUIRE_CONSUL"
	EnvRequireNops   = "NOPS_REQUIRE_NOPS"
)

// RepoRoot returns the root directory of the Go module the calling test
// belongs to: the nearest parent of the working directory (a test's package
// directory) that holds a go.mod file.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("finding repository root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding repository root: no go.mod in the working directory or any parent")
		}
		dir = parent
	}
}

// NomadBinary returns the path of the Nomad binary: $NOPS_NOMAD_BIN, or
// bin/nomad under the repository root. When it is missing the test fails if
// NOPS_REQUIRE_NOMAD=1 or CI=true, and is skipped otherwise.
func NomadBinary(t testing.TB) string {
	t.Helper()
	return findBinary(t, binarySpec{
		name:       "nomad",
		envBin:     EnvNomadBin,
		envRequire: EnvRequireNomad,
		makeTarget: "make nomad",
	})
}

// ConsulBinary returns the path of the Consul binary: $NOPS_CONSUL_BIN, or
// bin/consul under the repository root. When it is missing the test fails if
// NOPS_REQUIRE_CONSUL=1 or CI=true, and is skipped otherwise.
func ConsulBinary(t testing.TB) string {
	t.Helper()
	return findBinary(t, binarySpec{
		name:       "consul",
		envBin:     EnvConsulBin,
		envRequire: EnvRequireConsul,
		makeTarget: "make consul",
	})
}

// NopsBinary returns the path of the Nops binary for process-level tests:
// $NOPS_BIN, or bin/nops under the repository root (built by `make build`,
// which `make test` runs first). When it is missing the test fails if
// NOPS_REQUIRE_NOPS=1 or CI=true, and is skipped otherwise. The binary is
// whatever was last built: tests that must run the code under test should
// build it themselves.
func NopsBinary(t testing.TB) string {
	t.Helper()
	return findBinary(t, binarySpec{
		name:       "nops",
		envBin:     EnvNopsBin,
		envRequire: EnvRequireNops,
		makeTarget: "make build",
	})
}

type binarySpec struct {
	name       string
	envBin     string
	envRequire string
	makeTarget string
}

func findBinary(t testing.TB, spec binarySpec) string {
	t.Helper()

	if path := os.Getenv(spec.envBin); path != "" {
		if err := checkExecutable(path); err != nil {
			// An explicit path that is wrong is always an error.
			t.Fatalf("testutil: $%s: %v", spec.envBin, err)
		}
		return path
	}

	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	path := filepath.Join(root, "bin", spec.name)
	err = checkExecutable(path)
	if err == nil {
		return path
	}

	msg := fmt.Sprintf("%s binary not available (%v); run `%s` or set $%s", spec.name, err, spec.makeTarget, spec.envBin)
	if required(spec.envRequire) {
		t.Fatalf("testutil: %s (required because %s=1 or CI=true)", msg, spec.envRequire)
	}
	t.Skipf("testutil: %s", msg)
	return ""
}

func required(envRequire string) bool {
	return os.Getenv(envRequire) == "1" || os.Getenv("CI") == "true"
}

func checkExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	if info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}
