package gitwatch

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
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

// readCache is what the last snapshot read, which the next one takes
// rather than reading again: each blob's contents, and each job file's
// content hash by the blobs of the file and of its variables file. Replaced
// whole, never changed.
type readCache struct {
	blobs  map[plumbing.Hash]string
	hashes map[[2]plumbing.Hash]string
}

// readJobFiles collects the job files under dir ("" for the root) of a
// commit's tree, each with its variables file, and returns them with the
// contents read, by blob hash. Only dir's subtree is walked, entry by
// entry: a file whose blob is in known (the last snapshot's) is neither
// looked up nor read again, and a job file whose blobs (its own and its
// variables file's) are those of a known one takes that one's content hash,
// so a commit that changes one of 10,000 files reads and hashes one.
// Symbolic links and submodules are not followed.
func readJobFiles(tree *object.Tree, dir string, known *readCache) ([]JobFile, *readCache, error) {
	if known == nil {
		known = &readCache{}
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
		sub, err := tree.Tree(dir)
		if errors.Is(err, object.ErrDirectoryNotFound) {
			return []JobFile{}, &readCache{}, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read directory %s: %w", dir, err)
		}
		tree = sub
	}
	contents := map[string]string{}
	blobOf := map[string]plumbing.Hash{}
	next := &readCache{blobs: make(map[plumbing.Hash]string, len(known.blobs)), hashes: make(map[[2]plumbing.Hash]string, len(known.hashes))}
	walker := object.NewTreeWalker(tree, true, nil)
	defer walker.Close()
	for {
		rel, e, err := walker.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read directory %s: %w", dir, err)
		}
		if e.Mode != filemode.Regular && e.Mode != filemode.Executable {
			continue
		}
		name := prefix + rel
		if !IsJobFile(name) && !isVarsFile(name) {
			continue
		}
		c, ok := known.blobs[e.Hash]
		if !ok {
			f, err := tree.TreeEntryFile(&e)
			if err == nil {
				c, err = f.Contents()
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read %s: %w", name, err)
			}
		}
		contents[name], blobOf[name] = c, e.Hash
		next.blobs[e.Hash] = c
	}
	files := SelectJobFiles(mapKeys(contents), dir)
	for i := range files {
		f := &files[i]
		f.Content = contents[f.Path]
		key := [2]plumbing.Hash{blobOf[f.Path]}
		if f.VarsPath != "" {
			f.Vars, key[1] = contents[f.VarsPath], blobOf[f.VarsPath]
		}
		if h, ok := known.hashes[key]; ok {
			f.hash = h
		} else {
			f.hash = f.contentHash()
		}
		next.hashes[key] = f.hash
	}
	return files, next, nil
}
