// Package filediff writes the file diff of a deployment (SPEC section 15):
// the unified diff of a file between two versions, with three lines of
// context, as git shows it, but with every line redacted.
//
// Guarantee: the lines a diff shows, on the - side, the + side and in the
// context, are lines of the redacted texts (Redact), taken at the place
// of the original lines: the changes are found between the originals, so
// that a changed secret still shows as a changed line, but its value
// never shows, before or after. The line diff is go-git's (utils/diff).
package filediff

import (
	"fmt"
	"strings"
	"time"

	gitdiff "github.com/go-git/go-git/v5/utils/diff"
	"github.com/sergi/go-diff/diffmatchpatch"
)

// Context is the number of unchanged lines shown around a change.
const Context = 3

// diffTimeout bounds the search for the shortest diff of one file; past
// it, the rest of the file shows as removed and added, which is still a
// true diff.
const diffTimeout = 2 * time.Second

// noNewline follows a last line that has no newline, as in git.
const noNewline = `\ No newline at end of file`

// Version is one side of a file's diff.
type Version struct {
	// Path is the file's path in the repository; empty when the file is
	// absent on this side (it is added or removed).
	Path string
	Text string
}

// Redact returns a text with its secrets replaced, keeping its lines
// (redact.Redactor.Source).
type Redact func(string) string

// Unified returns the unified diff of a file from one version to the
// other, its lines redacted by redact; "" when they are the same.
func Unified(from, to Version, redact Redact) string {
	if from.Path == to.Path && from.Text == to.Text {
		return ""
	}
	if from.Path == "" && to.Path == "" {
		return ""
	}
	oldLines, newLines := splitLines(from.Text), splitLines(to.Text)
	oldShown, newShown := shown(from.Text, redact, len(oldLines)), shown(to.Text, redact, len(newLines))
	ops := script(from.Text, to.Text)
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s\n+++ %s\n", side("a/", from.Path), side("b/", to.Path))
	if len(ops) == 0 || allEqual(ops) {
		// Only the path changed.
		return b.String()
	}
	for _, h := range hunks(ops) {
		writeHunk(&b, ops[h.first:h.last], oldLines, newLines, oldShown, newShown)
	}
	return b.String()
}

func side(prefix, path string) string {
	if path == "" {
		return "/dev/null"
	}
	return prefix + path
}

// splitLines splits a text into its lines, each with its newline; the
// last has none when the text does not end with one.
func splitLines(text string) []string {
	if text == "" {
		return nil
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// shown returns the redacted lines of a text, n of them as the text has.
func shown(text string, redact Redact, n int) []string {
	if redact != nil {
		text = redact(text)
	}
	lines := splitLines(text)
	for len(lines) < n {
		// A redactor that lost a line: show nothing rather than a line of
		// the original.
		lines = append(lines, "\n")
	}
	return lines[:n]
}

// op is one line of the edit script: kept (' '), removed ('-') or added
// ('+'), with its line in the old and the new text.
type op struct {
	kind     byte
	old, new int
}

// script returns the edit script from old to new, line by line.
func script(old, new string) []op {
	var out []op
	o, n := 0, 0
	for _, d := range gitdiff.DoWithTimeout(old, new, diffTimeout) {
		count := len(splitLines(d.Text))
		for i := 0; i < count; i++ {
			switch d.Type {
			case diffmatchpatch.DiffEqual:
				out = append(out, op{' ', o, n})
				o, n = o+1, n+1
			case diffmatchpatch.DiffDelete:
				out = append(out, op{'-', o, n})
				o++
			case diffmatchpatch.DiffInsert:
				out = append(out, op{'+', o, n})
				n++
			}
		}
	}
	return out
}

func allEqual(ops []op) bool {
	for _, o := range ops {
		if o.kind != ' ' {
			return false
		}
	}
	return true
}

// span is a hunk: the ops from first to last (exclusive).
type span struct{ first, last int }

// hunks groups the changes with Context lines around each; changes closer
// than twice the context share a hunk.
func hunks(ops []op) []span {
	var out []span
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-Context, 0)
		end := i
		for end < len(ops) {
			// end is a change: take the run of changes, then see whether
			// another comes within 2*Context kept lines.
			for end < len(ops) && ops[end].kind != ' ' {
				end++
			}
			next := end
			for next < len(ops) && ops[next].kind == ' ' && next-end < 2*Context {
				next++
			}
			if next < len(ops) && ops[next].kind != ' ' {
				end = next
				continue
			}
			break
		}
		stop := min(end+Context, len(ops))
		if len(out) > 0 && start <= out[len(out)-1].last {
			out[len(out)-1].last = stop
		} else {
			out = append(out, span{start, stop})
		}
		i = stop
	}
	return out
}

// writeHunk writes one hunk: its header and its lines.
func writeHunk(b *strings.Builder, ops []op, oldLines, newLines, oldShown, newShown []string) {
	oldStart, newStart := ops[0].old, ops[0].new
	var oldCount, newCount int
	for _, o := range ops {
		if o.kind != '+' {
			oldCount++
		}
		if o.kind != '-' {
			newCount++
		}
	}
	fmt.Fprintf(b, "@@ -%s +%s @@\n", rangeOf(oldStart, oldCount), rangeOf(newStart, newCount))
	for _, o := range ops {
		var line, orig string
		switch o.kind {
		case '-':
			line, orig = oldShown[o.old], oldLines[o.old]
		default:
			line, orig = newShown[o.new], newLines[o.new]
		}
		b.WriteByte(o.kind)
		b.WriteString(strings.TrimSuffix(line, "\n"))
		b.WriteByte('\n')
		if !strings.HasSuffix(orig, "\n") {
			b.WriteString(noNewline + "\n")
		}
	}
}

// rangeOf writes a hunk's range as git does: "start,count" from 1, the
// count left out when it is 1, and the line before for an empty range.
func rangeOf(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
