package gitwatch

import (
	"errors"
	"strings"
	"testing"
)

func TestSafeURL_DropsSecretsKeepsUserOfSSH(t *testing.T) {
	for in, want := range map[string]string{
		"https://ghp_TOKEN123@github.com/org/repo.git":        "https://github.com/org/repo.git",
		"https://user:hunter2@git.example/x.git":              "https://git.example/x.git",
		"http://oauth2:glpat-SECRET@gitlab.example:8080/x":    "http://gitlab.example:8080/x",
		"https://user:pa/ss#word@git.example/x.git":           "https://git.example/x.git",
		"ssh://git:sshpass@git.example:2222/x.git":            "ssh://git@git.example:2222/x.git",
		"deploy:s3cr3t@git.example:org/repo.git":              "deploy@git.example:org/repo.git",
		"git@github.com:org/repo.git":                         "git@github.com:org/repo.git",
		"https://github.com/org/repo.git":                     "https://github.com/org/repo.git",
		"/srv/git/repo":                                       "/srv/git/repo",
		"file:///srv/git/repo":                                "file:///srv/git/repo",
		"https://x-access-token:ghs_abc@github.com/o/r?ref=1": "https://github.com/o/r?ref=1",
	} {
		if got := SafeURL(in); got != want {
			t.Errorf("SafeURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestScrubRemovesURLSecrets: a fetch error that quotes the URL, or the
// credentials, keeps none of them.
func TestScrubRemovesURLSecrets(t *testing.T) {
	for _, raw := range []string{
		"https://ghp_TOKEN123@github.com/org/repo.git",
		"https://user:hunter2pass@git.example/x.git",
		"deploy:s3cr3tpass@git.example:org/repo.git",
	} {
		r := &repo{cfg: RepoConfig{Name: "r", URL: raw}}
		err := r.scrub(errors.New("clone " + raw + ": authentication required for " + raw + " (also https://other:pw@mirror.example/x)\n"))
		for _, secret := range []string{"ghp_TOKEN123", "hunter2pass", "s3cr3tpass", "other:pw"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("scrubbed error %q still holds %q", err, secret)
			}
		}
		if !strings.Contains(err.Error(), "authentication required") {
			t.Errorf("scrub lost the message: %q", err)
		}
	}
}
