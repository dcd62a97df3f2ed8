package gitwatch

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/nops-dev/nops/testutil"
)

// writeTestFile writes content to dir/name and returns the path.
func writeTestFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// allowedSignerLine is one allowed_signers line for pub.
func allowedSignerLine(principal, options string, pub ssh.PublicKey) string {
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	if options != "" {
		return principal + " " + options + " " + key
	}
	return principal + " " + key
}

// newPGPEntity makes an OpenPGP key pair.
func newPGPEntity(t testing.TB, name string) *openpgp.Entity {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", strings.ToLower(name)+"@nops.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// armoredPublicKeys writes each entity's public key as its own armored
// block, one after the other, as a key file made by concatenating
// `gpg --export --armor` outputs is.
func armoredPublicKeys(t testing.TB, entities ...*openpgp.Entity) string {
	t.Helper()
	var buf bytes.Buffer
	for _, e := range entities {
		w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Serialize(w); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\n")
	}
	return buf.String()
}

// writeCommitObject stores c in repo and points the current branch to it.
func writeCommitObject(t testing.TB, repo *testutil.GitRepo, c *object.Commit) string {
	t.Helper()
	r, err := git.PlainOpen(repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	obj := r.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	repo.Git("update-ref", "HEAD", h.String())
	return h.String()
}

// headCommit reads the head commit of repo with go-git.
func headCommit(t testing.TB, repo *testutil.GitRepo) *object.Commit {
	t.Helper()
	r, err := git.PlainOpen(repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.CommitObject(plumbing.NewHash(repo.Head()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// commitPGPSigned commits the working tree's changes with an OpenPGP
// signature by e, made as go-git's CommitOptions.SignKey makes it: an
// armored detached signature of the commit object without its gpgsig
// header.
func commitPGPSigned(t testing.TB, repo *testutil.GitRepo, e *openpgp.Entity, msg string) string {
	t.Helper()
	repo.Git("add", "--all")
	tree := repo.Git("write-tree")
	who := object.Signature{Name: "Nops Test", Email: "test@nops.invalid", When: time.Now().Truncate(time.Second)}
	c := &object.Commit{Author: who, Committer: who, Message: msg + "\n", TreeHash: plumbing.NewHash(tree),
		ParentHashes: []plumbing.Hash{plumbing.NewHash(repo.Head())}}
	unsigned := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(unsigned); err != nil {
		t.Fatal(err)
	}
	rd, err := unsigned.Reader()
	if err != nil {
		t.Fatal(err)
	}
	var sig bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&sig, e, rd, nil); err != nil {
		t.Fatal(err)
	}
	c.PGPSignature = sig.String()
	return writeCommitObject(t, repo, c)
}

// tamperHead rewrites the head commit with another message and the same
// signature: what an attacker who alters a signed commit produces.
func tamperHead(t testing.TB, repo *testutil.GitRepo, msg string) string {
	t.Helper()
	c := headCommit(t, repo)
	if c.PGPSignature == "" {
		t.Fatal("tamperHead: the head is not signed")
	}
	c.Message = msg + "\n"
	return writeCommitObject(t, repo, c)
}

// TestWatcher_VerifySignedCommits: with verify, a head signed by a trusted
// SSH or OpenPGP key is published with the key's fingerprint; an unsigned
// head, one signed by a key not in the files, and one altered after
// signing are refused, naming the commit and the reason, while the last
// verified snapshot stays published (Notify fires once per refusal, for the
// detector to record it); a signed
// commit after a refused one is taken. Both fetch paths are covered: a
// configured branch fetches into the last clone, the remote's default
// branch clones again.
func TestWatcher_VerifySignedCommits(t *testing.T) {
	for _, branch := range []string{"main", ""} {
		t.Run("branch="+branch, func(t *testing.T) { testVerifySignedCommits(t, branch) })
	}
}

func testVerifySignedCommits(t *testing.T, branch string) {
	dir := t.TempDir()
	trustedKey, trustedPub := testutil.SSHClientKey(t, dir, "id_trusted")
	strangerKey, strangerPub := testutil.SSHClientKey(t, dir, "id_stranger")
	trustedPGP, strangerPGP := newPGPEntity(t, "Release"), newPGPEntity(t, "Stranger")
	signers := writeTestFile(t, dir, "allowed_signers",
		"# who may sign\n"+allowedSignerLine("ops@nops.invalid", `namespaces="git"`, trustedPub)+"\n"+
			allowedSignerLine("file@nops.invalid", `namespaces="file"`, strangerPub)+"\n")
	keys := writeTestFile(t, dir, "trusted.asc", armoredPublicKeys(t, newPGPEntity(t, "Other"), trustedPGP))

	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = 1 }`)
	good := repo.CommitSSHSigned(trustedKey, "v1")

	w := newWatcher(t, RepoConfig{Name: "prod", URL: repo.URL(), Branch: branch, Path: "jobs",
		Verify: &Verify{AllowedSignersFile: signers, GPGKeysFile: keys}})
	ctx := ctxFor(t)
	if err := w.FetchNow(ctx, "prod"); err != nil {
		t.Fatalf("fetch of an SSH-signed head: %v", err)
	}
	snap := w.Snapshot("prod")
	if snap == nil || snap.Commit != good {
		t.Fatalf("snapshot = %+v, want commit %s", snap, good)
	}
	if want := ssh.FingerprintSHA256(trustedPub); snap.Info.Signer != want {
		t.Fatalf("signer = %q, want %q", snap.Info.Signer, want)
	}
	notified(w) // drain

	// expectRefused fetches and checks the refusal of head, and that the
	// last verified commit stays the source of truth.
	expectRefused := func(what, head string, reason error, detail string, notifies bool) {
		t.Helper()
		err := w.FetchNow(ctx, "prod")
		var refused *RefusedError
		if !errors.As(err, &refused) || !errors.Is(err, reason) || refused.Commit != head {
			t.Fatalf("%s: fetch error = %v, want the refusal of %s: %v", what, err, head, reason)
		}
		if !strings.Contains(err.Error(), detail) {
			t.Fatalf("%s: error %q does not say %q", what, err, detail)
		}
		s := w.Snapshot("prod")
		if s.Commit != good || fileMap(s)["jobs/web.nomad.hcl"].Content != `job "web" { v = 1 }` {
			t.Fatalf("%s: snapshot moved to %s: %+v", what, s.Commit, s.Files)
		}
		st := w.Status()[0]
		if st.Head != good || st.Refused != head || st.LastError != err.Error() ||
			!strings.Contains(st.LastError, head) || !strings.Contains(st.LastError, reason.Error()) {
			t.Fatalf("%s: status = %+v", what, st)
		}
		if notified(w) != notifies {
			t.Fatalf("%s: notified = %v, want %v", what, !notifies, notifies)
		}
	}

	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = "unsigned" }`)
	unsigned := repo.Commit("unsigned")
	expectRefused("unsigned", unsigned, ErrUnsigned, "is not signed", true)
	// Polling again refuses again, from memory, with the same message,
	// and notifies nothing new.
	expectRefused("unsigned, again", unsigned, ErrUnsigned, "is not signed", false)

	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = "stranger" }`)
	stranger := repo.CommitSSHSigned(strangerKey, "by a stranger")
	expectRefused("unknown SSH key", stranger, ErrUntrustedKey, ssh.FingerprintSHA256(strangerPub), true)

	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = "tampered" }`)
	repo.CommitSSHSigned(trustedKey, "signed")
	tampered := tamperHead(t, repo, "signed, then altered")
	expectRefused("altered after an SSH signature", tampered, ErrBadSignature, "signature did not verify", true)

	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = "pgp-stranger" }`)
	pgpStranger := commitPGPSigned(t, repo, strangerPGP, "by a PGP stranger")
	expectRefused("unknown OpenPGP key", pgpStranger, ErrUntrustedKey, "not in gpg_keys_file", true)

	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = "pgp-tampered" }`)
	commitPGPSigned(t, repo, trustedPGP, "signed")
	pgpTampered := tamperHead(t, repo, "signed, then altered")
	expectRefused("altered after an OpenPGP signature", pgpTampered, ErrBadSignature, "", true)

	// A signed commit after the refused ones is taken.
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = 2 }`)
	pgpGood := commitPGPSigned(t, repo, trustedPGP, "v2")
	if err := w.FetchNow(ctx, "prod"); err != nil {
		t.Fatalf("fetch of an OpenPGP-signed head: %v", err)
	}
	snap = w.Snapshot("prod")
	if snap.Commit != pgpGood || fileMap(snap)["jobs/web.nomad.hcl"].Content != `job "web" { v = 2 }` {
		t.Fatalf("snapshot = %s %+v, want %s", snap.Commit, snap.Files, pgpGood)
	}
	if want := strings.ToUpper(hex.EncodeToString(trustedPGP.PrimaryKey.Fingerprint)); snap.Info.Signer != want {
		t.Fatalf("signer = %q, want %q", snap.Info.Signer, want)
	}
	if st := w.Status()[0]; st.Head != pgpGood || st.Refused != "" || st.LastError != "" {
		t.Fatalf("status after a verified head = %+v", st)
	}
	if !notified(w) {
		t.Fatal("a verified head did not notify")
	}
}

// TestWatcher_VerifyRereadsKeys: the key files are read at every fetch, so
// a head refused for an unknown key is taken once its key is added, with
// no new commit and no restart, and refused again once it is removed.
func TestWatcher_VerifyRereadsKeys(t *testing.T) {
	dir := t.TempDir()
	key, pub := testutil.SSHClientKey(t, dir, "id_new")
	_, otherPub := testutil.SSHClientKey(t, dir, "id_other")
	signers := writeTestFile(t, dir, "allowed_signers", allowedSignerLine("old@nops.invalid", "", otherPub)+"\n")
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("web.nomad.hcl", `job "web" {}`)
	head := repo.CommitSSHSigned(key, "v1")

	w := newWatcher(t, RepoConfig{Name: "prod", URL: repo.URL(), Verify: &Verify{AllowedSignersFile: signers}})
	ctx := ctxFor(t)
	if err := w.FetchNow(ctx, "prod"); !errors.Is(err, ErrUntrustedKey) {
		t.Fatalf("fetch before the key is trusted: %v, want %v", err, ErrUntrustedKey)
	}
	if w.Snapshot("prod") != nil {
		t.Fatal("a refused first head was published")
	}
	writeTestFile(t, dir, "allowed_signers", allowedSignerLine("old@nops.invalid", "", otherPub)+"\n"+
		allowedSignerLine("new@nops.invalid", "", pub)+"\n")
	if err := w.FetchNow(ctx, "prod"); err != nil {
		t.Fatalf("fetch once the key is trusted: %v", err)
	}
	if s := w.Snapshot("prod"); s == nil || s.Commit != head {
		t.Fatalf("snapshot = %+v, want %s", s, head)
	}
	// A key file that goes missing fails the fetch and keeps the snapshot.
	if err := os.Remove(signers); err != nil {
		t.Fatal(err)
	}
	repo.CommitSSHSigned(key, "v2")
	if err := w.FetchNow(ctx, "prod"); err == nil || !strings.Contains(err.Error(), "allowed_signers_file") {
		t.Fatalf("fetch with the key file gone: %v", err)
	}
	if s := w.Snapshot("prod"); s.Commit != head {
		t.Fatalf("snapshot moved to %s with no key file", s.Commit)
	}
}

// TestVerifier_Refusals checks the rules of the verifier on real commits:
// a signature of a kind no file is configured for, a key whose
// allowed_signers line is outside its validity or for another namespace.
func TestVerifier_Refusals(t *testing.T) {
	dir := t.TempDir()
	key, pub := testutil.SSHClientKey(t, dir, "id")
	repo := testutil.NewGitRepo(t)
	repo.CommitSSHSigned(key, "ssh")
	sshCommit := headCommit(t, repo)
	e := newPGPEntity(t, "Release")
	commitPGPSigned(t, repo, e, "pgp")
	pgpCommit := headCommit(t, repo)
	pgpKeys := writeTestFile(t, dir, "keys.asc", armoredPublicKeys(t, e))

	load := func(v Verify) *Verifier {
		t.Helper()
		ver, err := LoadVerifier(v)
		if err != nil {
			t.Fatal(err)
		}
		return ver
	}
	signersWith := func(options string) string {
		return writeTestFile(t, dir, "signers", allowedSignerLine(`"ops@nops.invalid,dev@nops.invalid"`, options, pub)+"\n")
	}
	for _, tc := range []struct {
		name   string
		v      *Verifier
		commit *object.Commit
		want   error
	}{
		{"SSH signature without allowed signers", load(Verify{GPGKeysFile: pgpKeys}), sshCommit, ErrUntrustedKey},
		{"OpenPGP signature without keys", load(Verify{AllowedSignersFile: signersWith("")}), pgpCommit, ErrUntrustedKey},
		{"key for another namespace", load(Verify{AllowedSignersFile: signersWith(`namespaces="file,mail"`)}), sshCommit, ErrUntrustedKey},
		{"key expired before the commit", load(Verify{AllowedSignersFile: signersWith(`valid-before="20200101Z"`)}), sshCommit, ErrUntrustedKey},
		{"key valid only later", load(Verify{AllowedSignersFile: signersWith(`valid-after="29990101"`)}), sshCommit, ErrUntrustedKey},
		{"key for git namespaces by pattern", load(Verify{AllowedSignersFile: signersWith(`namespaces="g*"`)}), sshCommit, nil},
		{"key in its validity", load(Verify{AllowedSignersFile: signersWith(`valid-after="20200101",valid-before="299901010000Z"`)}), sshCommit, nil},
		{"OpenPGP key", load(Verify{GPGKeysFile: pgpKeys}), pgpCommit, nil},
	} {
		_, err := tc.v.VerifyCommit(tc.commit)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestLoadVerifier_RefusesBadFiles: each key file that is missing, does not
// parse or holds no key is reported, naming the setting and the file.
func TestLoadVerifier_RefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	_, pub := testutil.SSHClientKey(t, dir, "id")
	for _, tc := range []struct {
		name string
		v    Verify
		want []string
	}{
		{"neither file", Verify{}, []string{"set allowed_signers_file, gpg_keys_file or both"}},
		{"missing files", Verify{AllowedSignersFile: filepath.Join(dir, "nope"), GPGKeysFile: filepath.Join(dir, "nope.asc")},
			[]string{"allowed_signers_file " + filepath.Join(dir, "nope") + ": open", "gpg_keys_file " + filepath.Join(dir, "nope.asc") + ": open"}},
		{"empty signers", Verify{AllowedSignersFile: writeTestFile(t, dir, "empty", "# nobody\n\n")}, []string{"no key in the file"}},
		{"key without principals", Verify{AllowedSignersFile: writeTestFile(t, dir, "noprinc", strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))))},
			[]string{"line 1: parse the key"}},
		{"bad key", Verify{AllowedSignersFile: writeTestFile(t, dir, "badkey", "ops@x ssh-ed25519 AAAAnotbase64!\n")}, []string{"line 1: parse the key"}},
		{"unknown option", Verify{AllowedSignersFile: writeTestFile(t, dir, "badopt", allowedSignerLine("ops@x", "no-touch-required", pub))},
			[]string{`line 1: unknown option "no-touch-required"`}},
		{"bad time", Verify{AllowedSignersFile: writeTestFile(t, dir, "badtime", "\n"+allowedSignerLine("ops@x", `valid-after="yesterday"`, pub))},
			[]string{`line 2: valid-after: "yesterday" is not a time`}},
		{"cert authority", Verify{AllowedSignersFile: writeTestFile(t, dir, "ca", allowedSignerLine("*@x", "cert-authority", pub))},
			[]string{"cert-authority is not supported"}},
		{"no PGP block", Verify{GPGKeysFile: writeTestFile(t, dir, "nokey.asc", "not a key\n")}, []string{"no armored public key block"}},
		{"broken PGP block", Verify{GPGKeysFile: writeTestFile(t, dir, "broken.asc", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n")},
			[]string{"gpg_keys_file", "key block 1"}},
	} {
		_, err := LoadVerifier(tc.v)
		if err == nil {
			t.Errorf("%s: loaded", tc.name)
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", tc.name, err, want)
			}
		}
	}

	// New refuses them too, naming the repository.
	_, err := New([]RepoConfig{{Name: "prod", URL: "https://git.example.com/ops/jobs.git",
		Verify: &Verify{GPGKeysFile: filepath.Join(dir, "nope.asc")}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `repository "prod": verify: gpg_keys_file`) {
		t.Fatalf("New with a missing key file: %v", err)
	}
	_, err = New([]RepoConfig{{Name: "prod", URL: "https://git.example.com/ops/jobs.git", Verify: &Verify{}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `repository "prod": verify: set allowed_signers_file, gpg_keys_file or both`) {
		t.Fatalf("New with an empty verify: %v", err)
	}
}

// BenchmarkVerifyCommit measures the verification of one signed commit,
// the cost verify adds to each new head, for an Ed25519 SSH signature and
// an OpenPGP signature (go-crypto's default key, RSA 2048), and reports
// the median (p50-ns) beside the mean.
func BenchmarkVerifyCommit(b *testing.B) {
	dir := b.TempDir()
	key, pub := testutil.SSHClientKey(b, dir, "id")
	e := newPGPEntity(b, "Release")
	repo := testutil.NewGitRepo(b)
	repo.WriteFile("web.nomad.hcl", `job "web" {}`)
	repo.CommitSSHSigned(key, "ssh")
	sshCommit := headCommit(b, repo)
	commitPGPSigned(b, repo, e, "pgp")
	pgpCommit := headCommit(b, repo)
	signers := writeTestFile(b, dir, "signers", allowedSignerLine("ops@x", "", pub)+"\n")
	keys := writeTestFile(b, dir, "keys.asc", armoredPublicKeys(b, e))
	v, err := LoadVerifier(Verify{AllowedSignersFile: signers, GPGKeysFile: keys})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		commit *object.Commit
	}{{"ssh-ed25519", sshCommit}, {"openpgp", pgpCommit}} {
		b.Run(bc.name, func(b *testing.B) {
			times := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := v.VerifyCommit(bc.commit); err != nil {
					b.Fatal(err)
				}
				times = append(times, time.Since(start))
			}
			b.StopTimer()
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
		})
	}
}

// TestWatcher_NewLeaderServesTheLastVerifiedCommit: a watcher that starts
// (a new leader) while the branch's head is refused serves the last
// verified head the replicated status gave it (SetVerified), verified
// again, rather than no snapshot; the status still names the refused head.
// Without that head, or when it no longer verifies, there is no snapshot.
func TestWatcher_NewLeaderServesTheLastVerifiedCommit(t *testing.T) {
	dir := t.TempDir()
	trustedKey, trustedPub := testutil.SSHClientKey(t, dir, "id_trusted")
	strangerKey, _ := testutil.SSHClientKey(t, dir, "id_stranger")
	signers := writeTestFile(t, dir, "allowed_signers", allowedSignerLine("ops@nops.invalid", "", trustedPub)+"\n")
	repo := testutil.NewGitRepo(t)
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = 0 }`)
	untrusted := repo.CommitSSHSigned(strangerKey, "v0 by a stranger")
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = 1 }`)
	good := repo.CommitSSHSigned(trustedKey, "v1")
	repo.WriteFile("jobs/web.nomad.hcl", `job "web" { v = 2 }`)
	bad := repo.CommitSSHSigned(strangerKey, "v2 by a stranger")
	cfg := RepoConfig{Name: "prod", URL: repo.URL(), Branch: "main", Path: "jobs",
		Verify: &Verify{AllowedSignersFile: signers}}
	ctx := ctxFor(t)

	w := newWatcher(t, cfg)
	w.SetVerified("prod", good)
	err := w.FetchNow(ctx, "prod")
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Commit != bad {
		t.Fatalf("fetch error = %v, want the refusal of %s", err, bad)
	}
	s := w.Snapshot("prod")
	if s == nil || s.Commit != good || fileMap(s)["jobs/web.nomad.hcl"].Content != `job "web" { v = 1 }` {
		t.Fatalf("snapshot = %+v, want the last verified commit %s", s, good)
	}
	if st := w.Status()[0]; st.Head != good || st.Refused != bad {
		t.Fatalf("status = %+v, want head %s and refused %s", st, good, bad)
	}
	// The head refused again: still the verified snapshot.
	if err := w.FetchNow(ctx, "prod"); !errors.As(err, &refused) {
		t.Fatalf("second fetch: %v", err)
	}
	if s := w.Snapshot("prod"); s == nil || s.Commit != good {
		t.Fatalf("after a second fetch, snapshot = %+v", s)
	}

	// No verified head given, the refused head itself, or one signed by a
	// key no longer trusted: nothing is served.
	for name, seed := range map[string]string{"none": "", "the refused head": bad, "no longer trusted": untrusted} {
		w := newWatcher(t, cfg)
		if seed != "" {
			w.SetVerified("prod", seed)
		}
		if err := w.FetchNow(ctx, "prod"); !errors.As(err, &refused) {
			t.Fatalf("%s: fetch error %v", name, err)
		}
		if s := w.Snapshot("prod"); s != nil {
			t.Fatalf("%s: a snapshot at %s is served", name, s.Commit)
		}
	}
}
