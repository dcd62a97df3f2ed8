package structs

import "fmt"

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
