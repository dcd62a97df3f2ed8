package gitwatch

import (
	"strings"
	"testing"
)

func TestCommitURL_DerivedForKnownHostsWithoutCredentials(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct{ clone, web, want string }{
		{"https://github.com/ops/jobs.git", "", "https://github.com/ops/jobs/commit/" + sha},
		{"https://x-access-token:ghp_SECRET@github.com/ops/jobs.git", "", "https://github.com/ops/jobs/commit/" + sha},
		{"https://TOKEN@GitHub.com/ops/jobs/", "", "https://github.com/ops/jobs/commit/" + sha},
		{"https://gitlab.com/group/sub/jobs.git", "", "https://gitlab.com/group/sub/jobs/commit/" + sha},
		{"https://oauth2:glpat-SECRET@gitlab.example.com/ops/jobs.git", "", "https://gitlab.example.com/ops/jobs/commit/" + sha},
		{"https://gitea.example.com:3000/ops/jobs.git", "", "https://gitea.example.com:3000/ops/jobs/commit/" + sha},
		{"https://git.forgejo.example.org/ops/jobs", "", "https://git.forgejo.example.org/ops/jobs/commit/" + sha},
		{"https://user:pass@codeberg.org/ops/jobs.git", "", "https://codeberg.org/ops/jobs/commit/" + sha},
		{"https://user:app-password@bitbucket.org/ws/jobs.git", "", "https://bitbucket.org/ws/jobs/commits/" + sha},
		{"https://github.com/ops/jobs.git?x=y#frag", "", "https://github.com/ops/jobs/commit/" + sha},
		// Not derived: other schemes and hosts, or no repository path.
		{"http://github.com/ops/jobs.git", "", ""},
		{"git@github.com:ops/jobs.git", "", ""},
		{"ssh://git@gitlab.com/ops/jobs.git", "", ""},
		{"file:///srv/git/jobs", "", ""},
		{"/srv/git/jobs", "", ""},
		{"https://git.example.com/ops/jobs.git", "", ""},
		{"https://github.com/", "", ""},
		{"https://github.com/.git", "", ""},
		// web_url wins, whatever the clone URL.
		{"git@git.example.com:ops/jobs.git", "https://git.example.com/ops/jobs", "https://git.example.com/ops/jobs/commit/" + sha},
		{"https://tok@github.com/ops/jobs.git", "http://web.example.com/jobs/", "http://web.example.com/jobs/commit/" + sha},
		// A web_url that is not valid gives no link.
		{"https://github.com/ops/jobs.git", "https://user:pw@web.example.com/jobs", ""},
	} {
		got := CommitURL(tc.clone, tc.web, sha)
		if got != tc.want {
			t.Errorf("CommitURL(%q, %q) = %q, want %q", tc.clone, tc.web, got, tc.want)
		}
		for _, secret := range []string{"SECRET", "TOKEN", "tok@", "pass", "pw@", "app-password", "x-access-token"} {
			if strings.Contains(got, secret) {
				t.Errorf("CommitURL(%q, %q) = %q carries a credential", tc.clone, tc.web, got)
			}
		}
	}
	if got := CommitURL("https://github.com/ops/jobs.git", "", ""); got != "" {
		t.Errorf("a link without a commit: %q", got)
	}
}

func TestCheckWebURL(t *testing.T) {
	for raw, want := range map[string]string{
		"":                                   "",
		"https://git.example.com/ops/jobs":   "",
		"http://git.example.com:8080/jobs/":  "",
		"git.example.com/ops/jobs":           "http:// or https://",
		"ftp://git.example.com/jobs":         "http:// or https://",
		"https://":                           "http:// or https://",
		"https://user:pw@git.example.com/x":  "credentials",
		"https://token@git.example.com/x":    "credentials",
		"https://git.example.com/x?tab=code": "query",
		"https://git.example.com/x#top":      "fragment",
	} {
		err := CheckWebURL(raw)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckWebURL(%q): %v", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckWebURL(%q): %v, want an error saying %q", raw, err, want)
		case err != nil && (strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "token")):
			t.Errorf("CheckWebURL(%q) quotes the URL: %v", raw, err)
		}
	}
}
