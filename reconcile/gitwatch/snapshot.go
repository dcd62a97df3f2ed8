package gitwatch

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Snapshot is the set of job files of one repository at one commit. A
// published snapshot is never modified; callers must not modify it either.
type Snapshot struct {
	// Repo is the repository's configured name.
	Repo string
	// Commit is the full hash of the commit the files come from.
	Commit string
	// Branch is the branch followed (the remote's default branch when none
	// is configured and the remote names it).
	Branch string
	// Files are the job files under the configured path, sorted by path.
	Files []JobFile
	// Info is what the commit says of itself, and its link.
	Info CommitInfo
}

// CommitInfo is what a commit says of itself: its message, its author
// and its committer ("Name <email>"; the committer is the one who applied
// it, as a rebase or a cherry-pick does), when the author wrote it, and
// its link in the repository's web UI (CommitURL), or "". Signer is the
// fingerprint of the key whose signature was verified (Verifier.VerifyCommit),
// empty when the repository verifies no signatures.
type CommitInfo struct {
	Message   string
	Author    string
	Committer string
	Time      time.Time
	URL       string
	Signer    string
}

// commitInfo reads a commit's message, author, committer and time.
func commitInfo(c *object.Commit) CommitInfo {
	return CommitInfo{Message: c.Message, Author: identity(c.Author), Committer: identity(c.Committer), Time: c.Author.When.UTC()}
}

// identity writes a git signature as "Name <email>".
func identity(s object.Signature) string {
	if s.Email == "" {
		return s.Name
	}
	return strings.TrimSpace(s.Name + " <" + s.Email + ">")
}

// JobFile is one job file and its optional variables file.
type JobFile struct {
	// Path is relative to the repository root, slash-separated.
	Path    string
	Content string
	// VarsPath is the variables file beside the job file
	// (web.nomad.hcl → web.vars.hcl), empty when there is none.
	VarsPath string
	Vars     string

	// hash is ContentHash, computed once when the snapshot is read: every
	// cycle asks for it, of every file.
	hash string
}

// ContentHash is the SHA-256 of the job file and its variables, the key for
// caching a parse: equal hashes parse to equal jobs.
func (f JobFile) ContentHash() string {
	if f.hash != "" {
		return f.hash
	}
	return f.contentHash()
}

func (f JobFile) contentHash() string {
	h := sha256.New()
	var n [8]byte
	for _, s := range []string{f.Content, f.Vars} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readJobFiles collects the job files under dir ("" for the root) of a
// commit's tree, each with its variables file. Symbolic links and
// submodules are not followed.
func readJobFiles(tree *object.Tree, dir string) ([]JobFile, error) {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	contents := map[string]string{}
	err := tree.Files().ForEach(func(f *object.File) error {
		if prefix != "" && !strings.HasPrefix(f.Name, prefix) {
			return nil
		}
		if f.Mode != filemode.Regular && f.Mode != filemode.Executable {
			return nil
		}
		if !IsJobFile(f.Name) && !isVarsFile(f.Name) {
			return nil
		}
		c, err := f.Contents()
		if err != nil {
			return fmt.Errorf("read %s: %w", f.Name, err)
		}
		contents[f.Name] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return withContents(SelectJobFiles(mapKeys(contents), dir), contents), nil
}
