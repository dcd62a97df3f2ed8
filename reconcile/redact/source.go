package redact

import (
	"regexp"
	"strings"
)

// Source redacts the text of a job file or a variables file (HCL or JSON)
// with the rules Diff applies to a plan diff, for the file diff of a
// deployment. It keeps the text's lines: line i of the result is line i of
// text with what looks secret replaced, so that a diff of the originals
// can show the redacted lines in their place. In it:
//
//   - the value of every attribute whose key looks secret is replaced by
//     "(redacted)", on one line (`DB_PASSWORD = "pw"`, `"api_token": "t"`,
//     several on a line) or over several (a heredoc, an object or a list);
//   - everything inside a block whose type or label looks secret (`auth {`)
//     is replaced, but its closing brackets; in a variable block whose
//     name looks secret (`variable "db_password" {`), its default;
//   - a template's text (`data`, or EmbeddedTmpl in JSON) is replaced
//     whatever its key, as Diff replaces it;
//   - in every other value, the user info of a URL, the value of a flag
//     whose name looks secret, and the list element after a secret flag on
//     its own (`args = ["--token", "t"]`) are replaced.
//
// An empty string value stays empty: it reveals nothing. Comments are
// redacted as values are (URLs and flags), not as keys.
func (r *Redactor) Source(text string) string {
	lines := strings.Split(text, "\n")
	s := &sourceState{r: r}
	for i, line := range lines {
		lines[i] = s.line(line)
	}
	return strings.Join(lines, "\n")
}

// sourceState is what Source carries from one line to the next.
type sourceState struct {
	r *Redactor
	// heredoc is the closing marker of the heredoc the line is in;
	// heredocSecret says its text is replaced.
	heredoc       string
	heredocSecret bool
	// depth counts the brackets open in a secret block or value; every
	// line is replaced until they close.
	depth int
	// flagOpen says the last list element was a secret flag on its own:
	// the next element is its value.
	flagOpen bool
	// varDepth counts the brackets open in a variable block whose name
	// looks secret: its default is replaced.
	varDepth int
}

// variableBlock is the block that declares a variable of a job file.
const variableBlock = "variable"

var (
	// attrLine is a line that starts with an attribute: indent, key
	// (quoted or not), '=' or ':', and the value.
	attrLine = regexp.MustCompile(`^(\s*)("[^"]*"|[A-Za-z0-9_.\-/]+)(\s*[=:]\s*)(.*)$`)
	// blockLine is a block header: type, labels, '{'.
	blockLine = regexp.MustCompile(`^\s*([A-Za-z0-9_\-]+)((?:\s+"[^"]*"|\s+[A-Za-z0-9_\-]+)*)\s*\{\s*$`)
	// heredocStart is a value that opens a heredoc.
	heredocStart = regexp.MustCompile(`^<<-?([A-Za-z_][A-Za-z0-9_]*)\s*$`)
	// quoted is a quoted string.
	quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
)

// redactedValue replaces a secret value in a file.
const redactedValue = `"` + Redacted + `"`

// templateKeys are the keys of a template's text, always redacted.
var templateKeys = []string{"data", "embeddedtmpl", "embedded_tmpl"}

func (s *sourceState) line(line string) string {
	switch {
	case s.heredoc != "":
		return s.inHeredoc(line)
	case s.depth > 0:
		return s.inSecret(line)
	}
	if m := blockLine.FindStringSubmatch(line); m != nil && s.secretBlock(m[1], m[2]) {
		if m[1] == variableBlock && s.varDepth == 0 && !s.r.matches(m[1]) {
			// A variable's type and description say nothing secret:
			// only its default is.
			s.varDepth = 1
			return line
		}
		s.depth = 1
		return line
	}
	if m := attrLine.FindStringSubmatch(line); m != nil {
		secretDefault := s.varDepth > 0 && m[2] == "default"
		if out, ok := s.attribute(m[1], m[2], m[3], m[4], secretDefault); ok {
			if s.varDepth > 0 && !secretDefault {
				s.varDepth = max(s.varDepth+brackets(line), 0)
			}
			return out
		}
	}
	if s.varDepth > 0 {
		s.varDepth = max(s.varDepth+brackets(line), 0)
	}
	return s.values(line)
}

// secretBlock reports whether a block's type or one of its labels looks
// secret.
func (s *sourceState) secretBlock(typ, labels string) bool {
	if s.r.matches(typ) {
		return true
	}
	for _, l := range strings.Fields(labels) {
		if s.r.matches(strings.Trim(l, `"`)) {
			return true
		}
	}
	return false
}

// attribute redacts a line that starts with an attribute whose value is
// secret, or opens a heredoc or a multi-line value. It reports false for
// a line the inline rules (values) redact.
func (s *sourceState) attribute(indent, key, sep, value string, force bool) (string, bool) {
	k := strings.Trim(key, `"`)
	secret := force || s.r.matches(k) || isTemplateKey(k)
	if m := heredocStart.FindStringSubmatch(value); m != nil {
		s.heredoc, s.heredocSecret = m[1], secret
		return indent + key + sep + value, true
	}
	if !secret {
		return "", false
	}
	v := strings.TrimSpace(value)
	if v == "" || v == `""` || v == `"",` {
		return indent + key + sep + value, true
	}
	// A value that goes on past its line (an open block, list, call or
	// interpolation) is redacted to its end, whatever it starts with.
	if depth := brackets(v); depth > 0 {
		s.depth = depth
		if v[0] == '{' || v[0] == '[' {
			return indent + key + sep + v[:1], true
		}
		return indent + key + sep + redactedValue, true
	}
	if v[0] == '{' || v[0] == '[' {
		v = strings.TrimRight(v, " \t")
		comma := ""
		if strings.HasSuffix(v, ",") {
			comma = ","
		}
		return indent + key + sep + redactedValue + comma, true
	}
	return indent + key + sep + redactedValue + closing(v), true
}

// inHeredoc redacts a line of a heredoc, or ends it.
func (s *sourceState) inHeredoc(line string) string {
	if strings.TrimSpace(line) == s.heredoc {
		s.heredoc = ""
		return line
	}
	if s.heredocSecret {
		return maskLine(line)
	}
	return s.values(line)
}

// inSecret redacts a line inside a secret block or value: only its
// closing brackets (and the quote after them) stay, and the key of an
// attribute.
func (s *sourceState) inSecret(line string) string {
	s.depth = max(s.depth+brackets(line), 0)
	trimmed := strings.TrimSpace(line)
	if strings.Trim(trimmed, "}]),\"") == "" {
		return line
	}
	if blockLine.MatchString(line) {
		return line
	}
	indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
	if m := attrLine.FindStringSubmatch(line); m != nil {
		v := strings.TrimSpace(m[4])
		if hd := heredocStart.FindStringSubmatch(v); hd != nil {
			s.heredoc, s.heredocSecret = hd[1], true
			return line
		}
		if v != "" && (v[0] == '{' || v[0] == '[') && brackets(v) > 0 {
			return m[1] + m[2] + m[3] + v[:1]
		}
		return m[1] + m[2] + m[3] + redactedValue + closing(v)
	}
	return indent + redactedValue + closing(trimmed)
}

// values redacts what looks secret inside a line that is no secret as a
// whole: attributes on it whose key looks secret, template texts, URLs'
// user info, secret flags' values, and the list element after a secret
// flag on its own.
func (s *sourceState) values(line string) string {
	toks := tokens(line)
	var b strings.Builder
	last := 0
	for i := 0; i+2 < len(toks); i++ {
		k, sep, v := toks[i], toks[i+1], toks[i+2]
		if (k.kind != tokQuoted && k.kind != tokWord) || sep.kind != tokSep || (v.kind != tokQuoted && v.kind != tokWord) {
			continue
		}
		key := strings.Trim(line[k.start:k.end], `"`)
		if !(s.r.matches(key) || isTemplateKey(key)) || line[v.start:v.end] == `""` {
			continue
		}
		b.WriteString(line[last:v.start])
		b.WriteString(redactedValue)
		last = v.end
		i += 2
	}
	b.WriteString(line[last:])
	line = b.String()
	line = quoted.ReplaceAllStringFunc(line, func(q string) string {
		if s.flagOpen {
			s.flagOpen = false
			if q == `""` {
				return q
			}
			return redactedValue
		}
		inner := q[1 : len(q)-1]
		if s.r.isSecretFlag(inner) {
			s.flagOpen = true
			return q
		}
		return `"` + s.r.Value(inner) + `"`
	})
	return s.r.Value(line)
}

// Token kinds of a line (tokens).
const (
	tokQuoted = iota
	tokWord
	tokSep
	tokOther
)

type token struct{ kind, start, end int }

// tokens splits a line into quoted strings, words, separators ('=' and
// ':') and other characters, up to a comment.
func tokens(line string) []token {
	var out []token
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '#' || strings.HasPrefix(line[i:], "//"):
			return out
		case c == '"':
			j := i + 1
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(line))
			out = append(out, token{tokQuoted, i, j})
			i = j
		case isWordByte(c):
			j := i
			for j < len(line) && isWordByte(line[j]) && !strings.HasPrefix(line[j:], "//") {
				j++
			}
			out = append(out, token{tokWord, i, j})
			i = j
		case c == '=' || c == ':':
			out = append(out, token{tokSep, i, i + 1})
			i++
		default:
			out = append(out, token{tokOther, i, i + 1})
			i++
		}
	}
	return out
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_.-/+@$", c) >= 0
}

// brackets returns the brackets a text opens less those it closes,
// outside quoted strings; an interpolation (${ or %{) inside a string
// counts as one, so a string whose interpolation spans lines is open.
func brackets(text string) int {
	// stack holds what is open: a string ('"'), a bracket, or an
	// interpolation ('$') inside a string, which counts as a bracket.
	n, escaped := 0, false
	var stack []byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		if len(stack) > 0 && stack[len(stack)-1] == '"' {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				stack = stack[:len(stack)-1]
			case (c == '$' || c == '%') && i+1 < len(text) && text[i+1] == '{':
				stack = append(stack, '$')
				n++
				i++
			}
			continue
		}
		switch c {
		case '"':
			stack = append(stack, '"')
		case '{', '[', '(':
			stack = append(stack, c)
			n++
		case '}', ']', ')':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			n--
		}
	}
	return n
}

// maskLine replaces a line's text, keeping its indentation; an empty line
// stays empty.
func maskLine(line string) string {
	trimmed := strings.TrimLeft(line, " \t")
	if strings.TrimSpace(trimmed) == "" {
		return line
	}
	return line[:len(line)-len(trimmed)] + Redacted
}

// closing returns what follows a value on its line: a JSON comma, the
// braces of the blocks the line closes.
func closing(v string) string {
	return v[len(strings.TrimRight(v, "}], \t")):]
}

func isTemplateKey(k string) bool {
	lower := strings.ToLower(k)
	for _, t := range templateKeys {
		if lower == t {
			return true
		}
	}
	return false
}
