package gitwatch

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// DefaultPollInterval is used when a repository sets no poll interval.
const DefaultPollInterval = time.Minute

// tokenUsername is the user name sent with a token when none is configured;
// GitHub, GitLab and Gitea accept any non-empty name with a token.
const tokenUsername = "x-access-token"

// RepoConfig is one watched repository.
type RepoConfig struct {
	// Name identifies the repository in status, logs and Refresh.
	Name string
	// URL to clone: https://, http://, ssh://, user@host:path, file:// or a
	// local path.
	URL string
	// Branch to follow; empty follows the remote's default branch (HEAD).
	Branch string
	// Path is the directory inside the repository holding job files; empty
	// or "." is the whole repository.
	Path string
	// PollInterval between two fetches; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// WebURL is the repository's web UI, the base of commit links
	// (CommitURL); empty derives it from URL for known hosts.
	WebURL string
	// Auth holds credentials, if any.
	Auth Auth
	// Verify, when set, makes the watcher publish only head commits
	// signed by one of its keys (SPEC section 18); nil verifies nothing.
	Verify *Verify
}

// Auth holds the credentials of a repository. Set at most one of Password
// and Token (HTTPS), or SSHKeyFile (SSH).
type Auth struct {
	// Username for HTTPS basic auth or SSH; defaults to "x-access-token"
	// with a token and "git" with an SSH key.
	Username string
	// Password for HTTPS basic auth.
	Password string
	// Token for HTTPS, sent as the basic-auth password.
	Token string
	// SSHKeyFile is a PEM private key file.
	SSHKeyFile string
	// SSHKeyPassphrase decrypts SSHKeyFile.
	SSHKeyPassphrase string
	// SSHKnownHostsFile checks the server's host key; empty uses the
	// SSH_KNOWN_HOSTS variable or ~/.ssh/known_hosts.
	SSHKnownHostsFile string
}

// Validate reports every problem of the configuration, naming the field.
func (c RepoConfig) Validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	if c.URL == "" {
		errs = append(errs, errors.New("url is required"))
	} else if _, err := transport.NewEndpoint(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("url %q is invalid: %w", SafeURL(c.URL), err))
	}
	if err := CheckWebURL(c.WebURL); err != nil {
		errs = append(errs, fmt.Errorf("web_url: %w", err))
	}
	if c.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("poll_interval %s is negative", c.PollInterval))
	}
	if _, err := cleanPath(c.Path); err != nil {
		errs = append(errs, err)
	}
	if c.Branch != "" && (strings.HasPrefix(c.Branch, "-") || strings.ContainsAny(c.Branch, " ~^:?*[\\") || strings.Contains(c.Branch, "..")) {
		errs = append(errs, fmt.Errorf("branch %q is not a valid branch name", c.Branch))
	}
	a := c.Auth
	if a.Password != "" && a.Token != "" {
		errs = append(errs, errors.New("auth: set password or token, not both"))
	}
	if a.SSHKeyFile != "" && (a.Password != "" || a.Token != "") {
		errs = append(errs, errors.New("auth: an SSH key cannot be combined with a password or token"))
	}
	if a.SSHKeyFile == "" && (a.SSHKeyPassphrase != "" || a.SSHKnownHostsFile != "") {
		errs = append(errs, errors.New("auth: ssh_key_passphrase and ssh_known_hosts_file need ssh_key_file"))
	}
	if v := c.Verify; v != nil && v.AllowedSignersFile == "" && v.GPGKeysFile == "" {
		errs = append(errs, errors.New("verify: set allowed_signers_file, gpg_keys_file or both"))
	}
	if err := errors.Join(errs...); err != nil {
		name := c.Name
		if name == "" {
			name = SafeURL(c.URL)
		}
		return fmt.Errorf("repository %q: %w", name, err)
	}
	return nil
}

// authMethod builds the go-git credentials. It reads key files, so it runs
// before every fetch: a fixed key file is picked up without a restart.
func (c RepoConfig) authMethod() (transport.AuthMethod, error) {
	a := c.Auth
	switch {
	case a.SSHKeyFile != "":
		user := a.Username
		if user == "" {
			if ep, err := transport.NewEndpoint(c.URL); err == nil && ep.User != "" {
				user = ep.User
			} else {
				user = "git"
			}
		}
		keys, err := gitssh.NewPublicKeysFromFile(user, a.SSHKeyFile, a.SSHKeyPassphrase)
		if err != nil {
			return nil, fmt.Errorf("load SSH key %s: %w", a.SSHKeyFile, err)
		}
		if a.SSHKnownHostsFile != "" {
			cb, err := gitssh.NewKnownHostsCallback(a.SSHKnownHostsFile)
			if err != nil {
				return nil, fmt.Errorf("load SSH known hosts %s: %w", a.SSHKnownHostsFile, err)
			}
			keys.HostKeyCallback = cb
		}
		return keys, nil
	case a.Token != "":
		user := a.Username
		if user == "" {
			user = tokenUsername
		}
		return &githttp.BasicAuth{Username: user, Password: a.Token}, nil
	case a.Username != "" || a.Password != "":
		return &githttp.BasicAuth{Username: a.Username, Password: a.Password}, nil
	}
	return nil, nil
}

// cleanPath normalises the job directory inside a repository: "" for the
// root, otherwise a slash-separated path without leading or trailing slash.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	c := path.Clean(strings.ReplaceAll(p, "\\", "/"))
	c = strings.TrimPrefix(c, "/")
	if c == "." || c == "" {
		return "", nil
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q leaves the repository", p)
	}
	return c, nil
}
