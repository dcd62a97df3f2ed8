// Package holds decides whether a job is held: paused (one job or every
// job) or in a closed sync window (SPEC section 6). It validates sync
// windows and evaluates them against a clock the caller passes in, so tests
// can move time across window boundaries.
//
// Guarantee: Validate accepts exactly the windows that Active can evaluate;
// evaluation is a pure function of the windows, the job and the time.
package holds

import (
	"fmt"
	"path"
	"sort"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nops-dev/nops/structs"
)

// parser reads standard 5-field cron expressions (and the @hourly family).
func parser() cron.Parser {
	return cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
}

// maxDuration bounds a window's duration.
const maxDuration = 31 * 24 * time.Hour

// Validate returns every problem of a window, each naming its field.
func Validate(w *structs.SyncWindow) []string {
	var problems []string
	if w.Name == "" {
		problems = append(problems, "name: must not be empty")
	} else if len(w.Name) > 128 || !validName(w.Name) {
		problems = append(problems, fmt.Sprintf("name: %q must be 1-128 letters, digits, '-', '_' or '.'", w.Name))
	}
	if w.Kind != structs.WindowAllow && w.Kind != structs.WindowDeny {
		problems = append(problems, fmt.Sprintf("kind: must be allow or deny, not %q", w.Kind))
	}
	if _, err := parser().Parse(w.Schedule); err != nil {
		problems = append(problems, fmt.Sprintf("schedule: %q is not a 5-field cron expression: %v", w.Schedule, err))
	}
	if d, err := time.ParseDuration(w.Duration); err != nil {
		problems = append(problems, fmt.Sprintf("duration: %q is not a duration (like 1h30m): %v", w.Duration, err))
	} else if d <= 0 || d > maxDuration {
		problems = append(problems, fmt.Sprintf("duration: %s must be more than 0 and at most %s", d, maxDuration))
	}
	if _, err := time.LoadLocation(w.Timezone); err != nil {
		problems = append(problems, fmt.Sprintf("timezone: %q is not an IANA time zone: %v", w.Timezone, err))
	}
	for _, g := range w.Namespaces {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			problems = append(problems, fmt.Sprintf("namespaces: %q is not a valid glob", g))
		}
	}
	for _, g := range w.Jobs {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			problems = append(problems, fmt.Sprintf("jobs: %q is not a valid glob", g))
		}
	}
	return problems
}

func validName(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// compiled is a validated window ready for evaluation.
type compiled struct {
	w        *structs.SyncWindow
	schedule cron.Schedule
	duration time.Duration
	loc      *time.Location
}

func compile(w *structs.SyncWindow) (*compiled, error) {
	if p := Validate(w); len(p) > 0 {
		return nil, fmt.Errorf("window %s: %v", w.Name, p)
	}
	sched, _ := parser().Parse(w.Schedule)
	d, _ := time.ParseDuration(w.Duration)
	loc, _ := time.LoadLocation(w.Timezone)
	return &compiled{w: w, schedule: sched, duration: d, loc: loc}, nil
}

// lastStart returns the latest start of the window at or before now that
// is still within the window's duration, if any.
func (c *compiled) activeAt(now time.Time) (time.Time, bool) {
	local := now.In(c.loc)
	// Walk the starts from one duration before now; the window is active
	// if a start lies in (now - duration, now].
	from := local.Add(-c.duration).Add(-time.Second)
	for t := c.schedule.Next(from); !t.After(local); t = c.schedule.Next(t) {
		if local.Sub(t) < c.duration {
			return t, true
		}
	}
	return time.Time{}, false
}

// Matches reports whether a window's selectors match a job.
func Matches(w *structs.SyncWindow, namespace, jobID string) bool {
	return matchAny(w.Namespaces, namespace) && matchAny(w.Jobs, jobID)
}

func matchAny(globs []string, s string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

// Active reports whether a window is active at now.
func Active(w *structs.SyncWindow, now time.Time) (bool, error) {
	c, err := compile(w)
	if err != nil {
		return false, err
	}
	_, ok := c.activeAt(now)
	return ok, nil
}

// Closed reports whether a job is in a closed window at now: an active deny
// window matches it, or allow windows match it and none of them is active.
// The reason names the windows.
func Closed(windows []*structs.SyncWindow, namespace, jobID string, now time.Time) (bool, string) {
	var allows []string
	for _, w := range windows {
		if !Matches(w, namespace, jobID) {
			continue
		}
		active, err := Active(w, now)
		if err != nil {
			continue
		}
		switch w.Kind {
		case structs.WindowDeny:
			if active {
				return true, fmt.Sprintf("deny window %s is active", w.Name)
			}
		case structs.WindowAllow:
			if active {
				return false, ""
			}
			allows = append(allows, w.Name)
		}
	}
	if len(allows) > 0 {
		sort.Strings(allows)
		return true, fmt.Sprintf("outside allow window %v", allows)
	}
	return false, ""
}

// NextBoundary returns the next time after now at which any window opens or
// closes, or the zero time when there is none within a year.
func NextBoundary(windows []*structs.SyncWindow, now time.Time) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, w := range windows {
		c, err := compile(w)
		if err != nil {
			continue
		}
		if start, ok := c.activeAt(now); ok {
			consider(start.Add(c.duration))
		}
		if s := c.schedule.Next(now.In(c.loc)); !s.IsZero() && s.Sub(now) < 366*24*time.Hour {
			consider(s)
			consider(s.Add(c.duration))
		}
	}
	return next
}
