package gitwatch

import (
	"errors"
	"net/url"
	"strings"
)

// CheckWebURL checks a repository's web_url: an http:// or https:// URL
// with a host, and without user info, a query or a fragment, since a commit
// link is made by adding to its path and is shown to every reader. The URL
// is not quoted back: it could carry a secret.
func CheckWebURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return errors.New("must be an http:// or https:// URL")
	}
	if u.User != nil || strings.Contains(u.Host, "@") {
		return errors.New("must not carry credentials (user info)")
	}
	if u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(raw, "?#") {
		return errors.New("must not have a query or a fragment")
	}
	return nil
}

// CommitURL returns the link to a commit in the repository's web UI:
// webURL/commit/<sha> when webURL is set; else, for an https:// clone URL
// of a host whose web UI is known (DeriveWebURL), the link that host
// uses; else "". It never carries the clone URL's credentials.
func CommitURL(cloneURL, webURL, sha string) string {
	if sha == "" {
		return ""
	}
	if webURL != "" {
		if CheckWebURL(webURL) != nil {
			return ""
		}
		return strings.TrimRight(webURL, "/") + "/commit/" + sha
	}
	base, bitbucket := DeriveWebURL(cloneURL)
	switch {
	case base == "":
		return ""
	case bitbucket:
		return base + "/commits/" + sha
	}
	return base + "/commit/" + sha
}

// DeriveWebURL returns the web UI of a repository from its clone URL, and
// whether it is Bitbucket's (whose commit links say /commits/): for an
// https:// URL of github.com, gitlab.com or a host whose name holds
// "gitlab", codeberg.org or a host whose name holds "gitea" or "forgejo",
// and bitbucket.org, the URL without user info, query, fragment and a
// trailing ".git"; "" for any other URL (ssh, file, another host).
func DeriveWebURL(cloneURL string) (base string, bitbucket bool) {
	u, err := url.Parse(strings.TrimSpace(cloneURL))
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", false
	}
	host := strings.ToLower(u.Hostname())
	switch {
	case host == "github.com", host == "gitlab.com", strings.Contains(host, "gitlab"),
		host == "codeberg.org", strings.Contains(host, "gitea"), strings.Contains(host, "forgejo"):
	case host == "bitbucket.org":
		bitbucket = true
	default:
		return "", false
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, ".git")
	p = strings.TrimRight(p, "/")
	if strings.Trim(p, "/") == "" {
		return "", false
	}
	web := url.URL{Scheme: "https", Host: strings.ToLower(u.Host), Path: p}
	return web.String(), bitbucket
}
