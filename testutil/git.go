package testutil

import (
	"bytes"
	"compress/gzip"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// GitRepo is a git repository with a working tree in t.TempDir(), made and
// changed with the git CLI. Its default branch is main. Its methods fail the
// test on any error.
type GitRepo struct {
	// Dir is the working tree; the repository is Dir/.git.
	Dir string

	t testing.TB
	// served is the time the HTTP server of ServeHTTP spent answering
	// requests, in nanoseconds (its git processes included), and
	// servedBytes the bytes of the bodies it answered with.
	served, servedBytes atomic.Int64
}

// ServedTime is the time ServeHTTP's server has spent answering requests
// (git http-backend and the git processes it starts) since the repository
// was created: what a fetch waits for on the server's side, so that a
// benchmark can tell it from the client's own time.
func (r *GitRepo) ServedTime() time.Duration { return time.Duration(r.served.Load()) }

// ServedBytes is the bytes ServeHTTP's server has answered with (the
// bodies: reference lists and packs) since the repository was created:
// what a fetch transferred.
func (r *GitRepo) ServedBytes() int64 { return r.servedBytes.Load() }

// NewGitRepo creates an empty repository on branch main, with a local
// user.name and user.email, and with no global or system git configuration
// in effect.
func NewGitRepo(t testing.TB) *GitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("testutil: the git CLI is required: %v", err)
	}
	r := &GitRepo{Dir: filepath.Join(t.TempDir(), "repo"), t: t}
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		t.Fatalf("testutil: %v", err)
	}
	r.Git("init", "--quiet", "--initial-branch=main")
	r.Git("config", "user.name", "Nops Test")
	r.Git("config", "user.email", "test@nops.invalid")
	r.Git("config", "commit.gpgsign", "false")
	// Let `git http-backend` answer pushes too when the repository is
	// served over HTTP.
	r.Git("config", "http.receivepack", "true")
	r.Git("config", "receive.denyCurrentBranch", "updateInstead")
	return r
}

// NewGitRepoWith is NewGitRepo with files (path to content) written and
// committed with the message msg.
func NewGitRepoWith(t testing.TB, msg string, files map[string]string) *GitRepo {
	t.Helper()
	r := NewGitRepo(t)
	for path, content := range files {
		r.WriteFile(path, content)
	}
	r.Commit(msg)
	return r
}

// Git runs git with args in the working tree and returns its trimmed
// standard output.
func (r *GitRepo) Git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.Dir
	cmd.Env = gitEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("testutil: git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// WriteFile writes content to path (slash-separated, relative to the working
// tree), creating parent directories. The change is committed by Commit.
func (r *GitRepo) WriteFile(path, content string) {
	r.t.Helper()
	full, err := r.path(path)
	if err != nil {
		r.t.Fatalf("testutil: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatalf("testutil: %v", err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		r.t.Fatalf("testutil: %v", err)
	}
}

// Remove deletes path (a file or a directory) from the working tree. The
// change is committed by Commit.
func (r *GitRepo) Remove(path string) {
	r.t.Helper()
	full, err := r.path(path)
	if err != nil {
		r.t.Fatalf("testutil: %v", err)
	}
	if _, err := os.Lstat(full); err != nil {
		r.t.Fatalf("testutil: removing %s: %v", path, err)
	}
	if err := os.RemoveAll(full); err != nil {
		r.t.Fatalf("testutil: %v", err)
	}
}

// Commit stages every change of the working tree and commits it on the
// current branch, even if nothing changed, and returns the commit's full
// hash.
func (r *GitRepo) Commit(msg string) string {
	r.t.Helper()
	r.Git("add", "--all")
	r.Git("commit", "--quiet", "--allow-empty", "--no-verify", "-m", msg)
	return r.Head()
}

// Pack packs every object of the repository (git repack -a -d), as a git
// host keeps a pushed repository: a push of many objects arrives as one
// pack (git keeps a received pack of 100 objects or more), and hosts
// repack in the background. A repository committed file by file here
// holds loose objects instead, which the HTTP server of ServeHTTP reads
// one file at a time at every fetch (a fetch of a 10,000-file repository
// took 450-580 ms loose and 85-110 ms packed on a 2-core machine): call it
// after a commit of many files before timing fetches.
func (r *GitRepo) Pack() {
	r.t.Helper()
	r.Git("repack", "-a", "-d", "-q")
}

// CommitAs is Commit with another author, given as "Name <email>" (the
// committer stays the repository's user).
func (r *GitRepo) CommitAs(author, msg string) string {
	r.t.Helper()
	r.Git("add", "--all")
	r.Git("commit", "--quiet", "--allow-empty", "--no-verify", "--author", author, "-m", msg)
	return r.Head()
}

// CommitSSHSigned is Commit with the commit signed by the SSH private key
// file keyFile, as git signs with gpg.format = ssh (ssh-keygen -Y sign).
func (r *GitRepo) CommitSSHSigned(keyFile, msg string) string {
	r.t.Helper()
	r.Git("add", "--all")
	r.Git("-c", "gpg.format=ssh", "-c", "user.signingkey="+keyFile,
		"commit", "--quiet", "--allow-empty", "--no-verify", "-S", "-m", msg)
	return r.Head()
}

// Head returns the full hash of the commit HEAD points to.
func (r *GitRepo) Head() string {
	r.t.Helper()
	return r.Git("rev-parse", "HEAD")
}

// URL returns the repository's file:// URL, which go-git and the git CLI
// both clone from.
func (r *GitRepo) URL() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(r.Dir)}).String()
}

// path resolves a slash-separated path inside the working tree, refusing
// anything that would leave it.
func (r *GitRepo) path(p string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(p))
	if p == "" || filepath.IsAbs(clean) || clean == "." || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q is not inside the repository", p)
	}
	return filepath.Join(r.Dir, clean), nil
}

// ServeOption changes the HTTP server started by GitRepo.ServeHTTP.
type ServeOption func(*serveOptions)

type serveOptions struct {
	user, password string
}

// WithBasicAuth makes the server require HTTP basic authentication with
// user and password; other requests get 401.
func WithBasicAuth(user, password string) ServeOption {
	return func(o *serveOptions) {
		o.user = user
		o.password = password
	}
}

// ServeHTTP serves the repository with the git smart HTTP protocol (`git
// http-backend`) on 127.0.0.1 until the end of the test, and returns its
// clone URL, "http://127.0.0.1:<port>/repo". Fetches and pushes both work.
func (r *GitRepo) ServeHTTP(t testing.TB, opts ...ServeOption) string {
	t.Helper()
	var o serveOptions
	for _, opt := range opts {
		opt(&o)
	}

	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("testutil: the git CLI is required: %v", err)
	}
	backend := &cgi.Handler{
		Path: gitBin,
		Args: []string{"http-backend"},
		Env: append(gitEnv(),
			"GIT_PROJECT_ROOT="+filepath.Dir(r.Dir),
			"GIT_HTTP_EXPORT_ALL=1",
		),
	}
	var handler http.Handler = r.uploadPack(gitBin, backend)
	if o.user != "" || o.password != "" {
		handler = basicAuth(o.user, o.password, backend)
	}
	handler = r.timed(handler)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: listening for the git HTTP server: %v", err)
	}
	// The clients are the test's own git fetches, which send their headers
	// at once; the timeout only keeps a stuck one from holding the server.
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("testutil: git HTTP server: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })

	return fmt.Sprintf("http://%s/%s", l.Addr(), filepath.Base(r.Dir))
}

// uploadPack answers fetches by running `git upload-pack --stateless-rpc`
// itself, as hosted git servers do, rather than through `git http-backend`
// (a CGI program that would start it in turn, one more process a request:
// about 13ms of the server's time on a 2-core machine); it hands every
// other request (pushes, an unknown service) to backend. It speaks the
// protocol's version 0 whatever the client asks.
func (r *GitRepo) uploadPack(gitBin string, backend http.Handler) http.Handler {
	repo := "/" + filepath.Base(r.Dir)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.Method == http.MethodGet && req.URL.Path == repo+"/info/refs" && req.URL.Query().Get("service") == "git-upload-pack":
			var out bytes.Buffer
			cmd := exec.Command(gitBin, "upload-pack", "--stateless-rpc", "--advertise-refs", r.Dir)
			cmd.Env, cmd.Stdout = gitEnv(), &out
			if err := cmd.Run(); err != nil {
				http.Error(w, "upload-pack: "+err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			w.Header().Set("Cache-Control", "no-cache")
			// The smart protocol's first packet names the service.
			const first = "# service=git-upload-pack\n"
			fmt.Fprintf(w, "%04x%s0000", len(first)+4, first)
			_, _ = w.Write(out.Bytes())
		case req.Method == http.MethodPost && req.URL.Path == repo+"/git-upload-pack":
			body := io.Reader(req.Body)
			if req.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(req.Body)
				if err != nil {
					http.Error(w, "gzip: "+err.Error(), http.StatusBadRequest)
					return
				}
				defer zr.Close()
				body = zr
			}
			cmd := exec.Command(gitBin, "upload-pack", "--stateless-rpc", r.Dir)
			cmd.Env, cmd.Stdin = gitEnv(), body
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			w.Header().Set("Cache-Control", "no-cache")
			// Streamed as git writes it: the pack can be large.
			cmd.Stdout = w
			if err := cmd.Run(); err != nil {
				r.t.Logf("testutil: git upload-pack: %v", err)
			}
		default:
			backend.ServeHTTP(w, req)
		}
	})
}

// timed adds the time next takes to answer each request to r.served, and
// the bytes of its answer to r.servedBytes.
func (r *GitRepo) timed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		cw := &countingWriter{ResponseWriter: w}
		defer func() {
			r.served.Add(int64(time.Since(start)))
			r.servedBytes.Add(cw.n)
		}()
		next.ServeHTTP(cw, req)
	})
}

// countingWriter counts the bytes of a response body.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// Flush passes a flush on, for the CGI handler's streamed answers.
func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func basicAuth(user, password string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// gitEnv is the environment of the git commands of this package: no global
// or system configuration, no prompts, and fixed author and committer.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
	)
}
