package nomadx

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ErrNoToken is returned by New when the token file is empty.
var ErrNoToken = errors.New("the Nomad token file is empty")

// tokenCheckInterval bounds how often the token file is looked at for a
// change; a refused token makes it be read at once.
const tokenCheckInterval = time.Second

// maxTokenFileSize bounds what is read from a token file: a Nomad secret ID
// is 36 bytes, a workload identity JWT a few kilobytes.
const maxTokenFileSize = 64 << 10

// tokenFile is a Nomad token kept in a file, as Nomad writes a task's
// workload identity (secrets/nomad_token) or an operator a rotated secret.
// It is read again when the file changes and when Nomad refuses it, so a
// new token is used without a restart.
type tokenFile struct {
	path   string
	logger hclog.Logger

	mu      sync.Mutex
	token   string
	modTime time.Time
	size    int64
	checked time.Time
}

func newTokenFile(path string, logger hclog.Logger) (*tokenFile, error) {
	t := &tokenFile{path: path, logger: logger}
	if _, err := t.load(true); err != nil {
		return nil, err
	}
	return t, nil
}

// current returns the token, reading the file again if it changed since the
// last look (at most once per tokenCheckInterval). A file that cannot be
// read keeps the token read before.
func (t *tokenFile) current() string {
	tok, _ := t.load(false)
	return tok
}

// reload reads the file now, after Nomad refused the token; it reports
// whether the token changed.
func (t *tokenFile) reload(refused string) bool {
	t.mu.Lock()
	old := t.token
	t.mu.Unlock()
	tok, err := t.load(true)
	if err != nil {
		t.logger.Warn("Nomad refused the token and the token file cannot be read again", "file", t.path, "error", err)
		return false
	}
	if tok == old {
		return false
	}
	t.logger.Info("Nomad refused the token: using the new token from the token file", "file", t.path, "answer", refused)
	return true
}

func (t *tokenFile) load(force bool) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if !force && t.token != "" && now.Sub(t.checked) < tokenCheckInterval {
		return t.token, nil
	}
	t.checked = now
	fi, err := os.Stat(t.path)
	if err != nil {
		return t.token, fmt.Errorf("read Nomad token file: %w", err)
	}
	if !force && t.token != "" && fi.ModTime().Equal(t.modTime) && fi.Size() == t.size {
		return t.token, nil
	}
	if fi.Size() > maxTokenFileSize {
		return t.token, fmt.Errorf("read Nomad token file %s: larger than %d bytes", t.path, maxTokenFileSize)
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return t.token, fmt.Errorf("read Nomad token file: %w", err)
	}
	tok := string(bytes.TrimSpace(b))
	if tok == "" {
		return t.token, fmt.Errorf("%w: %s", ErrNoToken, t.path)
	}
	if t.token != "" && tok != t.token {
		t.logger.Info("the Nomad token file changed: using the new token", "file", t.path)
	}
	t.token, t.modTime, t.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}

// tokenTransport sends the token of a token file with every request, and
// when Nomad refuses it (401 or 403) reads the file again and, if the token
// changed, sends the request once more with the new one.
type tokenTransport struct {
	next  http.RoundTripper
	token *tokenFile
}

const tokenHeader = "X-Nomad-Token"

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.send(req)
	if err != nil || (resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) {
		return resp, err
	}
	if !t.token.reload(resp.Status) {
		return resp, nil
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		// The body is spent and cannot be sent again: the caller's next
		// attempt uses the new token.
		return resp, nil
	}
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		body, berr := req.GetBody()
		if berr != nil {
			return resp, nil
		}
		retry.Body = body
	}
	_ = resp.Body.Close()
	return t.send(retry)
}

func (t *tokenTransport) send(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set(tokenHeader, t.token.current())
	return t.next.RoundTrip(r)
}
