package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfigFile loads arbitrary config files, in HCL and in JSON: never a
// panic, and Load either fails or returns a configuration that validates
// again, with no credential of a repository URL in its error.
func FuzzConfigFile(f *testing.F) {
	for _, name := range []string{"testdata/full.hcl", "testdata/override.hcl", "testdata/full.json", "testdata/clusters.hcl"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, strings.HasSuffix(name, ".json"))
	}
	f.Add([]byte(`repository "r" { url = "https://TOKEN_SECRET@git.example/x.git" }`+"\nbootstrap_expect = 1\ndata_dir = \"/tmp/x\""), false)
	f.Add([]byte(`http_port = "x" notify "" {} tls { cert_file = 1 }`), false)
	f.Add([]byte(`{"repository":{"r":{"url":["x"]}}}`), true)
	f.Add([]byte(`{"nomad":{"a":{"address":"https://a:4646","requires":["b"]},"b":{"address":"https://b:4646","requires":["a"],"bake":"1h"}}}`), true)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte, asJSON bool) {
		name := filepath.Join(dir, "nops.hcl")
		if asJSON {
			name = filepath.Join(dir, "nops.json")
		}
		if err := os.WriteFile(name, content, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load([]string{"-config", name}, func(string) (string, bool) { return "", false })
		if err != nil {
			// The credential of a repository URL (user info before the
			// @) never shows in an error. A key name that happens to be
			// the same text may: unknown keys are named (and a syntax
			// error's detail, which could quote a secret typed without
			// its quotes, is dropped: withoutSource).
			if strings.Contains(err.Error(), "TOKEN_SECRET@") {
				t.Fatalf("a load error prints a repository token: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("a loaded configuration does not validate again: %v", err)
		}
	})
}
