package testutil

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

func TestGitRepo_CommitsAndURL(t *testing.T) {
	t.Parallel()
	repo := NewGitRepo(t)

	repo.WriteFile("jobs/web.nomad.hcl", ServiceJobHCL("web"))
	repo.WriteFile("jobs/web.vars.hcl", `image = "v1"`)
	first := repo.Commit("add web")
	if !commitHash.MatchString(first) {
		t.Fatalf("Commit returned %q, want a 40-hex-digit hash", first)
	}
	if got := repo.Git("rev-parse", "--abbrev-ref", "HEAD"); got != "main" {
		t.Fatalf("branch %q, want main", got)
	}

	repo.Remove("jobs/web.vars.hcl")
	second := repo.Commit("drop vars")
	if second == first || !commitHash.MatchString(second) {
		t.Fatalf("second commit %q, first %q", second, first)
	}
	if got := repo.Git("rev-parse", "HEAD~1"); got != first {
		t.Fatalf("parent of HEAD is %s, want %s", got, first)
	}
	if got := repo.Git("ls-tree", "-r", "--name-only", "HEAD"); got != "jobs/web.nomad.hcl" {
		t.Fatalf("files at HEAD: %q", got)
	}

	empty := repo.Commit("nothing changed")
	if empty == second {
		t.Fatal("an empty commit did not make a new commit")
	}

	// The URL clones with the git CLI.
	clone := filepath.Join(t.TempDir(), "clone")
	runGit(t, "", "clone", "--quiet", "--branch", "main", repo.URL(), clone)
	if got := runGit(t, clone, "rev-parse", "HEAD"); got != empty {
		t.Fatalf("clone HEAD %s, want %s", got, empty)
	}

	// And with go-git, as Nops reads repositories.
	if got := goGitHead(t, repo.URL(), nil); got != empty {
		t.Fatalf("go-git clone HEAD %s, want %s", got, empty)
	}
}

func TestGitRepo_CommitAs(t *testing.T) {
	t.Parallel()
	repo := NewGitRepo(t)
	repo.WriteFile("a.nomad.hcl", "job")
	repo.CommitAs("Ada Lovelace <ada@example.com>", "Bump web to v2")
	if got := repo.Git("log", "-1", "--format=%an <%ae>|%cn|%s"); got != "Ada Lovelace <ada@example.com>|Nops Test|Bump web to v2" {
		t.Fatalf("author, committer and subject: %q", got)
	}
}

func TestGitRepo_RejectsPathsOutside(t *testing.T) {
	t.Parallel()
	repo := NewGitRepo(t)
	for _, p := range []string{"", ".", "..", "../x", "/etc/passwd", "a/../../x"} {
		if _, err := repo.path(p); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	if got, err := repo.path("a/b/../c"); err != nil || got != filepath.Join(repo.Dir, "a", "c") {
		t.Errorf("path a/b/../c = %q, %v", got, err)
	}
}

func TestGitRepo_ServeHTTP(t *testing.T) {
	t.Parallel()
	repo := NewGitRepo(t)
	repo.WriteFile("README", "hello\n")
	head := repo.Commit("first")

	t.Run("anonymous", func(t *testing.T) {
		url := repo.ServeHTTP(t)
		clone := filepath.Join(t.TempDir(), "clone")
		runGit(t, "", "clone", "--quiet", url, clone)
		if got := runGit(t, clone, "rev-parse", "HEAD"); got != head {
			t.Fatalf("clone HEAD %s, want %s", got, head)
		}
		if got := goGitHead(t, url, nil); got != head {
			t.Fatalf("go-git clone HEAD %s, want %s", got, head)
		}
	})

	// The fetch path the server answers itself: the advertisement, and a
	// request gzipped as the git CLI sends a long one.
	t.Run("upload-pack", func(t *testing.T) {
		url := repo.ServeHTTP(t)
		resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
		if err != nil {
			t.Fatal(err)
		}
		adv, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-git-upload-pack-advertisement" {
			t.Fatalf("advertisement content type %q", ct)
		}
		if !bytes.HasPrefix(adv, []byte("001e# service=git-upload-pack\n0000")) || !bytes.Contains(adv, []byte(head)) {
			t.Fatalf("advertisement %q does not name the service and HEAD %s", adv, head)
		}
		var req bytes.Buffer
		zw := gzip.NewWriter(&req)
		fmt.Fprintf(zw, "0032want %s\n00000009done\n", head)
		zw.Close()
		post, _ := http.NewRequest(http.MethodPost, url+"/git-upload-pack", &req)
		post.Header.Set("Content-Type", "application/x-git-upload-pack-request")
		post.Header.Set("Content-Encoding", "gzip")
		resp, err = http.DefaultClient.Do(post)
		if err != nil {
			t.Fatal(err)
		}
		pack, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.HasPrefix(pack, []byte("0008NAK\n")) || !bytes.Contains(pack, []byte("PACK")) {
			t.Fatalf("upload-pack answer %.60q is not a NAK and a pack", pack)
		}
	})

	t.Run("basic auth", func(t *testing.T) {
		url := repo.ServeHTTP(t, WithBasicAuth("alice", "s3cret"))

		resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request without credentials: status %d, want 401", resp.StatusCode)
		}

		authed := strings.Replace(url, "http://", "http://alice:s3cret@", 1)
		clone := filepath.Join(t.TempDir(), "clone")
		runGit(t, "", "clone", "--quiet", authed, clone)
		if got := runGit(t, clone, "rev-parse", "HEAD"); got != head {
			t.Fatalf("clone HEAD %s, want %s", got, head)
		}

		if got := goGitHead(t, url, &githttp.BasicAuth{Username: "alice", Password: "s3cret"}); got != head {
			t.Fatalf("go-git clone HEAD %s, want %s", got, head)
		}
		_, err = git.PlainClone(t.TempDir(), true, &git.CloneOptions{URL: url})
		if err == nil {
			t.Fatal("go-git cloned without credentials")
		}

		// A push over HTTP lands in the served repository.
		if err := os.WriteFile(filepath.Join(clone, "README"), []byte("pushed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		runGit(t, clone, "-c", "user.name=t", "-c", "user.email=t@nops.invalid", "commit", "--quiet", "-am", "push")
		runGit(t, clone, "push", "--quiet", "origin", "main")
		pushed := runGit(t, clone, "rev-parse", "HEAD")
		if got := repo.Head(); got != pushed {
			t.Fatalf("served repository HEAD %s after push, want %s", got, pushed)
		}
	})
}

// goGitHead clones url with go-git and returns the hash of its HEAD.
func goGitHead(t *testing.T, url string, auth *githttp.BasicAuth) string {
	t.Helper()
	opts := &git.CloneOptions{URL: url, ReferenceName: "refs/heads/main", SingleBranch: true}
	if auth != nil {
		opts.Auth = auth
	}
	cloned, err := git.PlainClone(t.TempDir(), true, opts)
	if err != nil {
		t.Fatalf("go-git clone of %s: %v", url, err)
	}
	ref, err := cloned.Head()
	if err != nil {
		t.Fatalf("go-git HEAD of %s: %v", url, err)
	}
	return ref.Hash().String()
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
