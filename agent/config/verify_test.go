package config

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// allowedSignersFile writes an allowed_signers file with one new Ed25519
// key and returns its path.
func allowedSignersFile(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(p, []byte("ops@example.com "+string(ssh.MarshalAuthorizedKey(sp))), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoad_RepositoryVerify: a repository's verify block is read into
// Repository.Verify; a verify block with neither file, a key file that is
// missing or does not parse, a second verify block and an unknown
// attribute each fail the start, naming the repository and the setting.
func TestLoad_RepositoryVerify(t *testing.T) {
	signers := allowedSignersFile(t)
	load := func(verify string) (*Config, error) {
		p := writeFile(t, "v.hcl", "data_dir = \"/d\"\nbootstrap_expect = 1\nrepository \"prod\" {\n  url = \"https://x.example.com/r.git\"\n"+verify+"}\n")
		return Load(args("-config", p), nil)
	}
	c, err := load("  verify {\n    allowed_signers_file = \"" + signers + "\"\n  }\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (&RepoVerify{AllowedSignersFile: signers}); !reflect.DeepEqual(c.Repositories[0].Verify, want) {
		t.Fatalf("verify = %+v, want %+v", c.Repositories[0].Verify, want)
	}
	c, err = load("")
	if err != nil || c.Repositories[0].Verify != nil {
		t.Fatalf("without a verify block: %+v, %v", c.Repositories[0].Verify, err)
	}

	garbage := writeFile(t, "trusted.asc", "not a key\n")
	missing := filepath.Join(t.TempDir(), "nope")
	for name, tc := range map[string]struct {
		verify string
		want   []string
	}{
		"neither file": {"  verify {}\n", []string{`repository "prod": verify: set allowed_signers_file, gpg_keys_file or both`}},
		"missing and unparsable files": {"  verify {\n    allowed_signers_file = \"" + missing + "\"\n    gpg_keys_file = \"" + garbage + "\"\n  }\n",
			[]string{`repository "prod": verify: allowed_signers_file ` + missing + `: open`,
				`repository "prod": verify: gpg_keys_file ` + garbage + `: no armored public key block`}},
		"two verify blocks": {"  verify {\n    allowed_signers_file = \"" + signers + "\"\n  }\n  verify {\n    allowed_signers_file = \"" + signers + "\"\n  }\n",
			[]string{"Duplicate verify block", `Repository "prod" already has a verify block`}},
		"unknown attribute": {"  verify {\n    allowed_signers_file = \"" + signers + "\"\n    keyring = \"/k\"\n  }\n",
			[]string{"keyring"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(tc.verify)
			mustContainAll(t, err, tc.want...)
		})
	}
}

// TestValidate_RepositoryVerify: Validate reports every problem of every
// repository's verify, beside the other problems.
func TestValidate_RepositoryVerify(t *testing.T) {
	c := Default()
	c.DataDir, c.BootstrapExpect, c.InsecureRPC = "/d", 1, true
	a, b, ok := newRepository("a"), newRepository("b"), newRepository("ok")
	a.URL, b.URL, ok.URL = "https://x/a.git", "https://x/b.git", "https://x/ok.git"
	a.Verify = &RepoVerify{}
	b.Verify = &RepoVerify{GPGKeysFile: "/nonexistent/trusted.asc"}
	b.PollInterval = -1
	ok.Verify = &RepoVerify{AllowedSignersFile: allowedSignersFile(t)}
	c.Repositories = []Repository{a, b, ok}
	err := c.Validate()
	mustContainAll(t, err, `repository "a": verify: set allowed_signers_file, gpg_keys_file or both`,
		`repository "b": verify: gpg_keys_file /nonexistent/trusted.asc: open`, `repository "b": poll_interval`)
	if strings.Contains(err.Error(), `repository "ok"`) {
		t.Errorf("a valid verify is reported: %v", err)
	}
}
