package structs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGlob_Dialect checks the rules of the one glob dialect: "*" matches
// any run of characters, "/" included, and every other character only
// itself.
func TestGlob_Dialect(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true}, {"*", "web", true}, {"web", "web", true}, {"web", "web2", false},
		{"web-*", "web-api", true}, {"web-*", "web-", true}, {"web-*", "web", false},
		{"*-api", "web-api", true}, {"*-api", "web-apix", false}, {"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false}, {"**", "x", true}, {"a*a*a", "aaaa", true}, {"a*a*a", "aa", false},
		// "*" crosses "/", as in a dispatched job's ID.
		{"batch*", "batch/dispatch-1", true}, {"*/dispatch-*", "batch/dispatch-1", true},
		// Nothing else is special.
		{"web-?", "web-1", false}, {"web-?", "web-?", true},
		{"[ab]", "a", false}, {"[ab]", "[ab]", true},
		{`web\*`, `web\x`, true}, {`web\*`, "web*", false},
		// Case matters.
		{"Web-*", "web-api", false},
	}
	for _, c := range cases {
		if got := Glob(c.pattern, c.name); got != c.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestGlobAny_EmptyListMatchesAll(t *testing.T) {
	if !GlobAny(nil, "anything") {
		t.Error("an empty list does not match")
	}
	if !GlobAny([]string{"api", "web-*"}, "web-1") || GlobAny([]string{"api", "web-*"}, "db") {
		t.Error("a list matches as none or all of its globs")
	}
}

func TestCheckGlob_RefusesEmptyAndLong(t *testing.T) {
	for _, g := range []string{"", strings.Repeat("x", MaxGlobLen+1)} {
		if err := CheckGlob(g); !errors.Is(err, ErrBadGlob) {
			t.Errorf("CheckGlob of %d characters = %v, want ErrBadGlob", len(g), err)
		}
	}
	for _, g := range []string{"*", "web-?", strings.Repeat("x", MaxGlobLen)} {
		if err := CheckGlob(g); err != nil {
			t.Errorf("CheckGlob(%q): %v", g, err)
		}
	}
}

func TestCheckText_LimitNamesField(t *testing.T) {
	if err := CheckText("reason", strings.Repeat("x", MaxTextLen)); err != nil {
		t.Fatalf("text at the limit: %v", err)
	}
	err := CheckText("reason", strings.Repeat("x", MaxTextLen+1))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "reason: at most 4096 characters") {
		t.Fatalf("text over the limit: %v", err)
	}
}

func TestShortID_FirstEight(t *testing.T) {
	for id, want := range map[string]string{"": "", "abc": "abc", "12345678": "12345678", "123456789abc": "12345678"} {
		if got := ShortID(id); got != want {
			t.Errorf("ShortID(%q) = %q, want %q", id, got, want)
		}
	}
}

func TestSplitList_TrimsAndDropsEmptyItems(t *testing.T) {
	for in, want := range map[string][]string{
		"":                nil,
		" , ,":            nil,
		"web":             {"web"},
		" web , api,,db ": {"web", "api", "db"},
	} {
		if got := SplitList(in); !slices.Equal(got, want) {
			t.Errorf("SplitList(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSleep_WaitsOrStopsWithItsContext(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a wait that ran its course reports false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if Sleep(ctx, time.Hour) {
		t.Fatal("a wait on a done context reports true")
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("a wait on a done context took %s", d)
	}
}

// TestBackoff_DoublesToMaxWithJitter checks the waits double from Min up
// to Max, spread by the jitter, and start over on Reset.
func TestBackoff_DoublesToMaxWithJitter(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 30 * time.Second}
	var got []time.Duration
	for range 7 {
		got = append(got, b.Next())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("waits %v, want %v seconds", got, want)
		}
	}
	b.Reset()
	if d := b.Next(); d != time.Second {
		t.Fatalf("after Reset: %s, want 1s", d)
	}
	if d := b.Delay(1 << 40); d != 30*time.Second {
		t.Fatalf("a huge attempt number: %s, want the maximum", d)
	}
	if d := b.Delay(0); d != 0 {
		t.Fatalf("attempt 0: %s, want 0", d)
	}
	j := Backoff{Min: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for n := 1; n <= 10; n++ {
		base := min(j.Min<<(n-1), j.Max)
		for range 20 {
			d := j.Delay(n)
			seen[d] = true
			if d < base/2 || d > base*3/2 {
				t.Fatalf("retry %d: %s outside [%s, %s]", n, d, base/2, base*3/2)
			}
		}
	}
	if len(seen) < 10 {
		t.Errorf("only %d distinct waits: no jitter", len(seen))
	}
}
