package structs

import (
	"fmt"
	"strings"
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
