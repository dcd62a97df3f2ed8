package structs

import (
	"strconv"
	"strings"
)

// File diff line kinds (FileDiffLine.Kind).
const (
	DiffLineFile    = "file"    // a "--- a/x" or "+++ b/x" header
	DiffLineHunk    = "hunk"    // an "@@ -1,3 +1,4 @@" header
	DiffLineAdded   = "added"   // "+"
	DiffLineRemoved = "removed" // "-"
	DiffLineContext = "context" // " ", and "\ No newline at end of file"
	DiffLineNote    = "note"    // anything else: a note of the writer
)

// FileDiffLine is one line of a deployment's file diff, with its kind.
type FileDiffLine struct {
	Kind string
	Text string
}

// ParseFileDiff splits a unified diff into its lines and tells each
// line's kind, following the counts of each hunk header, so that a
// removed line that reads "-- x" is not taken for a file header.
func ParseFileDiff(diff string) []FileDiffLine {
	if diff == "" {
		return nil
	}
	var out []FileDiffLine
	oldLeft, newLeft := 0, 0
	for _, line := range strings.Split(strings.TrimSuffix(diff, "\n"), "\n") {
		kind := DiffLineNote
		inHunk := oldLeft > 0 || newLeft > 0
		switch {
		case inHunk && strings.HasPrefix(line, "-"):
			kind, oldLeft = DiffLineRemoved, oldLeft-1
		case inHunk && strings.HasPrefix(line, "+"):
			kind, newLeft = DiffLineAdded, newLeft-1
		case inHunk && strings.HasPrefix(line, " "):
			kind, oldLeft, newLeft = DiffLineContext, oldLeft-1, newLeft-1
		case strings.HasPrefix(line, `\`):
			kind = DiffLineContext
		case strings.HasPrefix(line, "@@ "):
			kind = DiffLineHunk
			oldLeft, newLeft = hunkCounts(line)
		case strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "+++ "):
			kind = DiffLineFile
		}
		out = append(out, FileDiffLine{Kind: kind, Text: line})
	}
	return out
}

// hunkCounts reads the line counts of a hunk header, "@@ -a,b +c,d @@",
// where a missing count is 1.
func hunkCounts(header string) (oldCount, newCount int) {
	fields := strings.Fields(header)
	if len(fields) < 3 {
		return 0, 0
	}
	count := func(r string) int {
		_, n, ok := strings.Cut(r[1:], ",")
		if !ok {
			return 1
		}
		c, err := strconv.Atoi(n)
		if err != nil || c < 0 {
			return 0
		}
		return c
	}
	return count(fields[1]), count(fields[2])
}

// FileDiffCounts returns how many lines a file diff adds and removes.
func FileDiffCounts(diff string) (added, removed int) {
	for _, l := range ParseFileDiff(diff) {
		switch l.Kind {
		case DiffLineAdded:
			added++
		case DiffLineRemoved:
			removed++
		}
	}
	return added, removed
}
