package command

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nops-dev/nops/structs"
)

// formatTime renders t in RFC 3339 UTC, "-" when zero.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// timeAgo renders t in RFC 3339 UTC followed by how long ago it was.
func (m *runner) timeAgo(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return formatTime(t) + " (" + m.ago(t) + ")"
}

// ago renders how long ago t was, "3m12s ago", or "in 5s" for a time ahead.
func (m *runner) ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := m.now().Sub(t)
	if d < 0 {
		return "in " + humanDuration(-d)
	}
	return humanDuration(d) + " ago"
}

// humanDuration renders d with its two largest units: 45s, 3m12s, 2h5m,
// 3d4h.
func humanDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	days := int(d.Hours()) / 24
	return fmt.Sprintf("%dd%dh", days, int(d.Hours())%24)
}

// shortID returns the first 8 characters of an ID unless verbose.
func shortID(id string, verbose bool) string {
	if verbose {
		return id
	}
	return structs.ShortID(id)
}

// shortCommit returns the first 12 characters of a commit hash.
func shortCommit(c string) string {
	if len(c) <= 12 {
		return c
	}
	return c[:12]
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// list renders a list of strings, "*" when empty (matches all).
func globList(l []string) string {
	if len(l) == 0 {
		return "*"
	}
	return strings.Join(l, ",")
}

// yesNo renders a bool.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// oneLine collapses whitespace so a message fits one table cell.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// termSafe writes what it is given without the control characters that
// text from a server could carry to a terminal: ESC and the other C0
// controls but tab and newline, carriage return (it rewrites a line),
// DEL, and the C1 controls (U+0080 to U+009F). A commit message, a
// comment or an error then cannot move the cursor or repaint the screen.
// JSON output is unchanged: its strings escape every control character.
type termSafe struct{ w io.Writer }

func (t termSafe) Write(p []byte) (int, error) {
	clean := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\t' || c == '\n':
		case c < 0x20 || c == 0x7f:
			continue
		case c == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			i++
			continue
		}
		clean = append(clean, c)
	}
	if _, err := t.w.Write(clean); err != nil {
		return 0, err
	}
	return len(p), nil
}
