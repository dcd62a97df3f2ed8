package gitwatch

import (
	"net/url"
	"regexp"
	"strings"
)

// SafeURL returns a repository URL without the secrets of its user info,
// for status, logs, errors and anything replicated: https://TOKEN@host/x and
// https://user:pass@host/x lose all their user info (over http a lone user
// name is often a token), ssh://user:pass@host/x and the scp-like
// user:pass@host:x keep only the user name (an SSH login, not a secret). The
// watcher keeps the configured URL, credentials included, to fetch with.
func SafeURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		if u.User == nil {
			return raw
		}
		if u.Scheme == "ssh" || strings.HasPrefix(u.Scheme, "git+ssh") || strings.HasPrefix(u.Scheme, "ssh+") {
			u.User = url.User(u.User.Username())
		} else {
			u.User = nil
		}
		return u.String()
	}
	// scp-like: [user[:pass]@]host:path, no scheme.
	if at := strings.LastIndex(raw, "@"); at >= 0 && !strings.Contains(raw[:at], "/") {
		if rest := raw[at+1:]; strings.Contains(rest, ":") {
			user, _, _ := strings.Cut(raw[:at], ":")
			if user == "" {
				return rest
			}
			return user + "@" + rest
		}
	}
	if i := strings.Index(raw, "://"); i > 0 {
		// A URL net/url refuses (a password with a '/' or '#'): what is
		// before the last '@' is user info.
		if at := strings.LastIndex(raw[i+3:], "@"); at >= 0 {
			return raw[:i+3] + raw[i+3+at+1:]
		}
	}
	return raw
}

// userinfoInText matches the user info of a URL written anywhere in a text.
var userinfoInText = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@]+@`)

// ScrubURLs removes the user info of every scheme://user[:pass]@ URL in a
// text, such as an error that quotes the URL it failed on.
func ScrubURLs(s string) string {
	return userinfoInText.ReplaceAllString(s, "$1")
}

// URLSecrets returns the secret parts of a URL's user info: the password,
// and the user name when it stands alone in an http(s) URL (a token).
func URLSecrets(raw string) []string {
	var out []string
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			out = append(out, p)
		} else if strings.HasPrefix(u.Scheme, "http") {
			out = append(out, u.User.Username())
		}
		return out
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 && !strings.Contains(raw[:at], "/") {
		if _, pass, ok := strings.Cut(raw[:at], ":"); ok {
			out = append(out, pass)
		}
	}
	return out
}
