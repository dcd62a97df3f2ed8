//go:build unix

package command

import (
	"crypto/tls"
	"fmt"
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

// SIGHUP no longer kills nops serve: it reloads the TLS certificate, and
// new connections get the new one.
func TestServe_SIGHUPReloadsTLS(t *testing.T) {
	bin := testutil.NopsBinary(t)
	files := nopstest.NewTLS(t, "")
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "tls.hcl")
	writeFile(t, cfgFile, fmt.Sprintf("tls {\n  http = true\n  cert_file = %q\n  key_file = %q\n}\n", files.ServerCertFile, files.ServerKeyFile))
	port := testutil.FreePorts(t, 1)[0]
	p, err := testutil.StartProcess(testutil.ProcessConfig{
		Name: "nops serve", Bin: bin, LogPath: filepath.Join(dir, "nops.log"),
		Args: []string{"serve", "-dev", "-node", "hup", "-http-port", strconv.Itoa(port), "-rpc-port", "0", "-serf-port", "0",
			"-config", cfgFile, "-nomad-addr", "http://" + testutil.ClosedAddress(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	serial := func() (string, error) {
		conn, err := tls.Dial("tcp", addr, files.ClientConfig(t))
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	var first string
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		first, err = serial()
		return err == nil, err
	})

	cert, err := files.CA.NewCert(tlsutil.CertOptions{Kind: tlsutil.KindServer})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, files.ServerCertFile, string(cert.CertPEM))
	writeFile(t, files.ServerKeyFile, string(cert.KeyPEM))
	if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		if exited, _ := p.Exited(); exited {
			raw, _ := os.ReadFile(filepath.Join(dir, "nops.log"))
			t.Fatalf("SIGHUP stopped the server:\n%s", raw)
		}
		got, err := serial()
		if err != nil {
			return false, err
		}
		return got != first, fmt.Errorf("the server still presents certificate %s", got)
	})
	raw, _ := os.ReadFile(filepath.Join(dir, "nops.log"))
	if !strings.Contains(string(raw), "reloaded TLS certificates") {
		t.Errorf("the log does not say the certificates were reloaded:\n%s", raw)
	}
}
