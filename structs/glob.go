package structs

import (
	"errors"
	"fmt"
	"strings"
)

// MaxGlobLen bounds a namespace or job glob: twice Nomad's longest
// namespace name (128), room for any real name plus wildcards, and
// matching stays cheap.
const MaxGlobLen = 256

// Glob reports whether name matches pattern. It is the one glob dialect of
// Nops, used by ACL rules, sync window selectors and notification targets:
// "*" matches any run of characters, "/" included, and none; every other
// character, "?", "[" and "\" included, matches only itself. Matching is
// case-sensitive and linear in practice.
func Glob(pattern, name string) bool {
	if pattern == "*" {
		return true
	}
	if !strings.Contains(pattern, "*") {
		return pattern == name
	}
	// Iterative matching with one backtrack point.
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// GlobAny reports whether name matches any of globs; an empty list
// matches every name.
func GlobAny(globs []string, name string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if Glob(g, name) {
			return true
		}
	}
	return false
}

// ErrBadGlob is wrapped by CheckGlob's errors.
var ErrBadGlob = errors.New("bad glob")

// CheckGlob returns an error wrapping ErrBadGlob when g cannot be a glob:
// it is empty or longer than MaxGlobLen. Every other string is a glob.
func CheckGlob(g string) error {
	if g == "" {
		return fmt.Errorf("%w: must not be empty", ErrBadGlob)
	}
	if len(g) > MaxGlobLen {
		return fmt.Errorf("%w of %d characters: at most %d", ErrBadGlob, len(g), MaxGlobLen)
	}
	return nil
}
