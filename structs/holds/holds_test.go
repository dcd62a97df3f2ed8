package holds

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

func window(name string, kind structs.WindowKind, schedule, duration, tz string) *structs.SyncWindow {
	return &structs.SyncWindow{Name: name, Kind: kind, Schedule: schedule, Duration: duration, Timezone: tz}
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		w    *structs.SyncWindow
		want []string // substrings, one per expected problem, in order
	}{
		{"valid deny", window("freeze", structs.WindowDeny, "0 22 * * 5", "60h", "Europe/Berlin"), nil},
		{"valid allow, empty zone is UTC", window("office.hours_1", structs.WindowAllow, "0 9 * * 1-5", "8h", ""), nil},
		{"descriptor", window("nightly", structs.WindowDeny, "@daily", "1h", "UTC"), nil},
		{"leap day fires", window("leap", structs.WindowDeny, "0 0 29 2 *", "1h", "UTC"), nil},
		{"globs", &structs.SyncWindow{Name: "g", Kind: structs.WindowDeny, Schedule: "0 * * * *", Duration: "1m",
			Namespaces: []string{"prod-*", "default"}, Jobs: []string{"web?", "api-[a-c"}}, nil},
		{"everything wrong", &structs.SyncWindow{Name: "bad name", Kind: "maybe", Schedule: "0 9 * *", Duration: "soon",
			Timezone: "Mars/Olympus", Namespaces: []string{""}, Jobs: []string{strings.Repeat("x", 257)}},
			[]string{`name: "bad name"`, `kind: must be allow or deny, not "maybe"`, `schedule: "0 9 * *" is not a 5-field cron`,
				`duration: "soon" is not a duration`, `timezone: "Mars/Olympus" is not an IANA time zone`,
				`namespaces: bad glob: must not be empty`, `jobs: bad glob of 257 characters: at most 256`}},
		{"empty name and schedule", window("", structs.WindowDeny, "", "1h", ""),
			[]string{"name: must not be empty", "schedule: must not be empty"}},
		{"long name", window(strings.Repeat("a", 129), structs.WindowDeny, "0 * * * *", "1h", ""), []string{"name: "}},
		{"six fields", window("w", structs.WindowDeny, "0 0 9 * * *", "1h", ""), []string{"schedule: "}},
		{"interval", window("w", structs.WindowDeny, "@every 1h", "30m", ""), []string{"is an interval"}},
		{"zone in schedule", window("w", structs.WindowDeny, "CRON_TZ=Asia/Tokyo 0 9 * * *", "1h", ""),
			[]string{"use the timezone field"}},
		{"TZ in schedule", window("w", structs.WindowDeny, "TZ=UTC 0 9 * * *", "1h", ""), []string{"use the timezone field"}},
		{"never fires", window("w", structs.WindowDeny, "0 0 31 2 *", "1h", ""), []string{"never fires"}},
		{"zero duration", window("w", structs.WindowDeny, "0 * * * *", "0s", ""), []string{"must be more than 0"}},
		{"negative duration", window("w", structs.WindowDeny, "0 * * * *", "-1h", ""), []string{"must be more than 0"}},
		{"too long", window("w", structs.WindowDeny, "0 * * * *", "745h", ""), []string{"at most 744h"}},
		{"local zone", window("w", structs.WindowDeny, "0 * * * *", "1h", "Local"), []string{`timezone: "Local" is the server's own zone`}},
		{"a bracket is a character", &structs.SyncWindow{Name: "w", Kind: structs.WindowDeny, Schedule: "0 * * * *", Duration: "1h",
			Jobs: []string{"web["}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Validate(tc.w)
			if len(got) != len(tc.want) {
				t.Fatalf("problems = %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, want := range tc.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
				}
			}
			// Validate accepts exactly what Active can evaluate.
			_, err := Active(tc.w, utc("2024-06-01T12:00:00Z"))
			if (err == nil) != (len(tc.want) == 0) {
				t.Fatalf("Active error = %v with problems %q", err, got)
			}
		})
	}
}

// TestMatches_GlobDialect checks that window selectors match as ACL rules
// and notification targets do (structs.Glob): "*" crosses "/", as in a
// dispatched job's ID, and "?" and "[" are characters like any other.
func TestMatches_GlobDialect(t *testing.T) {
	cases := []struct {
		jobs  []string
		jobID string
		want  bool
	}{
		{nil, "anything", true},
		{[]string{"batch*"}, "batch/dispatch-1700000000-abcd", true},
		{[]string{"web?"}, "web1", false},
		{[]string{"web?"}, "web?", true},
		{[]string{"api-[ab]"}, "api-a", false},
		{[]string{"api", "web-*"}, "web-1", true},
	}
	for _, c := range cases {
		w := &structs.SyncWindow{Name: "w", Kind: structs.WindowDeny, Namespaces: []string{"prod-*"}, Jobs: c.jobs}
		if got := Matches(w, "", "prod-eu", c.jobID); got != c.want {
			t.Errorf("jobs %q match %q: %t, want %t", c.jobs, c.jobID, got, c.want)
		}
	}
	if Matches(&structs.SyncWindow{Namespaces: []string{"prod-*"}}, "", "dev", "web") {
		t.Error("a namespace selector matches another namespace")
	}
}

func TestActive(t *testing.T) {
	// Weekdays 09:00-17:00 UTC.
	office := window("office", structs.WindowAllow, "0 9 * * 1-5", "8h", "UTC")
	// 2024-06-03 is a Monday.
	cases := []struct {
		at   string
		want bool
	}{
		{"2024-06-03T08:59:59Z", false},
		{"2024-06-03T09:00:00Z", true}, // a start opens the window
		{"2024-06-03T12:00:00Z", true},
		{"2024-06-03T16:59:59Z", true},
		{"2024-06-03T17:00:00Z", false}, // and start+duration closes it
		{"2024-06-08T12:00:00Z", false}, // Saturday
		{"2024-06-07T16:30:00Z", true},  // Friday
	}
	for _, tc := range cases {
		got, err := Active(office, utc(tc.at))
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Active(office, %s) = %v, want %v", tc.at, got, tc.want)
		}
	}
	// A window whose duration spans the next start stays active across it.
	long := window("long", structs.WindowDeny, "0 */6 * * *", "7h", "UTC")
	for _, at := range []string{"2024-06-03T05:59:00Z", "2024-06-03T06:00:00Z", "2024-06-03T06:30:00Z"} {
		if ok, _ := Active(long, utc(at)); !ok {
			t.Errorf("Active(long, %s) = false", at)
		}
	}
	// A duration of a month from a yearly start.
	yearly := window("yearly", structs.WindowDeny, "0 0 1 12 *", "744h", "UTC")
	if ok, _ := Active(yearly, utc("2024-12-31T23:59:00Z")); !ok {
		t.Error("yearly window inactive on Dec 31")
	}
	if ok, _ := Active(yearly, utc("2025-01-01T00:00:00Z")); ok {
		t.Error("yearly window active after 744h")
	}
}

func TestActiveTimezones(t *testing.T) {
	// 09:00-17:00 in Berlin: UTC+2 in summer, UTC+1 in winter.
	berlin := window("berlin", structs.WindowAllow, "0 9 * * 1-5", "8h", "Europe/Berlin")
	tokyo := window("tokyo", structs.WindowAllow, "0 9 * * 1-5", "8h", "Asia/Tokyo")
	cases := []struct {
		w    *structs.SyncWindow
		at   string
		want bool
	}{
		{berlin, "2024-07-01T06:59:00Z", false},
		{berlin, "2024-07-01T07:00:00Z", true},
		{berlin, "2024-07-01T14:59:00Z", true},
		{berlin, "2024-07-01T15:00:00Z", false},
		{berlin, "2024-01-08T07:30:00Z", false},
		{berlin, "2024-01-08T08:00:00Z", true},
		{berlin, "2024-01-08T15:59:00Z", true},
		{berlin, "2024-01-08T16:00:00Z", false},
		// Monday 09:00 in Tokyo is Monday 00:00 UTC; Sunday 23:59 UTC is
		// still before it.
		{tokyo, "2024-06-02T23:59:00Z", false},
		{tokyo, "2024-06-03T00:00:00Z", true},
		// Friday 17:00 in Tokyo is Friday 08:00 UTC.
		{tokyo, "2024-06-07T07:59:00Z", true},
		{tokyo, "2024-06-07T08:00:00Z", false},
	}
	for _, tc := range cases {
		got, err := Active(tc.w, utc(tc.at))
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Active(%s, %s) = %v, want %v", tc.w.Name, tc.at, got, tc.want)
		}
	}
}

func TestActiveDaylightSaving(t *testing.T) {
	// New York: on 2024-03-10 clocks jump from 02:00 EST (07:00 UTC) to
	// 03:00 EDT; on 2024-11-03 they go back from 02:00 EDT (06:00 UTC) to
	// 01:00 EST.
	t.Run("a start in the gap happens at the jump", func(t *testing.T) {
		w := window("gap", structs.WindowDeny, "30 2 * * *", "1h", "America/New_York")
		cases := []struct {
			at   string
			want bool
		}{
			{"2024-03-09T07:30:00Z", true},  // 02:30 EST the day before
			{"2024-03-10T06:59:00Z", false}, // 01:59 EST
			{"2024-03-10T07:00:00Z", true},  // 03:00 EDT: the jump
			{"2024-03-10T07:59:00Z", true},
			{"2024-03-10T08:00:00Z", false}, // an hour of elapsed time later
			{"2024-03-11T06:30:00Z", true},  // 02:30 EDT the day after
		}
		for _, tc := range cases {
			if got, _ := Active(w, utc(tc.at)); got != tc.want {
				t.Errorf("Active(%s) = %v, want %v", tc.at, got, tc.want)
			}
		}
	})
	t.Run("a start in the repeated hour happens once", func(t *testing.T) {
		w := window("repeat", structs.WindowDeny, "30 1 * * *", "30m", "America/New_York")
		first, _ := Active(w, utc("2024-11-03T05:45:00Z"))  // 01:45 EDT
		second, _ := Active(w, utc("2024-11-03T06:45:00Z")) // 01:45 EST
		if !first || second {
			t.Fatalf("active at 01:45 EDT = %v, at 01:45 EST = %v; want only the first", first, second)
		}
		b := NextBoundary([]*structs.SyncWindow{w}, utc("2024-11-03T06:00:00Z"))
		if want := utc("2024-11-04T06:30:00Z"); !b.Equal(want) {
			t.Fatalf("next boundary after the first run = %s, want %s", b, want)
		}
	})
	t.Run("duration is elapsed time", func(t *testing.T) {
		// From midnight for 24h: across the jump the window ends at 01:00
		// local time the next day.
		w := window("day", structs.WindowDeny, "0 0 10 3 *", "24h", "America/New_York")
		if ok, _ := Active(w, utc("2024-03-11T04:30:00Z")); !ok { // 00:30 EDT on the 11th
			t.Error("inactive 23h30m after the start")
		}
		if ok, _ := Active(w, utc("2024-03-11T05:00:00Z")); ok { // 01:00 EDT
			t.Error("active 24h after the start")
		}
	})
}

func TestClosed(t *testing.T) {
	now := utc("2024-06-03T12:00:00Z") // Monday noon
	denyNow := window("deny-now", structs.WindowDeny, "0 12 * * *", "1h", "")
	denyLater := window("deny-later", structs.WindowDeny, "0 20 * * *", "1h", "")
	allowNow := window("allow-now", structs.WindowAllow, "0 9 * * 1-5", "8h", "")
	allowLater := window("allow-later", structs.WindowAllow, "0 22 * * *", "2h", "")
	denyWeb := window("deny-web", structs.WindowDeny, "0 12 * * *", "1h", "")
	denyWeb.Jobs = []string{"web*"}
	allowProd := window("allow-prod", structs.WindowAllow, "0 22 * * *", "2h", "")
	allowProd.Namespaces = []string{"prod-*"}

	cases := []struct {
		name       string
		windows    []*structs.SyncWindow
		ns, job    string
		wantClosed bool
		wantReason string
	}{
		{"no windows", nil, "default", "web", false, ""},
		{"active deny", []*structs.SyncWindow{denyNow}, "default", "web", true, "deny window deny-now is active"},
		{"inactive deny", []*structs.SyncWindow{denyLater}, "default", "web", false, ""},
		{"active allow", []*structs.SyncWindow{allowNow}, "default", "web", false, ""},
		{"inactive allow", []*structs.SyncWindow{allowLater}, "default", "web", true, "outside allow window allow-later"},
		{"one of two allows active", []*structs.SyncWindow{allowLater, allowNow}, "default", "web", false, ""},
		{"deny wins over an active allow listed first", []*structs.SyncWindow{allowNow, denyNow}, "default", "web", true, "deny window deny-now is active"},
		{"deny wins over an active allow listed last", []*structs.SyncWindow{denyNow, allowNow}, "default", "web", true, "deny window deny-now is active"},
		{"two denies", []*structs.SyncWindow{denyWeb, denyNow}, "default", "web", true, "deny windows deny-now, deny-web are active"},
		{"job glob matches", []*structs.SyncWindow{denyWeb}, "default", "web-frontend", true, "deny window deny-web is active"},
		{"job glob does not match", []*structs.SyncWindow{denyWeb}, "default", "api", false, ""},
		{"namespace glob matches", []*structs.SyncWindow{allowProd}, "prod-1", "api", true, "outside allow window allow-prod"},
		{"namespace glob does not match", []*structs.SyncWindow{allowProd}, "dev-1", "api", false, ""},
		{"an allow that does not match leaves the job open", []*structs.SyncWindow{allowProd, denyLater}, "default", "api", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			closed, reason := Closed(tc.windows, tc.ns, tc.job, now)
			if closed != tc.wantClosed || reason != tc.wantReason {
				t.Fatalf("Closed = %v %q, want %v %q", closed, reason, tc.wantClosed, tc.wantReason)
			}
		})
	}
}

func TestNextBoundary(t *testing.T) {
	now := utc("2024-06-03T12:00:00Z") // Monday noon
	cases := []struct {
		name    string
		windows []*structs.SyncWindow
		at      time.Time
		want    string // empty: none
	}{
		{"none", nil, now, ""},
		{"inactive: its next start", []*structs.SyncWindow{window("w", structs.WindowDeny, "0 20 * * *", "1h", "")}, now, "2024-06-03T20:00:00Z"},
		{"active: its end", []*structs.SyncWindow{window("w", structs.WindowAllow, "0 9 * * 1-5", "8h", "")}, now, "2024-06-03T17:00:00Z"},
		{"at a start: its end", []*structs.SyncWindow{window("w", structs.WindowDeny, "0 12 * * *", "30m", "")}, now, "2024-06-03T12:30:00Z"},
		{"at an end: the next start", []*structs.SyncWindow{window("w", structs.WindowDeny, "0 11 * * *", "1h", "")}, now, "2024-06-04T11:00:00Z"},
		{"earliest of several", []*structs.SyncWindow{
			window("a", structs.WindowDeny, "0 20 * * *", "1h", ""),
			window("b", structs.WindowAllow, "0 9 * * 1-5", "8h", ""),
		}, now, "2024-06-03T17:00:00Z"},
		{"overlapping starts extend the period", []*structs.SyncWindow{window("w", structs.WindowDeny, "0 */6 * * *", "7h", "")}, now,
			// 12:00 starts one that lasts to 19:00; 18:00 starts another to
			// 01:00; ... every start overlaps the last, so it never closes.
			""},
		{"touching occurrences form one period", []*structs.SyncWindow{window("w", structs.WindowDeny, "0 9,10,11,12 * * *", "1h", "")}, now, "2024-06-03T13:00:00Z"},
		{"a zone", []*structs.SyncWindow{window("w", structs.WindowDeny, "0 22 * * *", "1h", "Asia/Kolkata")}, now, "2024-06-03T16:30:00Z"},
		{"a daylight saving gap", []*structs.SyncWindow{window("w", structs.WindowDeny, "30 2 * * *", "1h", "America/New_York")},
			utc("2024-03-10T06:00:00Z"), "2024-03-10T07:00:00Z"},
		{"invalid windows are skipped", []*structs.SyncWindow{window("w", structs.WindowDeny, "nope", "1h", "")}, now, ""},
		{"beyond a year", []*structs.SyncWindow{window("w", structs.WindowDeny, "0 0 29 2 *", "1h", "")}, utc("2024-03-01T00:00:00Z"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NextBoundary(tc.windows, tc.at)
			if tc.want == "" {
				if !got.IsZero() {
					t.Fatalf("NextBoundary = %s, want none", got)
				}
				return
			}
			if want := utc(tc.want); !got.Equal(want) {
				t.Fatalf("NextBoundary = %s, want %s", got.UTC(), want)
			}
		})
	}
}

// TestBoundariesAgreeWithActive walks a week in minutes across a daylight
// saving change: Active changes exactly at the boundaries NextBoundary
// announces.
func TestBoundariesAgreeWithActive(t *testing.T) {
	windows := []*structs.SyncWindow{
		window("gap", structs.WindowDeny, "30 2 * * *", "45m", "America/New_York"),
		window("office", structs.WindowAllow, "0 9 * * 1-5", "8h", "Europe/Berlin"),
		window("overlap", structs.WindowDeny, "0 */5 * * *", "6h", "Asia/Kolkata"),
	}
	for _, w := range windows {
		start := utc("2024-03-08T00:00:00Z")
		active, _ := Active(w, start)
		next := NextBoundary([]*structs.SyncWindow{w}, start)
		for at := start.Add(time.Minute); at.Before(start.Add(7 * 24 * time.Hour)); at = at.Add(time.Minute) {
			now, _ := Active(w, at)
			if now != active {
				if next.IsZero() || !at.Equal(next) {
					t.Fatalf("%s: active became %v at %s, but the announced boundary was %s", w.Name, now, at, next)
				}
				active = now
			}
			if !next.IsZero() && at.Equal(next) {
				next = NextBoundary([]*structs.SyncWindow{w}, at)
			}
		}
	}
}

func BenchmarkClosed(b *testing.B) {
	windows := []*structs.SyncWindow{
		window("every-minute", structs.WindowDeny, "* * * * *", "744h", "Europe/Berlin"),
		window("office", structs.WindowAllow, "0 9 * * 1-5", "8h", "America/New_York"),
	}
	now := utc("2024-06-03T12:00:00Z")
	for b.Loop() {
		Closed(windows, "default", "web", now)
	}
}

// Closed reports whether a job is in a closed window at now: an active deny
// window matches it, or allow windows match it and none of them is active.
// A deny window wins over an active allow window. The reason names the
// windows. A window that does not validate is skipped.
func Closed(windows []*structs.SyncWindow, namespace, jobID string, now time.Time) (bool, string) {
	return At(windows, now).Closed("", namespace, jobID)
}
