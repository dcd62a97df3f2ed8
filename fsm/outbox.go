package fsm

import (
	"fmt"
	"slices"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
)

// The notification outbox (SPEC section 13). A change that notifies writes
// its notification in the same transaction, so in the same Raft entry, as
// the change itself: both are committed on every server or on none. The
// notification's ID comes from the entry's index and the change's position
// in it, so every server holds the same outbox, and the leader of the day
// delivers it.
const (
	TableNotifications = "notifications"
	TableMarks         = "notify_marks"
)

// maxResults bounds the results of one NotificationResultRequest.
const maxResults = 10000

func notificationsTable() *memdb.TableSchema {
	return &memdb.TableSchema{Name: TableNotifications, Indexes: map[string]*memdb.IndexSchema{
		"id": {Name: "id", Unique: true, Indexer: stringIndex{1, notificationID}},
		// pending indexes the notifications still being delivered, in
		// the order they were made.
		"pending": {Name: "pending", Unique: true, AllowMissing: true, Indexer: pendingIndex{}},
	}}
}

func notificationID(obj any, into []string) bool {
	n, ok := obj.(*structs.Notification)
	if ok {
		into[0] = n.ID
	}
	return ok
}

// pendingIndex indexes a pending notification by its ID and leaves the
// finished ones out.
type pendingIndex struct{}

func (pendingIndex) FromObject(obj any) (bool, []byte, error) {
	n, ok := obj.(*structs.Notification)
	if !ok {
		return false, nil, fmt.Errorf("not a notification: %T", obj)
	}
	if n.State != structs.NotificationPending {
		return false, nil, nil
	}
	return true, []byte(n.ID + "\x00"), nil
}

func (pendingIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("want one argument")
	}
	k, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("argument must be a string: %#v", args[0])
	}
	return []byte(k + "\x00"), nil
}

// notify writes one notification of the entry.
func (w *writer) notify(n *structs.Notification) error {
	n.ID = structs.NotificationID(w.index, w.notified)
	w.notified++
	n.State = structs.NotificationPending
	n.Targets = nil
	n.CreateIndex, n.ModifyIndex = w.index, w.index
	if err := w.insert(TableNotifications, n); err != nil {
		return fmt.Errorf("write notification: %w", err)
	}
	return nil
}

// notifyEvent writes the notifications an audit event causes, if any, and
// those of the extra kinds.
func (w *writer) notifyEvent(e *structs.Event, extra ...string) error {
	kinds := append(eventNotifyKinds(e), extra...)
	if len(kinds) == 0 {
		return nil
	}
	var dep *structs.NotificationDeployment
	if e.Kind == structs.EventKindDeployment {
		raw, err := w.first(TableDeployments, e.Object)
		if err != nil {
			return fmt.Errorf("deployment lookup: %w", err)
		}
		if raw != nil {
			d := raw.(*structs.Deployment)
			dep = &structs.NotificationDeployment{
				ID: d.ID, Repository: d.Repository, Commit: d.Commit, File: d.File, Policy: d.Policy,
				State: string(d.State), DiffSummary: structs.DiffSummary(d.Diff), Error: d.Error,
				CommitMessage: d.CommitMessage, CommitAuthor: d.CommitAuthor, CommitTime: d.CommitTime, CommitURL: d.CommitURL,
			}
			for _, a := range d.ApprovalsGiven() {
				dep.Approvals = append(dep.Approvals, a.Actor)
			}
			if d.Policy == structs.PolicyApproval {
				dep.ApprovalsRequired = d.RequiredApprovals()
			}
		}
	}
	for _, k := range kinds {
		n := &structs.Notification{
			Kind: k, Time: e.Time, Object: e.Object, Cluster: e.Cluster, Namespace: e.Namespace, JobID: e.JobID,
			From: e.From, To: e.To, Actor: e.Actor, Message: e.Message, EventSeq: e.Seq,
		}
		if dep != nil {
			d := *dep
			d.Approvals = slices.Clone(dep.Approvals)
			n.Deployment = &d
		}
		if err := w.notify(n); err != nil {
			return err
		}
	}
	return nil
}

// eventNotifyKinds maps an audit event to the kinds of notification it
// causes. A deployment that fails or is rejected also blocks its job; one
// that expires does not.
func eventNotifyKinds(e *structs.Event) []string {
	switch e.Kind {
	case structs.EventKindDeployment:
		if e.From == e.To {
			return nil
		}
		from := structs.DeploymentState(e.From)
		switch structs.DeploymentState(e.To) {
		case structs.StateDetected:
			return []string{structs.NotifyCreated}
		case structs.StatePendingApproval:
			return []string{structs.NotifyPendingApproval}
		case structs.StatePreHook:
			if from == structs.StatePendingApproval {
				return []string{structs.NotifyApproved}
			}
		case structs.StateApplying:
			if from == structs.StatePendingApproval {
				return []string{structs.NotifyApproved, structs.NotifyApplying}
			}
			return []string{structs.NotifyApplying}
		case structs.StateCompleted:
			return []string{structs.NotifyCompleted}
		case structs.StateFailed:
			return []string{structs.NotifyFailed, structs.NotifyBlocked}
		case structs.StateRejected:
			return []string{structs.NotifyRejected, structs.NotifyBlocked}
		case structs.StateSuperseded:
			return []string{structs.NotifySuperseded}
		case structs.StateExpired:
			return []string{structs.NotifyExpired}
		}
	case structs.EventKindJob:
		if e.To == "retry" {
			return []string{structs.NotifyUnblocked}
		}
	case structs.EventKindPause:
		switch e.To {
		case "paused":
			return []string{structs.NotifyPaused}
		case "resumed":
			return []string{structs.NotifyResumed}
		}
	}
	return nil
}

// newlyRefused reports whether a repository's status names a refused head
// its previous status did not.
func newlyRefused(old, now *structs.RepoStatus) bool {
	return now.Refused != "" && (old == nil || old.Refused != now.Refused)
}

// notifyRepo writes the notification of a repository whose fetch started
// failing or recovered, or that refused another head for its signature
// while failing.
func (w *writer) notifyRepo(old *structs.RepoStatus, now *structs.RepoStatus, m structs.WriteMeta) error {
	wasFailing := old != nil && old.FetchError != ""
	failing := now.FetchError != ""
	if wasFailing == failing && !newlyRefused(old, now) {
		return nil
	}
	n := &structs.Notification{Kind: structs.NotifyRepoFailing, Time: m.Time, Object: now.Name,
		Actor: m.Actor, Message: "fetch failing: " + now.FetchError}
	if !failing {
		n.Kind, n.Message = structs.NotifyRepoRecovered, "fetch recovered at "+structs.ShortID(now.Head)
	}
	return w.notify(n)
}

// notifyUnblocked writes the notification of a job whose block a new
// deployment cleared.
func (w *writer) notifyUnblocked(m structs.WriteMeta, d *structs.Deployment) error {
	return w.notify(&structs.Notification{
		Kind: structs.NotifyUnblocked, Time: m.Time, Object: d.Key(), Cluster: d.Cluster, Namespace: d.Namespace, JobID: d.JobID,
		Actor: m.Actor, Message: fmt.Sprintf("new deployment %s at commit %s", d.ID, structs.ShortID(d.Commit)),
	})
}

func (w *writer) notificationResult(req *structs.NotificationResultRequest) error {
	if len(req.Results) == 0 {
		return invalid("a notification result request needs results")
	}
	if len(req.Results) > maxResults {
		return invalid("at most %d notification results per request, not %d", maxResults, len(req.Results))
	}
	// Results for one notification are applied to one copy.
	changed := map[string]*structs.Notification{}
	var order []*structs.Notification
	for _, r := range req.Results {
		n := changed[r.ID]
		if n == nil {
			raw, err := w.first(TableNotifications, r.ID)
			if err != nil {
				return fmt.Errorf("notification lookup: %w", err)
			}
			if raw == nil {
				return notFound("notification %q", r.ID)
			}
			n = raw.(*structs.Notification).Copy()
			changed[r.ID] = n
			order = append(order, n)
		}
		if n.State != structs.NotificationPending {
			return conflict("notification %s is %s: its delivery has ended", n.ID, n.State)
		}
		if r.Target != "" {
			if err := applyTargetResult(n, r, req.Time); err != nil {
				return err
			}
		}
		switch r.Final {
		case "":
		case structs.NotificationDelivered, structs.NotificationDead:
			n.State, n.FinishedAt = r.Final, req.Time
		default:
			return invalid("notification %s: final state must be delivered or dead, not %q", n.ID, r.Final)
		}
	}
	for _, n := range order {
		n.ModifyIndex = w.index
		if err := w.put(TableNotifications, n); err != nil {
			return err
		}
	}
	return nil
}

func applyTargetResult(n *structs.Notification, r structs.NotificationResult, now time.Time) error {
	switch r.State {
	case structs.TargetPending, structs.TargetDelivered, structs.TargetDead:
	default:
		return invalid("notification %s target %s: state must be pending, delivered or dead, not %q", n.ID, r.Target, r.State)
	}
	t := n.Target(r.Target)
	if t == nil {
		n.Targets = append(n.Targets, structs.NotificationTarget{Name: r.Target, State: structs.TargetPending})
		t = &n.Targets[len(n.Targets)-1]
	}
	if t.State != structs.TargetPending {
		return conflict("notification %s to %s is already %s", n.ID, r.Target, t.State)
	}
	if r.Attempted {
		t.Attempts++
		t.LastAttemptAt = now
		t.LastError = r.Error
	}
	t.State, t.NextAttemptAt = r.State, r.NextAttemptAt
	if r.State == structs.TargetDelivered {
		t.DeliveredAt, t.NextAttemptAt = now, time.Time{}
	}
	if r.State == structs.TargetDead && r.Error != "" {
		t.LastError = r.Error
	}
	return nil
}

func (w *writer) notificationPrune(req *structs.NotificationPruneRequest) error {
	if req.Before.IsZero() {
		return invalid("a notification prune needs a cut-off time")
	}
	it, err := w.txn.Get(TableNotifications, "id")
	if err != nil {
		return fmt.Errorf("list notifications: %w", err)
	}
	var gone []*structs.Notification
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n := raw.(*structs.Notification)
		if n.State != structs.NotificationPending && n.FinishedAt.Before(req.Before) {
			gone = append(gone, n)
		}
	}
	for _, n := range gone {
		if err := w.delete(TableNotifications, n); err != nil {
			return fmt.Errorf("prune notification %s: %w", n.ID, err)
		}
	}
	return nil
}

func (w *writer) notifyMark(req *structs.NotifyMarkRequest) error {
	var kind string
	switch {
	case req.Kind == structs.MarkWindow && req.Value == "open":
		kind = structs.NotifyWindowOpened
	case req.Kind == structs.MarkWindow && req.Value == "closed":
		kind = structs.NotifyWindowClosed
	case req.Kind == structs.MarkLeader && req.Value != "":
		kind = structs.NotifyLeaderChanged
	default:
		return invalid("notify mark: unknown kind %q with value %q", req.Kind, req.Value)
	}
	if req.Object == "" {
		return invalid("notify mark %s needs an object", req.Kind)
	}
	key := structs.MarkKey(req.Kind, req.Object)
	raw, err := w.first(TableMarks, key)
	if err != nil {
		return fmt.Errorf("mark lookup: %w", err)
	}
	var last string
	if raw != nil {
		last = raw.(*structs.NotifyMark).Value
	} else if req.Kind == structs.MarkWindow {
		// A window nobody saw yet counts as closed.
		last = "closed"
	}
	if last == req.Value {
		return nil
	}
	if err := w.put(TableMarks, &structs.NotifyMark{Key: key, Value: req.Value, Index: w.index}); err != nil {
		return err
	}
	return w.notify(&structs.Notification{
		Kind: kind, Time: req.Time, Object: req.Object, From: last, To: req.Value, Actor: req.Actor, Message: req.Message,
	})
}

// NotificationFilter selects notifications; empty fields match all.
type NotificationFilter struct {
	State structs.NotificationState
	// After returns notifications with a greater ID (the page cursor).
	After string
	Limit int
}

// Notifications returns notifications oldest first, and the cursor of the
// next page ("" when there is none).
func (s *StateStore) Notifications(f NotificationFilter) ([]*structs.Notification, string, error) {
	txn := s.db.Txn(false)
	var (
		it  memdb.ResultIterator
		err error
	)
	if f.State == structs.NotificationPending {
		it, err = txn.LowerBound(TableNotifications, "pending", f.After)
	} else {
		it, err = txn.LowerBound(TableNotifications, "id", f.After)
	}
	if err != nil {
		return nil, "", fmt.Errorf("list notifications: %w", err)
	}
	var out []*structs.Notification
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n := raw.(*structs.Notification)
		if n.ID <= f.After || (f.State != "" && n.State != f.State) {
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			return out, out[len(out)-1].ID, nil
		}
		out = append(out, n.Copy())
	}
	return out, "", nil
}

// Notification returns one notification, or nil.
func (s *StateStore) Notification(id string) (*structs.Notification, error) {
	raw, err := s.db.Txn(false).First(TableNotifications, "id", id)
	if err != nil {
		return nil, fmt.Errorf("notification lookup: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.Notification).Copy(), nil
}

// Mark returns the last recorded observation of a kind and object, or nil.
func (s *StateStore) Mark(kind, object string) (*structs.NotifyMark, error) {
	return first[structs.NotifyMark](s.db.Txn(false), TableMarks, structs.MarkKey(kind, object))
}
