// Package holds decides whether a job is held: paused (one job or every
// job) or in a closed sync window that no deploy now lifts (SPEC section
// 6). It is the one owner of that rule: detection, the apply loop and the
// FSM's approve check all ask Evaluate or Paused. It validates sync
// windows and evaluates them against a time the caller passes in, so tests
// can move a clock across window boundaries.
//
// A window's schedule is read in wall-clock time of its time zone, as cron
// reads it: every start happens once per matching wall-clock time. A start
// that falls into a daylight saving gap (02:30 on the night clocks jump from
// 02:00 to 03:00) happens at the jump; a start in the hour that repeats when
// clocks go back happens at its first occurrence. The duration is elapsed
// time from the start. Windows whose occurrences overlap or touch form one
// active period.
//
// Guarantee: Validate accepts exactly the windows that Active can evaluate,
// on every server alike (the time zone database is built in); evaluation is
// a pure function of the pauses, the windows, the lift, the job and the
// time.
//
// It is a leaf: it imports only structs (and its cron and time zone
// libraries), so that the FSM, which must stay deterministic and free of
// the reconcilers' I/O, can ask it too. A test keeps it so.
package holds

import (
	"fmt"
	"sort"
	"strings"
	"time"
	// Every server must read a window's time zone alike, whatever zone
	// database its host has.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/nops-dev/nops/structs"
)

// parser reads standard 5-field cron expressions and the @hourly family.
func parser() cron.Parser {
	return cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
}

const (
	// maxDuration bounds a window's duration.
	maxDuration = 31 * 24 * time.Hour
	// dstMargin covers the difference between wall-clock and elapsed time
	// around a change of UTC offset when searching for starts.
	dstMargin = 3 * time.Hour
	// horizon bounds how far NextBoundary looks ahead.
	horizon = 366 * 24 * time.Hour
	// maxChain bounds the occurrences NextBoundary follows through one
	// active period.
	maxChain = 20000
)

// Validate returns every problem of a window, each naming its field.
func Validate(w *structs.SyncWindow) []string {
	problems, _ := check(w)
	return problems
}

// check validates a window and, when it has no problem, returns it
// compiled: each field is parsed once, for both.
func check(w *structs.SyncWindow) ([]string, *compiled) {
	var problems []string
	if w.Name == "" {
		problems = append(problems, "name: must not be empty")
	} else if len(w.Name) > 128 || !validName(w.Name) {
		problems = append(problems, fmt.Sprintf("name: %q must be 1-128 letters, digits, '-', '_' or '.'", w.Name))
	}
	if w.Kind != structs.WindowAllow && w.Kind != structs.WindowDeny {
		problems = append(problems, fmt.Sprintf("kind: must be allow or deny, not %q", w.Kind))
	}
	sched, p := parseSchedule(w.Schedule)
	if p != "" {
		problems = append(problems, p)
	}
	d, err := time.ParseDuration(w.Duration)
	if err != nil {
		problems = append(problems, fmt.Sprintf("duration: %q is not a duration (like 1h30m): %v", w.Duration, err))
	} else if d <= 0 || d > maxDuration {
		problems = append(problems, fmt.Sprintf("duration: %s must be more than 0 and at most %s", d, maxDuration))
	}
	loc, err := loadLocation(w.Timezone)
	if err != nil {
		problems = append(problems, fmt.Sprintf("timezone: %v", err))
	}
	for _, g := range w.Namespaces {
		if err := structs.CheckGlob(g); err != nil {
			problems = append(problems, fmt.Sprintf("namespaces: %v", err))
		}
	}
	for _, g := range w.Jobs {
		if err := structs.CheckGlob(g); err != nil {
			problems = append(problems, fmt.Sprintf("jobs: %v", err))
		}
	}
	for _, g := range w.Clusters {
		if err := structs.CheckGlob(g); err != nil {
			problems = append(problems, fmt.Sprintf("clusters: %v", err))
		}
	}
	if len(problems) > 0 {
		return problems, nil
	}
	return nil, &compiled{w: w, schedule: sched, duration: d, loc: loc}
}

// parseSchedule parses a 5-field cron schedule, or says what is wrong
// with it.
func parseSchedule(s string) (cron.Schedule, string) {
	trimmed := strings.TrimSpace(s)
	switch {
	case trimmed == "":
		return nil, "schedule: must not be empty"
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return nil, fmt.Sprintf("schedule: %q sets a time zone: use the timezone field instead", s)
	case strings.HasPrefix(trimmed, "@every"):
		return nil, fmt.Sprintf("schedule: %q is an interval, not a 5-field cron expression: a window needs fixed start times", s)
	}
	sched, err := parser().Parse(s)
	if err != nil {
		return nil, fmt.Sprintf("schedule: %q is not a 5-field cron expression: %v", s, err)
	}
	// A schedule that fires within the five years cron looks ahead from a
	// fixed time fires at all.
	if sched.Next(time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Sprintf("schedule: %q never fires", s)
	}
	return sched, ""
}

// loadLocation reads a window's time zone. Empty means UTC; "Local" is
// refused, since servers may not share a local zone.
func loadLocation(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, fmt.Errorf("%q is the server's own zone, which servers may not share: name an IANA time zone such as Europe/Berlin", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone: %w", name, err)
	}
	return loc, nil
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
	p, c := check(w)
	if len(p) > 0 {
		return nil, fmt.Errorf("window %s: %s", w.Name, strings.Join(p, "; "))
	}
	return c, nil
}

// wall returns the wall-clock time of t in the window's zone, written as a
// UTC time so that cron arithmetic on it knows no offset changes.
func (c *compiled) wall(t time.Time) time.Time {
	l := t.In(c.loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant returns when a wall-clock start happens. A wall-clock time that
// does not exist (in a daylight saving gap) happens at the jump; one that
// exists twice happens at its first occurrence. The mapping never goes
// backwards as the wall-clock time grows.
func (c *compiled) instant(wall time.Time) time.Time {
	t := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, c.loc)
	if c.wall(t).Equal(wall.Truncate(time.Second)) {
		return t
	}
	// In a gap: t was moved by the size of the gap, to one side of the
	// change of offset. The change is the bound of t's zone on that side.
	start, end := t.ZoneBounds()
	if c.wall(t).Before(wall) {
		return end
	}
	return start
}

// firstStartAfter returns the first start strictly after t, with its
// wall-clock time, or zero times when the schedule has none in the next five
// years.
func (c *compiled) firstStartAfter(t time.Time) (at, wall time.Time) {
	// Walk wall-clock starts from a margin before t: around a change of
	// offset the wall clock and elapsed time disagree by up to the margin.
	for w := c.schedule.Next(c.wall(t.Add(-dstMargin))); !w.IsZero(); w = c.schedule.Next(w) {
		if at := c.instant(w); at.After(t) {
			return at, w
		}
	}
	return time.Time{}, time.Time{}
}

// activeAt reports whether the window is active at now: a start lies in
// (now - duration, now].
func (c *compiled) activeAt(now time.Time) bool {
	s, _ := c.firstStartAfter(now.Add(-c.duration))
	return !s.IsZero() && !s.After(now)
}

// nextBoundary returns the next time after now at which the window opens
// or closes, or the zero time when there is none within the horizon (a
// window whose occurrences overlap for that long never closes).
func (c *compiled) nextBoundary(now time.Time) time.Time {
	s, w := c.firstStartAfter(now.Add(-c.duration))
	if s.IsZero() {
		return time.Time{}
	}
	if s.After(now) {
		if s.Sub(now) > horizon {
			return time.Time{}
		}
		return s
	}
	// Active: follow the occurrences that overlap or touch the period.
	// Instants grow with wall-clock times, so the next start is the next
	// wall-clock start.
	end := s.Add(c.duration)
	for i := 0; i < maxChain && end.Sub(now) <= horizon; i++ {
		w = c.schedule.Next(w)
		if w.IsZero() {
			return end
		}
		next := c.instant(w)
		if next.After(end) {
			return end
		}
		if e := next.Add(c.duration); e.After(end) {
			end = e
		}
	}
	return time.Time{}
}

// Matches reports whether a window's selectors match a job of a cluster.
// A selector with no globs matches every job.
func Matches(w *structs.SyncWindow, cluster, namespace, jobID string) bool {
	return structs.GlobAny(w.Clusters, structs.ClusterName(cluster)) &&
		structs.GlobAny(w.Namespaces, namespace) && structs.GlobAny(w.Jobs, jobID)
}

// Active reports whether a window is active at now.
func Active(w *structs.SyncWindow, now time.Time) (bool, error) {
	c, err := compile(w)
	if err != nil {
		return false, err
	}
	return c.activeAt(now), nil
}

// Schedule is the sync windows evaluated at one instant: which are active
// and when each next opens or closes. Evaluating a window (its cron
// schedule in its time zone) costs tens of microseconds; a detection cycle
// evaluates each window once (At) and then asks, for each job, only which
// windows match it, so that its cost does not grow with jobs × windows.
// A window that does not validate is left out, as Closed skips it.
//
// A window's next boundary costs far more than its activity (a walk over
// its starts), so it is computed on the first NextBoundaryFor that needs
// it and kept. A Schedule is not safe for concurrent use.
type Schedule struct {
	now     time.Time
	windows []scheduled
}

type scheduled struct {
	w      *structs.SyncWindow
	c      *compiled
	active bool
	// next is the window's next opening or closing once known (nextKnown),
	// zero when there is none within a year.
	next      time.Time
	nextKnown bool
}

// At evaluates windows at now.
func At(windows []*structs.SyncWindow, now time.Time) *Schedule {
	s := &Schedule{now: now, windows: make([]scheduled, 0, len(windows))}
	for _, w := range windows {
		c, err := compile(w)
		if err != nil {
			continue
		}
		s.windows = append(s.windows, scheduled{w: w, c: c, active: c.activeAt(now)})
	}
	return s
}

// Closed reports whether a job is in a closed window, as Closed does, at
// the schedule's instant.
func (s *Schedule) Closed(cluster, namespace, jobID string) (bool, string) {
	var denies, allows []string
	allowActive := false
	for _, e := range s.windows {
		if !Matches(e.w, cluster, namespace, jobID) {
			continue
		}
		switch e.w.Kind {
		case structs.WindowDeny:
			if e.active {
				denies = append(denies, e.w.Name)
			}
		case structs.WindowAllow:
			allows = append(allows, e.w.Name)
			allowActive = allowActive || e.active
		}
	}
	switch {
	case len(denies) == 1:
		return true, fmt.Sprintf("deny window %s is active", denies[0])
	case len(denies) > 1:
		sort.Strings(denies)
		return true, fmt.Sprintf("deny windows %s are active", strings.Join(denies, ", "))
	case len(allows) > 0 && !allowActive:
		sort.Strings(allows)
		return true, fmt.Sprintf("outside allow window %s", strings.Join(allows, ", "))
	}
	return false, ""
}

// NextBoundaryFor returns the earliest next opening or closing of the
// windows that match a job, or the zero time when none does.
func (s *Schedule) NextBoundaryFor(cluster, namespace, jobID string) time.Time {
	var next time.Time
	for i := range s.windows {
		e := &s.windows[i]
		if !Matches(e.w, cluster, namespace, jobID) {
			continue
		}
		if !e.nextKnown {
			e.next, e.nextKnown = e.c.nextBoundary(s.now), true
		}
		if e.next.IsZero() {
			continue
		}
		if next.IsZero() || e.next.Before(next) {
			next = e.next
		}
	}
	return next
}

// NextBoundary returns the next time after now at which any window opens or
// closes, or the zero time when there is none within a year.
func NextBoundary(windows []*structs.SyncWindow, now time.Time) time.Time {
	var next time.Time
	for _, w := range windows {
		c, err := compile(w)
		if err != nil {
			continue
		}
		if b := c.nextBoundary(now); !b.IsZero() && (next.IsZero() || b.Before(next)) {
			next = b
		}
	}
	return next
}

// Hold is whether a job is held at one instant, and why (SPEC section 6).
// A pause holds a job whatever else; a closed sync window holds it unless
// deploy now lifts the window. It is a plain value: evaluating it again
// with another lift (WithLift) needs no second look at the windows.
type Hold struct {
	// Pause is the pause that holds the job, the pause of every job first,
	// or nil.
	Pause *structs.Pause
	// WindowClosed says the job is in a closed sync window; Window names
	// the windows, as Closed does.
	WindowClosed bool
	Window       string
	// Lifted says deploy now lifts the closed window for the deployment
	// concerned: a stored request for the next one, or a deployment that
	// consumed it.
	Lifted bool
}

// Evaluate returns the hold of a job at the schedule's instant: its pause
// among pauses, the closed windows of the schedule, and whether deploy now
// lifts them.
func Evaluate(pauses []*structs.Pause, windows *Schedule, lifted bool, cluster, namespace, jobID string) Hold {
	closed, why := windows.Closed(cluster, namespace, jobID)
	return Hold{Pause: Paused(pauses, cluster, namespace, jobID), WindowClosed: closed, Window: why, Lifted: lifted}
}

// Paused returns the pause that holds a job: the pause of every job if
// there is one, else the pause of the job's cluster (SPEC section 16), else
// the job's own pause, else nil. Deploy now never lifts it, and it blocks
// approvals.
func Paused(pauses []*structs.Pause, cluster, namespace, jobID string) *structs.Pause {
	cluster = structs.ClusterName(cluster)
	var ofCluster, own *structs.Pause
	for _, p := range pauses {
		switch {
		case p.Global:
			return p
		case p.JobID == "" && p.Cluster != "":
			if ofCluster == nil && p.Cluster == cluster {
				ofCluster = p
			}
		case own == nil && structs.ClusterName(p.Cluster) == cluster && p.Namespace == namespace && p.JobID == jobID:
			own = p
		}
	}
	if ofCluster != nil {
		return ofCluster
	}
	return own
}

// WithLift returns the same hold with the window lifted or not, as it
// stands for a deployment that did or did not consume a deploy now.
func (h Hold) WithLift(lifted bool) Hold {
	h.Lifted = lifted
	return h
}

// Paused reports whether a pause holds the job.
func (h Hold) Paused() bool { return h.Pause != nil }

// Held reports whether the job is held: no deployment of it may be
// created or started.
func (h Hold) Held() bool { return h.Paused() || (h.WindowClosed && !h.Lifted) }

// Reason is the hold as a job's status shows it, or "" when nothing holds
// the job. A closed window that deploy now lifts is shown, with the lift.
func (h Hold) Reason() string {
	switch {
	case h.Pause != nil && h.Pause.Global:
		return fmt.Sprintf("paused (every job) by %s: %s", h.Pause.Actor, h.Pause.Reason)
	case h.Pause != nil:
		return fmt.Sprintf("paused by %s: %s", h.Pause.Actor, h.Pause.Reason)
	case h.WindowClosed && h.Lifted:
		return "sync window: " + h.Window + " (deploy now requested)"
	case h.WindowClosed:
		return "sync window: " + h.Window
	}
	return ""
}
