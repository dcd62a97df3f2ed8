package command

import (
	"strings"
	"testing"
	"time"
)

func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                   "0s",
		1400 * time.Millisecond:             "1s",
		59 * time.Second:                    "59s",
		3*time.Minute + 12*time.Second:      "3m12s",
		2*time.Hour + 5*time.Minute:         "2h5m",
		76*time.Hour + 30*time.Minute:       "3d4h",
		24*time.Hour - 500*time.Millisecond: "1d0h",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestTimeAgoAndSince(t *testing.T) {
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	m := &runner{now: func() time.Time { return now }}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.timeAgo(now.Add(-90*time.Second).In(paris)), "2030-05-06T07:06:39Z (1m30s ago)"; got != want {
		t.Errorf("timeAgo = %q, want %q (UTC whatever the zone)", got, want)
	}
	if got := m.ago(now.Add(time.Minute)); got != "in 1m0s" {
		t.Errorf("ago of a future time = %q", got)
	}
	if got := m.timeAgo(time.Time{}); got != "-" {
		t.Errorf("timeAgo of zero = %q", got)
	}
	for in, want := range map[string]string{
		"":                          "",
		"42":                        "42",
		"2030-05-06T09:00:00+02:00": "2030-05-06T07:00:00Z",
		"2h":                        "2030-05-06T05:08:09Z",
	} {
		got, err := m.resolveSince(in)
		if err != nil || got != want {
			t.Errorf("resolveSince(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-1h", "1.5"} {
		if _, err := m.resolveSince(bad); err == nil {
			t.Errorf("resolveSince(%q): no error", bad)
		}
	}
}

// TestTermSafe: what a commit message or a comment could carry to a
// terminal (an escape sequence, a carriage return, a C1 control, DEL) is
// dropped; text, tabs, newlines and other UTF-8 characters stay.
func TestTermSafe(t *testing.T) {
	var b strings.Builder
	in := "Bump web\x1b[2J\x1b]0;owned\x07 to v2\r\nAda \u009b31m Lovelace\x7f\tété 日本\n"
	n, err := termSafe{&b}.Write([]byte(in))
	if err != nil || n != len(in) {
		t.Fatalf("wrote %d of %d: %v", n, len(in), err)
	}
	if want := "Bump web[2J]0;owned to v2\nAda 31m Lovelace\tété 日本\n"; b.String() != want {
		t.Fatalf("wrote %q, want %q", b.String(), want)
	}
}
