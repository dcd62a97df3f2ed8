package notify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// Store is what the delivery loop needs of the server: the replicated
// state, and proposals through Raft.
type Store interface {
	State() *fsm.StateStore
	Apply(t structs.MessageType, req any) (uint64, error)
}

// Config tunes the delivery loop.
type Config struct {
	// Targets are the configured notify blocks.
	Targets []*Target
	// UIURL is the dashboard's public address, for links.
	UIURL string
	// Retention is how long finished notifications stay in the outbox.
	Retention time.Duration
	// Leader names this server in "leader changed" notifications.
	Leader string
	// Concurrency bounds the deliveries in flight (default 16).
	Concurrency int
	// SendTimeout bounds one attempt (default 10 s).
	SendTimeout time.Duration
	// Clock is nil for time.Now.
	Clock      func() time.Time
	Registerer prometheus.Registerer
}

// maxResultsPerEntry bounds the results one Raft entry records, so that a
// backlog delivered at once is recorded in entries of a few hundred KiB.
const maxResultsPerEntry = 1000

// Defaults of Config.
const (
	// defaultConcurrency bounds the deliveries in flight: enough for a
	// burst to several receivers, few enough not to flood one of them.
	defaultConcurrency = 16
	// defaultSendTimeout bounds one attempt; a slower receiver is retried.
	defaultSendTimeout = 10 * time.Second
	// DefaultRetention is how long finished notifications stay unless
	// Config.Retention says otherwise (the notify block's retention).
	DefaultRetention = 72 * time.Hour
)

// Deliverer is the leader's delivery loop of the outbox.
type Deliverer struct {
	store   Store
	cfg     Config
	logger  hclog.Logger
	now     func() time.Time
	metrics *metrics
	byName  map[string]*Target

	// lastPrune is when the loop last checked for notifications to prune.
	lastPrune time.Time
	// lastWindows is when the loop last looked at every window, and
	// windowsIndex the largest modify index of a window it looked at.
	lastWindows  time.Time
	windowsIndex uint64
	// windowsLooked is when (on the monotonic clock) the loop last looked
	// at the windows written since windowsIndex.
	windowsLooked time.Time
}

// New returns a delivery loop over the store's outbox.
func New(store Store, cfg Config, logger hclog.Logger) *Deliverer {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = defaultConcurrency
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = defaultSendTimeout
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	now := cfg.Clock
	if now == nil {
		now = time.Now
	}
	d := &Deliverer{store: store, cfg: cfg, logger: logger.Named("notify"), now: now, byName: map[string]*Target{}}
	for _, t := range cfg.Targets {
		d.byName[t.Name] = t
	}
	d.metrics = newMetrics(cfg.Registerer)
	d.metrics.startTargets(d.Targets())
	return d
}

// Targets returns the names of the configured targets.
func (d *Deliverer) Targets() []string {
	out := make([]string, 0, len(d.cfg.Targets))
	for _, t := range d.cfg.Targets {
		out = append(out, t.Name)
	}
	return out
}

// Run delivers until ctx is cancelled. The server runs it only while it
// leads, after its barrier.
func (d *Deliverer) Run(ctx context.Context) {
	d.logger.Info("notification delivery started", "targets", len(d.cfg.Targets))
	defer d.logger.Info("notification delivery stopped")
	// A follower's gauges would be stale: only the leader knows the queue.
	defer d.metrics.observeQueue(nil, time.Time{})
	if d.cfg.Leader != "" {
		d.mark(structs.MarkLeader, "cluster", d.cfg.Leader, "leader is now "+d.cfg.Leader)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		changed := d.store.State().Changed()
		next, err := d.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			d.logger.Warn("notification pass failed", "error", err)
			next = d.now().Add(time.Second)
		}
		wait := time.Until(next)
		if limit := d.pruneEvery(); next.IsZero() || wait > limit {
			// Window boundaries and pruning are checked at least once a
			// minute (more often with a shorter retention).
			wait = limit
		}
		// Timers are synchronous (Go 1.23 and later): Reset drops any
		// expiry not received.
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer.C:
		}
	}
}

// delivery is one attempt to make: a notification, to one target.
type delivery struct {
	n      *structs.Notification
	target *Target
	// attempts made before this one.
	attempts int
	err      error
}

// Pass makes one round: it records the windows that opened or closed,
// gives up on what is too old, sends what is due (respecting the order per
// job and target), records the outcomes through Raft, and prunes. It
// returns when the next attempt is due (zero: nothing waits).
func (d *Deliverer) Pass(ctx context.Context) (time.Time, error) {
	// Windows written too soon after the last look are looked at later.
	again := d.observeWindows()
	next, err := d.pass(ctx)
	if !again.IsZero() {
		// A pass may take long (a slow receiver): look now if it did.
		again = d.observeWindows()
	}
	if !again.IsZero() && (next.IsZero() || again.Before(next)) {
		next = again
	}
	return next, err
}

func (d *Deliverer) pass(ctx context.Context) (time.Time, error) {
	st := d.store.State()
	pending, _, err := st.Notifications(fsm.NotificationFilter{State: structs.NotificationPending})
	if err != nil {
		return time.Time{}, err
	}
	now := d.now()
	d.metrics.observeQueue(pending, now)

	p := &passPlan{busy: map[string]bool{}}
	for _, n := range pending {
		d.plan(p, n, now)
	}
	d.send(ctx, p.due)
	for _, dl := range p.due {
		p.results = append(p.results, d.outcome(p, dl, now))
	}
	if err := d.record(p.results); err != nil {
		return p.next, err
	}
	if len(p.results) > 0 && p.next.IsZero() {
		// What was recorded may have finished a notification or freed the
		// next one of a job: look again at once.
		p.next = now
	}
	d.prune(now)
	return p.next, nil
}

// passPlan is what one pass decides: the results to record, the
// deliveries due now, and when the soonest later attempt is due.
type passPlan struct {
	results []structs.NotificationResult
	due     []*delivery
	next    time.Time
	// busy holds the (target, job) pairs with an earlier notification
	// still pending: later ones wait for it.
	busy map[string]bool
}

// soonest moves the next attempt forward to t when t comes first.
func (p *passPlan) soonest(t time.Time) {
	if p.next.IsZero() || t.Before(p.next) {
		p.next = t
	}
}

// plan decides what to do with one pending notification for each target
// it still waits on, and closes it when it waits on none.
func (d *Deliverer) plan(p *passPlan, n *structs.Notification, now time.Time) {
	open := 0
	for _, t := range d.cfg.Targets {
		if !t.Matches(n) {
			continue
		}
		tr := n.Target(t.Name)
		if tr != nil && tr.State != structs.TargetPending {
			continue
		}
		open++
		d.planTarget(p, n, t, tr, now)
	}
	if open == 0 {
		// Every matching target is done (or none matches): close it.
		p.results = append(p.results, structs.NotificationResult{ID: n.ID, Final: finalState(n)})
	}
}

// planTarget gives up on a notification to a target when it is too old,
// or makes it due when its next attempt has come and no earlier one of
// the same job waits for that target.
func (d *Deliverer) planTarget(p *passPlan, n *structs.Notification, t *Target, tr *structs.NotificationTarget, now time.Time) {
	key := t.Name + "\x00" + n.JobKey()
	if p.busy[key] {
		return
	}
	p.busy[key] = true
	attempts := 0
	var lastErr string
	if tr != nil {
		attempts, lastErr = tr.Attempts, tr.LastError
	}
	if giveUp := n.Time.Add(t.GiveUpAfter); !now.Before(giveUp) {
		msg := fmt.Sprintf("gave up after %s and %d attempts", t.GiveUpAfter, attempts)
		if lastErr != "" {
			msg += ": " + lastErr
		}
		p.results = append(p.results, structs.NotificationResult{ID: n.ID, Target: t.Name, State: structs.TargetDead, Error: msg})
		d.metrics.dead.WithLabelValues(t.Name).Inc()
		return
	}
	if tr != nil && tr.NextAttemptAt.After(now) {
		p.soonest(tr.NextAttemptAt)
		return
	}
	p.due = append(p.due, &delivery{n: n, target: t, attempts: attempts})
}

// outcome is the result to record of one attempt made, with its retry
// time when it failed.
func (d *Deliverer) outcome(p *passPlan, dl *delivery, now time.Time) structs.NotificationResult {
	r := structs.NotificationResult{ID: dl.n.ID, Target: dl.target.Name, Attempted: true}
	if dl.attempts > 0 {
		d.metrics.retried.WithLabelValues(dl.target.Name).Inc()
	}
	if dl.err == nil {
		r.State = structs.TargetDelivered
		d.metrics.sent.WithLabelValues(dl.target.Name).Inc()
	} else {
		r.State, r.Error = structs.TargetPending, dl.err.Error()
		r.NextAttemptAt = now.Add(retryDelay(dl.target, dl.attempts+1))
		d.metrics.failed.WithLabelValues(dl.target.Name).Inc()
		d.logger.Debug("notification not delivered", "id", dl.n.ID, "target", dl.target.Name,
			"attempt", dl.attempts+1, "error", dl.err)
		p.soonest(r.NextAttemptAt)
	}
	return r
}

// finalState is the state a notification ends in once no target waits:
// dead if any target gave up, else delivered.
func finalState(n *structs.Notification) structs.NotificationState {
	for _, t := range n.Targets {
		if t.State == structs.TargetDead {
			return structs.NotificationDead
		}
	}
	return structs.NotificationDelivered
}

// send makes the deliveries, at most Concurrency at a time.
func (d *Deliverer) send(ctx context.Context, due []*delivery) {
	if len(due) == 0 {
		return
	}
	sem := make(chan struct{}, d.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, dl := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			dl.err = d.deliver(ctx, dl.n, dl.target)
		}()
	}
	wg.Wait()
}

func (d *Deliverer) deliver(ctx context.Context, n *structs.Notification, t *Target) (err error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
	defer cancel()
	defer func() {
		// A sender must not take the leader down.
		if p := recover(); p != nil {
			err = fmt.Errorf("sender panicked: %v", p)
		}
	}()
	return t.Sender.Send(ctx, &Message{
		Notification: n, Target: t.Name, IdempotencyKey: n.IdempotencyKey(t.Name), Link: link(d.cfg.UIURL, n),
	})
}

// retryDelay returns the wait before attempt number attempt+1: exponential
// from the target's initial delay, with jitter, capped at its maximum.
func retryDelay(t *Target, attempt int) time.Duration {
	b := structs.Backoff{Min: t.RetryInitial, Max: t.RetryMax, Jitter: 0.5}
	return b.Delay(attempt)
}

// record proposes the results, in entries of a bounded size. A result
// refused because another leader already recorded the end of its
// notification is dropped.
func (d *Deliverer) record(results []structs.NotificationResult) error {
	for len(results) > 0 {
		n := min(len(results), maxResultsPerEntry)
		batch := results[:n]
		results = results[n:]
		_, err := d.store.Apply(structs.NotificationResultRequestType, &structs.NotificationResultRequest{
			WriteMeta: structs.WriteMeta{Time: d.now().UTC(), Actor: "notify"}, Results: batch,
		})
		if err == nil {
			continue
		}
		if !errors.Is(err, structs.ErrConflict) && !errors.Is(err, structs.ErrNotFound) {
			return fmt.Errorf("record notification results: %w", err)
		}
		// One stale result refuses the whole entry: record them one
		// notification at a time.
		if err := d.recordEach(batch); err != nil {
			return err
		}
	}
	return nil
}

func (d *Deliverer) recordEach(batch []structs.NotificationResult) error {
	byID := map[string][]structs.NotificationResult{}
	var ids []string
	for _, r := range batch {
		if _, ok := byID[r.ID]; !ok {
			ids = append(ids, r.ID)
		}
		byID[r.ID] = append(byID[r.ID], r)
	}
	sort.Strings(ids)
	for _, id := range ids {
		_, err := d.store.Apply(structs.NotificationResultRequestType, &structs.NotificationResultRequest{
			WriteMeta: structs.WriteMeta{Time: d.now().UTC(), Actor: "notify"}, Results: byID[id],
		})
		if err != nil && !errors.Is(err, structs.ErrConflict) && !errors.Is(err, structs.ErrNotFound) {
			return fmt.Errorf("record notification results: %w", err)
		}
	}
	return nil
}

// pruneEvery is how often the loop looks for notifications to prune: once
// a minute, or once per retention when that is shorter.
func (d *Deliverer) pruneEvery() time.Duration { return min(time.Minute, d.cfg.Retention) }

// prune removes the finished notifications older than the retention, at
// most once per pruneEvery, and only when there is one.
func (d *Deliverer) prune(now time.Time) {
	if now.Sub(d.lastPrune) < d.pruneEvery() {
		return
	}
	d.lastPrune = now
	before := now.Add(-d.cfg.Retention)
	all, _, err := d.store.State().Notifications(fsm.NotificationFilter{})
	if err != nil {
		return
	}
	old := false
	for _, n := range all {
		if n.State != structs.NotificationPending && n.FinishedAt.Before(before) {
			old = true
			break
		}
	}
	if !old {
		return
	}
	if _, err := d.store.Apply(structs.NotificationPruneRequestType, &structs.NotificationPruneRequest{
		WriteMeta: structs.WriteMeta{Time: now.UTC(), Actor: "notify"}, Before: before,
	}); err != nil {
		d.logger.Warn("prune of the outbox failed", "error", err)
	}
}

// windowObserveEvery is how often, at most, every window is looked at.
const windowObserveEvery = time.Second

// windowsGap is the least time between two looks at the windows written
// since the last look: a burst of window writes (thousands a second, a
// Raft batch each few milliseconds) costs one look per windowsGap, not one
// per batch, and a lone write waits for nothing.
const windowsGap = 10 * time.Millisecond

// observeWindows records each sync window that opened or closed since the
// last recorded observation; the FSM notifies only on a change.
//
// A window opens and closes with time, not with writes: every window is
// looked at once a second at most, and in between only the windows written
// since (a raised modify index), so that a burst of writes does not
// evaluate every schedule once per write; those written within windowsGap
// of the last look wait for the next one, which observeWindows returns
// the time of (zero when nothing waits).
func (d *Deliverer) observeWindows() time.Time {
	st := d.store.State()
	now := d.now()
	all := now.Sub(d.lastWindows) >= windowObserveEvery || now.Before(d.lastWindows)
	if !all && !d.windowsLooked.IsZero() {
		if wait := windowsGap - time.Since(d.windowsLooked); wait > 0 {
			return now.Add(wait)
		}
	}
	d.windowsLooked = time.Now()
	since := d.windowsIndex
	if all {
		since = 0
	}
	windows, newest, err := st.WindowsSince(since)
	if err != nil {
		return time.Time{}
	}
	if all {
		d.lastWindows = now
	}
	d.windowsIndex = max(d.windowsIndex, newest)
	for _, w := range windows {
		active, err := holds.Active(w, now)
		if err != nil {
			continue
		}
		value := "closed"
		if active {
			value = "open"
		}
		if m, _ := st.Mark(structs.MarkWindow, w.Name); (m == nil && value == "closed") || (m != nil && m.Value == value) {
			continue
		}
		d.mark(structs.MarkWindow, w.Name, value, fmt.Sprintf("%s window %s is now %s (schedule %q for %s)", w.Kind, w.Name, value, w.Schedule, w.Duration))
	}
	return time.Time{}
}

func (d *Deliverer) mark(kind, object, value, msg string) {
	if _, err := d.store.Apply(structs.NotifyMarkRequestType, &structs.NotifyMarkRequest{
		WriteMeta: structs.WriteMeta{Time: d.now().UTC(), Actor: "nops"}, Kind: kind, Object: object, Value: value, Message: msg,
	}); err != nil {
		d.logger.Warn("recording an observation failed", "kind", kind, "object", object, "error", err)
	}
}

// Test sends a test message through the named target now, outside the
// outbox, and returns the sender's error.
func (d *Deliverer) Test(ctx context.Context, name, actor string) (*structs.Notification, error) {
	t := d.byName[name]
	if t == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTarget, name)
	}
	now := d.now().UTC()
	n := &structs.Notification{
		ID: "test-" + now.Format("20060102T150405.000000000Z"), Kind: structs.NotifyTest, Time: now, Object: name,
		Actor: actor, Message: "a test of the notify target " + name, State: structs.NotificationPending,
	}
	return n, d.deliver(ctx, n, t)
}
