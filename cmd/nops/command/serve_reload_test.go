//go:build unix

package command

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/tlsutil"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// SIGHUP reloads the log level and the repositories of a running nops
// serve, without a restart, and names in the log the changed settings only
// a restart applies.
func TestServe_SIGHUPReloadsLogLevelAndRepositories(t *testing.T) {
	first := testutil.NewGitRepoWith(t, "a", map[string]string{"a.nomad.hcl": `job "a" {}`})
	second := testutil.NewGitRepoWith(t, "b", map[string]string{"b.nomad.hcl": `job "b" {}`})
	head := second.Head()

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "nops.hcl")
	logPath := filepath.Join(dir, "nops.log")
	base := fmt.Sprintf("drift_interval = \"500ms\"\nrepository \"first\" {\n  url = %q\n}\n", first.URL())
	writeFile(t, cfgFile, base+"log_level = \"info\"\n")
	p, port := startServe(t, dir, "reload", "-config", cfgFile)
	addr := "http://127.0.0.1:" + strconv.Itoa(port)
	refresh := func(name string) (int, string) {
		resp, err := http.Post(addr+"/v1/repo/"+name+"/refresh", "application/json", nil)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		code, body := refresh("first")
		return code == http.StatusOK, fmt.Errorf("refresh first: %d %s", code, body)
	})
	if code, body := refresh("second"); code != http.StatusNotFound {
		t.Fatalf("refresh of a repository not configured yet: %d %s", code, body)
	}
	readLog := func() string {
		raw, _ := os.ReadFile(logPath)
		return string(raw)
	}
	if strings.Contains(readLog(), "[DEBUG]") {
		t.Fatalf("debug lines at level info:\n%s", readLog())
	}

	// Debug level, a second repository, and a setting only a restart
	// applies.
	writeFile(t, cfgFile, base+fmt.Sprintf("log_level = \"debug\"\nnamespaces = [\"default\", \"other\"]\nrepository \"second\" {\n  url = %q\n}\n", second.URL()))
	if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if exited, _ := p.Exited(); exited {
			t.Fatalf("SIGHUP stopped the server:\n%s", readLog())
		}
		code, body := refresh("second")
		if code != http.StatusOK {
			return false, fmt.Errorf("refresh second: %d %s", code, body)
		}
		var st struct {
			Head string `json:"head"`
		}
		_ = json.Unmarshal([]byte(body), &st)
		return st.Head == head, fmt.Errorf("second is at %q, want %s", st.Head, head)
	})
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		log := readLog()
		after := log[strings.Index(log, "caught SIGHUP"):]
		return strings.Contains(after, "[DEBUG]"), fmt.Errorf("no debug line after the reload:\n%s", after)
	})
	log := readLog()
	for _, want := range []string{"reloaded settings: settings=\"log-level, repository\"",
		"settings changed that only a restart applies: settings=namespaces"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	// The first repository is still watched, under the same process.
	if code, body := refresh("first"); code != http.StatusOK {
		t.Errorf("refresh first after the reload: %d %s", code, body)
	}
}

// SIGHUP no longer kills nops serve: it reloads the TLS certificate, and
// new connections get the new one.
func TestServe_SIGHUPReloadsTLS(t *testing.T) {
	s := startTLSServe(t, "hup")
	var first string
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		var err error
		first, err = s.serial()
		return err == nil, err
	})
	s.rotate(t)
	s.hup(t)
	s.waitFor(t, 20*time.Second, func(got string) bool { return got != first })
	if log := s.log(); !strings.Contains(log, "reloaded TLS certificates") {
		t.Errorf("the log does not say the certificates were reloaded:\n%s", log)
	}
}

// A SIGHUP that arrives while nops serve is still starting (its
// certificates read, its port not yet serving) neither ends the process
// nor is lost: it is applied once the server is up. A CI run that sent
// SIGHUP as soon as the port answered saw it dropped (the process had
// inherited SIGHUP ignored, and caught it only later).
func TestServe_SIGHUPWhileStarting(t *testing.T) {
	s := startTLSServe(t, "hup-start")
	// Raft logs its initial configuration after the certificates are
	// read and some milliseconds before the HTTP port serves: the log is
	// watched closely to send the signal in between.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(s.log(), "initial configuration"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server has not started raft:\n%s", s.log())
		}
	}
	want := s.rotate(t)
	s.hup(t)
	s.waitFor(t, 30*time.Second, func(got string) bool { return got == want })
	if log := s.log(); !strings.Contains(log, "caught SIGHUP") {
		t.Errorf("the log does not say the SIGHUP was caught:\n%s", log)
	}
}

// tlsServe is a nops serve process whose HTTP port serves TLS with the
// certificate files of a test CA.
type tlsServe struct {
	files  *nopstest.TLSFiles
	client *tls.Config
	dir    string
	p      *testutil.Process
	addr   string
}

func startTLSServe(t *testing.T, node string) *tlsServe {
	s := &tlsServe{files: nopstest.NewTLS(t, ""), dir: t.TempDir()}
	cfgFile := filepath.Join(s.dir, "tls.hcl")
	writeFile(t, cfgFile, fmt.Sprintf("tls {\n  http = true\n  cert_file = %q\n  key_file = %q\n}\n", s.files.ServerCertFile, s.files.ServerKeyFile))
	var port int
	s.p, port = startServe(t, s.dir, node, "-config", cfgFile)
	s.addr, s.client = "127.0.0.1:"+strconv.Itoa(port), s.files.ClientConfig(t)
	return s
}

func (s *tlsServe) log() string {
	raw, _ := os.ReadFile(filepath.Join(s.dir, "nops.log"))
	return string(raw)
}

// serial is the serial number of the certificate a new connection gets.
func (s *tlsServe) serial() (string, error) {
	conn, err := tls.Dial("tcp", s.addr, s.client)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// rotate writes a new server certificate and key in place of the old and
// returns the new certificate's serial number.
func (s *tlsServe) rotate(t *testing.T) string {
	cert, err := s.files.CA.NewCert(tlsutil.CertOptions{Kind: tlsutil.KindServer})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.files.ServerCertFile, string(cert.CertPEM))
	writeFile(t, s.files.ServerKeyFile, string(cert.KeyPEM))
	block, _ := pem.Decode(cert.CertPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

func (s *tlsServe) hup(t *testing.T) {
	if err := syscall.Kill(s.p.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until a new connection gets a certificate whose serial ok
// accepts; the process ending fails the test at once.
func (s *tlsServe) waitFor(t *testing.T, timeout time.Duration, ok func(serial string) bool) {
	testutil.WaitForResult(t, timeout, func() (bool, error) {
		if exited, _ := s.p.Exited(); exited {
			t.Fatalf("SIGHUP stopped the server:\n%s", s.log())
		}
		got, err := s.serial()
		if err != nil {
			return false, err
		}
		return ok(got), fmt.Errorf("the server presents certificate %s", got)
	})
}
