package testutil

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer is a git server over SSH in front of a GitRepo: the ssh
// protocol of golang.org/x/crypto/ssh, and the real `git upload-pack` for
// each fetch, as a git host's sshd runs it.
type SSHServer struct {
	// URL is the clone URL, "ssh://git@127.0.0.1:<port>/<repo>".
	URL string
	// HostKey is the server's host key.
	HostKey ssh.PublicKey
	// Addr is the server's "host:port".
	Addr string
}

// KnownHostsLine is the server's line for a known_hosts file.
func (s *SSHServer) KnownHostsLine() string {
	return knownhosts.Line([]string{s.Addr}, s.HostKey)
}

// ServeSSH serves the repository over SSH on 127.0.0.1 until the end of the
// test, to the client key authorized alone. It runs `git upload-pack` for
// a fetch of the repository's path, and refuses every other command.
func (r *GitRepo) ServeSSH(t testing.TB, authorized ssh.PublicKey) *SSHServer {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("testutil: the git CLI is required: %v", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if bytes.Equal(k.Marshal(), authorized.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("key not authorized")
		},
	}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: listening for the git SSH server: %v", err)
	}
	repoPath := "/" + filepath.Base(r.Dir)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.serveSSHConn(c, cfg, gitBin, repoPath)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return &SSHServer{URL: fmt.Sprintf("ssh://git@%s%s", l.Addr(), repoPath), HostKey: signer.PublicKey(), Addr: l.Addr().String()}
}

func (r *GitRepo) serveSSHConn(c net.Conn, cfg *ssh.ServerConfig, gitBin, repoPath string) {
	defer c.Close()
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return // a refused client key, or a client that refused the host key
	}
	defer sc.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			return
		}
		go r.serveSSHSession(ch, creqs, gitBin, repoPath)
	}
}

// serveSSHSession runs the one command a session asks for: git-upload-pack
// of the repository's path.
func (r *GitRepo) serveSSHSession(ch ssh.Channel, reqs <-chan *ssh.Request, gitBin, repoPath string) {
	defer ch.Close()
	for req := range reqs {
		switch req.Type {
		case "env":
			_ = req.Reply(true, nil)
		case "exec":
			if len(req.Payload) < 4 {
				_ = req.Reply(false, nil)
				return
			}
			n := binary.BigEndian.Uint32(req.Payload)
			if int(n) > len(req.Payload)-4 {
				_ = req.Reply(false, nil)
				return
			}
			service, arg, _ := strings.Cut(string(req.Payload[4:4+n]), " ")
			p := path.Clean("/" + strings.Trim(strings.TrimSpace(arg), "'\""))
			if service != "git-upload-pack" || (p != repoPath && p != repoPath+".git") {
				_ = req.Reply(false, nil)
				fmt.Fprintf(ch.Stderr(), "only git-upload-pack of %s\n", repoPath)
				return
			}
			_ = req.Reply(true, nil)
			_, _ = ch.SendRequest("exit-status", false, exitStatus(r.runUploadPack(ch, gitBin)))
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// runUploadPack runs `git upload-pack` on the repository with the channel
// as its input and output, and returns its exit code.
func (r *GitRepo) runUploadPack(ch ssh.Channel, gitBin string) int {
	cmd := exec.Command(gitBin, "upload-pack", r.Dir)
	cmd.Env = gitEnv()
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	in, err := cmd.StdinPipe()
	if err != nil {
		return 1
	}
	if err := cmd.Start(); err != nil {
		return 1
	}
	// The copy of the client's input ends when the client closes the
	// channel; the command's end does not wait for it.
	go func() {
		_, _ = io.Copy(in, ch)
		_ = in.Close()
	}()
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 1
	}
	return 0
}

func exitStatus(code int) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, uint32(code))
	return b
}

// SSHClientKey writes a new ed25519 private key, unencrypted, as an OpenSSH
// PEM file dir/name (what ssh-keygen -t ed25519 writes), and returns the
// file and the public key.
func SSHClientKey(t testing.TB, dir, name string) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return file, sp
}
