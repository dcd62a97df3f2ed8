package structs

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxTextLen bounds, in bytes, the free text a person writes into the
// state: a decision's comment, a pause's reason. The FSM refuses longer
// text; the API and the dashboard check it first, with the same function,
// to answer before anything is proposed.
const MaxTextLen = 4096

// CheckText returns an error wrapping ErrInvalid, naming field, when s is
// longer than MaxTextLen.
func CheckText(field, s string) error {
	if len(s) > MaxTextLen {
		return fmt.Errorf("%w: %s: at most %d characters", ErrInvalid, field, MaxTextLen)
	}
	return nil
}

// shortIDLen is how many characters of an ID ShortID keeps.
const shortIDLen = 8

// ShortID returns the first eight characters of an ID or a commit hash,
// as logs, messages and tables show them, or the whole of a shorter one.
func ShortID(id string) string {
	if len(id) > shortIDLen {
		return id[:shortIDLen]
	}
	return id
}

// SplitList splits a comma-separated list as a person types it (a flag, an
// environment variable, a dashboard field): items are trimmed of blanks and
// empty ones dropped.
func SplitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// TruncateText returns s cut to at most limit bytes, at a UTF-8 character
// boundary, so that text read from outside (a commit message) fits a
// field CheckText bounds.
func TruncateText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	limit = max(limit, 0)
	for limit > 0 && !utf8.RuneStart(s[limit]) {
		limit--
	}
	return s[:limit]
}

// CommitSubject returns the first line of a commit message, trimmed.
func CommitSubject(message string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(message), "\n")
	return strings.TrimSpace(first)
}

// CommitBody returns a commit message without its subject line, trimmed.
func CommitBody(message string) string {
	_, body, _ := strings.Cut(strings.TrimSpace(message), "\n")
	return strings.TrimSpace(body)
}

// MaxFileDiffLen bounds, in bytes, a deployment's file diff: a job file
// and its variables file rewritten whole still fit; what goes past it is
// cut by CapFileDiff and refused by the FSM (CheckFileDiff).
const MaxFileDiffLen = 64 << 10

// FileDiffCut is the line CapFileDiff ends a cut file diff with.
const FileDiffCut = "... (file diff cut: it is longer than 64 KiB)\n"

// CapFileDiff returns a file diff that fits MaxFileDiffLen: a longer one
// is cut after its last whole line that fits and ends with FileDiffCut.
func CapFileDiff(diff string) string {
	if len(diff) <= MaxFileDiffLen {
		return diff
	}
	keep := diff[:MaxFileDiffLen-len(FileDiffCut)]
	if i := strings.LastIndexByte(keep, '\n'); i >= 0 {
		keep = keep[:i+1]
	} else {
		keep = ""
	}
	return keep + FileDiffCut
}

// CheckFileDiff returns an error wrapping ErrInvalid, naming field, when a
// file diff is longer than MaxFileDiffLen.
func CheckFileDiff(field, diff string) error {
	if len(diff) > MaxFileDiffLen {
		return fmt.Errorf("%w: %s: at most %d bytes", ErrInvalid, field, MaxFileDiffLen)
	}
	return nil
}
