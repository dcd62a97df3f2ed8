package gitwatch

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// Signed commits (SPEC section 18). A repository with a Verify
// configuration publishes a snapshot of a head only when the head commit
// carries a valid signature by one of the trusted keys, with the semantics
// of `git verify-commit`: an SSH signature (git's gpg.format = ssh, the
// sshsig format of OpenSSH, namespace "git") by a key of the
// allowed_signers file, or an OpenPGP signature by a key of the armored key
// file. Only the head is verified: it is the only commit whose files are
// deployed. A refused head leaves the last verified snapshot in place.

// Reasons a head is refused; a *RefusedError wraps one of them.
var (
	// ErrUnsigned: the commit carries no signature.
	ErrUnsigned = errors.New("the commit is not signed")
	// ErrUntrustedKey: the signature is by a key that is not trusted (not
	// in the allowed signers or key file, or of a kind no file is
	// configured for).
	ErrUntrustedKey = errors.New("the commit is signed by a key that is not trusted")
	// ErrBadSignature: the signature does not verify (the commit was
	// altered after signing, or the signature is malformed, expired or by
	// a revoked key).
	ErrBadSignature = errors.New("the commit's signature is not valid")
)

// RefusedError is the refusal of a head commit whose signature does not
// verify. Reason is one of ErrUnsigned, ErrUntrustedKey and
// ErrBadSignature; Detail says more, or is empty.
type RefusedError struct {
	Commit string
	Reason error
	Detail string
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("commit %s refused: %v", e.Commit, e.Reason)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

func (e *RefusedError) Unwrap() error { return e.Reason }

// Verify names the files of the keys a repository's commits must be signed
// with. Set at least one.
type Verify struct {
	// AllowedSignersFile is an SSH allowed signers file, in git's
	// gpg.ssh.allowedSignersFile format (ssh-keygen(1) ALLOWED SIGNERS).
	AllowedSignersFile string
	// GPGKeysFile holds armored OpenPGP public keys, one or more blocks.
	GPGKeysFile string
}

// Verifier checks commit signatures against a fixed set of trusted keys.
// It is immutable and safe for concurrent use.
type Verifier struct {
	signers []allowedSigner
	pgp     openpgp.EntityList
}

// allowedSigner is one line of an allowed signers file.
type allowedSigner struct {
	principals string
	key        ssh.PublicKey
	namespaces []string // empty: any
	// validAfter and validBefore bound the signature's time, when set.
	validAfter, validBefore time.Time
}

// LoadVerifier reads the key files of v. A file that cannot be read, does
// not parse, or holds no key is an error naming the file.
func LoadVerifier(v Verify) (*Verifier, error) {
	if v.AllowedSignersFile == "" && v.GPGKeysFile == "" {
		return nil, errors.New("verify: set allowed_signers_file, gpg_keys_file or both")
	}
	out := &Verifier{}
	var errs []error
	if v.AllowedSignersFile != "" {
		data, err := os.ReadFile(v.AllowedSignersFile)
		if err == nil {
			out.signers, err = parseAllowedSigners(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("verify: allowed_signers_file %s: %w", v.AllowedSignersFile, err))
		}
	}
	if v.GPGKeysFile != "" {
		data, err := os.ReadFile(v.GPGKeysFile)
		if err == nil {
			out.pgp, err = parseArmoredKeys(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("verify: gpg_keys_file %s: %w", v.GPGKeysFile, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// parseAllowedSigners parses an allowed signers file: per line
// `principals [options] keytype base64-key [comment]`, with blank lines
// and # comments skipped. The options namespaces, valid-after and
// valid-before are honoured; a cert-authority line is an error, as
// signatures by certificates are not supported.
func parseAllowedSigners(data []byte) ([]allowedSigner, error) {
	var out []allowedSigner
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseAllowedSigner(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("no key in the file")
	}
	return out, nil
}

func parseAllowedSigner(line string) (allowedSigner, error) {
	principals, rest := splitField(line)
	if rest == "" {
		return allowedSigner{}, errors.New("a line needs principals and a key")
	}
	key, _, options, _, err := ssh.ParseAuthorizedKey([]byte(rest))
	if err != nil {
		return allowedSigner{}, fmt.Errorf("parse the key: %w", err)
	}
	s := allowedSigner{principals: strings.Trim(principals, `"`), key: key}
	for _, opt := range options {
		name, value, _ := strings.Cut(opt, "=")
		value = strings.Trim(value, `"`)
		switch strings.ToLower(name) {
		case "cert-authority":
			return allowedSigner{}, errors.New("cert-authority is not supported: list the signing keys")
		case "namespaces":
			s.namespaces = strings.Split(value, ",")
		case "valid-after":
			if s.validAfter, err = parseSignerTime(value); err != nil {
				return allowedSigner{}, fmt.Errorf("valid-after: %w", err)
			}
		case "valid-before":
			if s.validBefore, err = parseSignerTime(value); err != nil {
				return allowedSigner{}, fmt.Errorf("valid-before: %w", err)
			}
		default:
			return allowedSigner{}, fmt.Errorf("unknown option %q", name)
		}
	}
	return s, nil
}

// splitField splits off the first whitespace-separated field of line,
// which may be double-quoted.
func splitField(line string) (field, rest string) {
	if strings.HasPrefix(line, `"`) {
		if end := strings.Index(line[1:], `"`); end >= 0 {
			return line[:end+2], strings.TrimSpace(line[end+2:])
		}
	}
	i := strings.IndexAny(line, " \t")
	if i < 0 {
		return line, ""
	}
	return line[:i], strings.TrimSpace(line[i:])
}

// parseSignerTime parses the YYYYMMDD[HHMM[SS]][Z] times of allowed
// signers options; without Z they are local time, as ssh-keygen reads
// them.
func parseSignerTime(v string) (time.Time, error) {
	loc := time.Local
	if strings.HasSuffix(v, "Z") || strings.HasSuffix(v, "z") {
		v, loc = v[:len(v)-1], time.UTC
	}
	for _, layout := range []string{"20060102", "200601021504", "20060102150405"} {
		if len(v) == len(layout) {
			if t, err := time.ParseInLocation(layout, v, loc); err == nil {
				return t, nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time in the form YYYYMMDD[HHMM[SS]][Z]", v)
}

// parseArmoredKeys reads every armored public key block of data.
func parseArmoredKeys(data []byte) (openpgp.EntityList, error) {
	const begin = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
	text := string(data)
	var list openpgp.EntityList
	for {
		i := strings.Index(text, begin)
		if i < 0 {
			break
		}
		text = text[i:]
		next := strings.Index(text[len(begin):], begin)
		block := text
		if next >= 0 {
			block, text = text[:len(begin)+next], text[len(begin)+next:]
		} else {
			text = ""
		}
		keys, err := openpgp.ReadArmoredKeyRing(strings.NewReader(block))
		if err != nil {
			return nil, fmt.Errorf("key block %d: %w", len(list)+1, err)
		}
		list = append(list, keys...)
	}
	if len(list) == 0 {
		return nil, errors.New("no armored public key block (-----BEGIN PGP PUBLIC KEY BLOCK-----) in the file")
	}
	return list, nil
}

// VerifyCommit checks the signature of a commit and returns the
// fingerprint of the key that made it: "SHA256:…" for SSH keys (as
// ssh-keygen -l prints it), the primary key's hexadecimal fingerprint for
// OpenPGP keys. Any other outcome is a *RefusedError.
func (v *Verifier) VerifyCommit(c *object.Commit) (string, error) {
	refuse := func(reason error, detail string) (string, error) {
		return "", &RefusedError{Commit: c.Hash.String(), Reason: reason, Detail: detail}
	}
	sig := strings.TrimSpace(c.PGPSignature)
	if sig == "" {
		return refuse(ErrUnsigned, "")
	}
	encoded := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(encoded); err != nil {
		return refuse(ErrBadSignature, "encode the commit: "+err.Error())
	}
	rd, err := encoded.Reader()
	if err != nil {
		return refuse(ErrBadSignature, "read the commit: "+err.Error())
	}
	defer rd.Close()
	signed, err := io.ReadAll(rd)
	if err != nil {
		return refuse(ErrBadSignature, "read the commit: "+err.Error())
	}
	switch {
	case strings.HasPrefix(sig, sshSigBegin):
		if len(v.signers) == 0 {
			return refuse(ErrUntrustedKey, "an SSH signature, and no allowed_signers_file is configured")
		}
		fp, err := v.verifySSH(signed, sig, c.Committer.When)
		if err != nil {
			return refuse(reasonOf(err), err.Error())
		}
		return fp, nil
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		if len(v.pgp) == 0 {
			return refuse(ErrUntrustedKey, "an OpenPGP signature, and no gpg_keys_file is configured")
		}
		entity, err := openpgp.CheckArmoredDetachedSignature(v.pgp, bytes.NewReader(signed), strings.NewReader(sig), nil)
		if errors.Is(err, pgperrors.ErrUnknownIssuer) {
			return refuse(ErrUntrustedKey, "OpenPGP key not in gpg_keys_file")
		}
		if err != nil {
			return refuse(ErrBadSignature, err.Error())
		}
		return strings.ToUpper(hex.EncodeToString(entity.PrimaryKey.Fingerprint)), nil
	}
	return refuse(ErrBadSignature, "unsupported signature format")
}

// untrustedError is a signature by a key that is not trusted; any other
// error of a verification is a bad signature.
type untrustedError struct{ msg string }

func (e untrustedError) Error() string { return e.msg }

// reasonOf returns the refusal reason of a verification error.
func reasonOf(err error) error {
	if errors.As(err, new(untrustedError)) {
		return ErrUntrustedKey
	}
	return ErrBadSignature
}

const (
	sshSigBegin     = "-----BEGIN SSH SIGNATURE-----"
	sshSigEnd       = "-----END SSH SIGNATURE-----"
	sshSigMagic     = "SSHSIG"
	sshSigNamespace = "git"
)

// sshSigBlob is the wire form of an sshsig signature (OpenSSH
// PROTOCOL.sshsig), after the magic preamble.
type sshSigBlob struct {
	Version       uint32
	PublicKey     []byte
	Namespace     string
	Reserved      []byte
	HashAlgorithm string
	Signature     []byte
}

// sshSignedData is what an sshsig signature signs.
type sshSignedData struct {
	Namespace     string
	Reserved      []byte
	HashAlgorithm string
	Hash          []byte
}

// verifySSH verifies an armored sshsig signature of message by a key of the
// allowed signers, at time when (the commit's committer time, as git
// passes it to ssh-keygen), and returns the key's fingerprint.
func (v *Verifier) verifySSH(message []byte, armored string, when time.Time) (string, error) {
	body := strings.TrimSpace(armored)
	body = strings.TrimPrefix(body, sshSigBegin)
	end := strings.Index(body, sshSigEnd)
	if end < 0 {
		return "", errors.New("the SSH signature has no end line")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(body[:end]), ""))
	if err != nil {
		return "", fmt.Errorf("decode the SSH signature: %w", err)
	}
	if !bytes.HasPrefix(raw, []byte(sshSigMagic)) {
		return "", errors.New("the SSH signature lacks the SSHSIG preamble")
	}
	var blob sshSigBlob
	if err := ssh.Unmarshal(raw[len(sshSigMagic):], &blob); err != nil {
		return "", fmt.Errorf("parse the SSH signature: %w", err)
	}
	if blob.Version != 1 {
		return "", fmt.Errorf("SSH signature version %d is not supported", blob.Version)
	}
	if blob.Namespace != sshSigNamespace {
		return "", fmt.Errorf("the SSH signature is for namespace %q, not %q", blob.Namespace, sshSigNamespace)
	}
	pub, err := ssh.ParsePublicKey(blob.PublicKey)
	if err != nil {
		return "", fmt.Errorf("parse the SSH signature's key: %w", err)
	}
	fp := ssh.FingerprintSHA256(pub)
	signer := v.findSigner(pub, when)
	if signer == nil {
		return "", untrustedError{fmt.Sprintf("SSH key %s is not in allowed_signers_file for namespace %q at %s",
			fp, sshSigNamespace, when.UTC().Format(time.RFC3339))}
	}
	var digest []byte
	switch blob.HashAlgorithm {
	case "sha512":
		h := sha512.Sum512(message)
		digest = h[:]
	case "sha256":
		h := sha256.Sum256(message)
		digest = h[:]
	default:
		return "", fmt.Errorf("SSH signature hash %q is not supported", blob.HashAlgorithm)
	}
	var sig ssh.Signature
	if err := ssh.Unmarshal(blob.Signature, &sig); err != nil {
		return "", fmt.Errorf("parse the SSH signature's signature: %w", err)
	}
	signed := append([]byte(sshSigMagic), ssh.Marshal(sshSignedData{
		Namespace: blob.Namespace, Reserved: blob.Reserved, HashAlgorithm: blob.HashAlgorithm, Hash: digest,
	})...)
	if err := signer.key.Verify(signed, &sig); err != nil {
		return "", fmt.Errorf("SSH key %s: %w", fp, err)
	}
	return fp, nil
}

// findSigner returns the allowed signer of key valid for git signatures at
// when, or nil.
func (v *Verifier) findSigner(key ssh.PublicKey, when time.Time) *allowedSigner {
	want := key.Marshal()
	for i := range v.signers {
		s := &v.signers[i]
		if !bytes.Equal(s.key.Marshal(), want) {
			continue
		}
		if len(s.namespaces) > 0 && !matchesNamespace(s.namespaces, sshSigNamespace) {
			continue
		}
		if !s.validAfter.IsZero() && when.Before(s.validAfter) {
			continue
		}
		if !s.validBefore.IsZero() && !when.Before(s.validBefore) {
			continue
		}
		return s
	}
	return nil
}

// matchesNamespace reports whether one of the namespace patterns (with *
// and ? wildcards) matches ns.
func matchesNamespace(patterns []string, ns string) bool {
	for _, p := range patterns {
		if wildcardMatch(strings.TrimSpace(p), ns) {
			return true
		}
	}
	return false
}

// wildcardMatch matches s against an OpenSSH pattern of * and ?.
func wildcardMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if wildcardMatch(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || p[0] != s[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}
