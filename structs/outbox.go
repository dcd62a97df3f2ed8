package structs

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Notification kinds: what a notification is about. A notifier's events
// filter lists some of them.
const (
	NotifyCreated         = "created"
	NotifyPendingApproval = "pending_approval"
	NotifyApproved        = "approved"
	// NotifyApproval is one approval of a deployment that needs more
	// (nops_approvals); the last one needed notifies approved.
	NotifyApproval = "approval"
	// NotifyExpired is a deployment whose approval TTL ran out.
	NotifyExpired       = "expired"
	NotifyRejected      = "rejected"
	NotifyApplying      = "applying"
	NotifyCompleted     = "completed"
	NotifyFailed        = "failed"
	NotifySuperseded    = "superseded"
	NotifyBlocked       = "blocked"
	NotifyUnblocked     = "unblocked"
	NotifyPaused        = "paused"
	NotifyResumed       = "resumed"
	NotifyWindowOpened  = "window_opened"
	NotifyWindowClosed  = "window_closed"
	NotifyRepoFailing   = "repo_failing"
	NotifyRepoRecovered = "repo_recovered"
	NotifyLeaderChanged = "leader_changed"
	// NotifyTest is the kind of the message `nops notify test` sends; it
	// never goes through the outbox.
	NotifyTest = "test"
)

// NotifyKinds lists every kind a notifier can subscribe to.
func NotifyKinds() []string {
	return []string{NotifyCreated, NotifyPendingApproval, NotifyApproval, NotifyApproved, NotifyRejected, NotifyExpired, NotifyApplying,
		NotifyCompleted, NotifyFailed, NotifySuperseded, NotifyBlocked, NotifyUnblocked, NotifyPaused,
		NotifyResumed, NotifyWindowOpened, NotifyWindowClosed, NotifyRepoFailing, NotifyRepoRecovered,
		NotifyLeaderChanged}
}

// NotificationState is where a notification is in its delivery.
type NotificationState string

const (
	// NotificationPending waits for delivery to at least one notifier.
	NotificationPending NotificationState = "pending"
	// NotificationDelivered was delivered to every notifier it matched.
	NotificationDelivered NotificationState = "delivered"
	// NotificationDead was given up on for at least one notifier.
	NotificationDead NotificationState = "dead"
)

// Valid reports whether s is a known state.
func (s NotificationState) Valid() bool {
	switch s {
	case NotificationPending, NotificationDelivered, NotificationDead:
		return true
	}
	return false
}

// NotificationID returns the ID of the notification made by the position'th
// notifying change of the Raft entry at index. It sorts in the order the
// notifications were made, and is the same on every server.
func NotificationID(index uint64, position int) string {
	return fmt.Sprintf("%020d-%03d", index, position)
}

// Notification is one record of the replicated outbox: what happened,
// written in the same Raft entry as the change, and how its delivery goes.
// It carries only what a notification shows: never a job spec, and only the
// redacted diff summary.
type Notification struct {
	ID   string    `json:"id"`
	Kind string    `json:"kind"`
	Time time.Time `json:"time"`
	// Object is a deployment ID, a job key, a window name, a repository
	// name, or a server for a leader change.
	Object    string `json:"object"`
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	JobID     string `json:"job_id,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
	Actor     string `json:"actor,omitempty"`
	Message   string `json:"message,omitempty"`
	// EventSeq is the audit event that caused it, 0 for none.
	EventSeq   uint64                  `json:"event_seq,omitempty"`
	Deployment *NotificationDeployment `json:"deployment,omitempty"`

	State NotificationState `json:"state"`
	// Targets records the delivery to each notifier that matched.
	Targets     []NotificationTarget `json:"targets"`
	FinishedAt  time.Time            `json:"finished_at,omitzero"`
	CreateIndex uint64               `json:"create_index"`
	ModifyIndex uint64               `json:"modify_index"`
}

// NotificationDeployment is what a notification tells of a deployment.
type NotificationDeployment struct {
	ID         string `json:"id"`
	Repository string `json:"repository,omitempty"`
	Commit     string `json:"commit,omitempty"`
	File       string `json:"file,omitempty"`
	Policy     Policy `json:"policy,omitempty"`
	State      string `json:"state"`
	// DiffSummary is a short summary of the redacted plan diff.
	DiffSummary string `json:"diff_summary,omitempty"`
	Error       string `json:"error,omitempty"`
	// The commit context of the deployment (SPEC section 15): its
	// commit's message, author, time and link. The file diff is left to
	// the deployment (the API and the dashboard): the outbox keeps many
	// notifications of one deployment.
	CommitMessage string    `json:"commit_message,omitempty"`
	CommitAuthor  string    `json:"commit_author,omitempty"`
	CommitTime    time.Time `json:"commit_time,omitzero"`
	CommitURL     string    `json:"commit_url,omitempty"`
	// Approvals are the identities that approved it, oldest first, and
	// ApprovalsRequired how many it needs (nops_approvals).
	Approvals         []string `json:"approvals,omitempty"`
	ApprovalsRequired int      `json:"approvals_required,omitempty"`
}

// CommitSubject returns the first line of the commit message.
func (d *NotificationDeployment) CommitSubject() string { return CommitSubject(d.CommitMessage) }

// TargetState is where the delivery to one notifier is.
type TargetState string

const (
	TargetPending   TargetState = "pending"
	TargetDelivered TargetState = "delivered"
	TargetDead      TargetState = "dead"
)

// NotificationTarget is the delivery of one notification to one notifier.
type NotificationTarget struct {
	Name          string      `json:"name"`
	State         TargetState `json:"state"`
	Attempts      int         `json:"attempts"`
	LastAttemptAt time.Time   `json:"last_attempt_at,omitzero"`
	LastError     string      `json:"last_error,omitempty"`
	NextAttemptAt time.Time   `json:"next_attempt_at,omitzero"`
	DeliveredAt   time.Time   `json:"delivered_at,omitzero"`
}

// Target returns the delivery to the named notifier, or nil.
func (n *Notification) Target(name string) *NotificationTarget {
	for i := range n.Targets {
		if n.Targets[i].Name == name {
			return &n.Targets[i]
		}
	}
	return nil
}

// IdempotencyKey is the key every attempt to deliver n to the named
// notifier carries, on every leader.
func (n *Notification) IdempotencyKey(target string) string {
	return "nops-" + n.ID + "-" + target
}

// JobKey returns the job the notification is about, or "" when it is
// about none.
func (n *Notification) JobKey() string {
	if n.Namespace == "" || n.JobID == "" {
		return ""
	}
	return JobKey(n.Cluster, n.Namespace, n.JobID)
}

// Copy returns a copy that shares nothing a reader may change.
func (n *Notification) Copy() *Notification {
	if n == nil {
		return nil
	}
	c := *n
	c.Targets = append([]NotificationTarget(nil), n.Targets...)
	if n.Deployment != nil {
		d := *n.Deployment
		d.Approvals = slices.Clone(n.Deployment.Approvals)
		c.Deployment = &d
	}
	return &c
}

// NotificationResult is the outcome of one delivery attempt, or the end of
// a notification's delivery.
type NotificationResult struct {
	ID string `json:"id"`
	// Target is the notifier; empty with Final set closes a notification
	// that matched no notifier.
	Target string      `json:"target,omitempty"`
	State  TargetState `json:"state,omitempty"`
	// Attempted is set when the result counts an attempt.
	Attempted     bool      `json:"attempted,omitempty"`
	Error         string    `json:"error,omitempty"`
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	// Final, when set, ends the notification in that state.
	Final NotificationState `json:"final,omitempty"`
}

// NotificationResultRequest records delivery results through Raft.
type NotificationResultRequest struct {
	WriteMeta
	Results []NotificationResult `json:"results"`
}

// NotificationPruneRequest removes the finished notifications that
// finished before Before.
type NotificationPruneRequest struct {
	WriteMeta
	Before time.Time `json:"before"`
}

// Notify marks: what the leader observes and records, so that a change
// notifies once.
const (
	MarkWindow = "window"
	MarkLeader = "leader"
)

// NotifyMarkRequest records what the leader observes: a window active or
// not (Kind window, Object its name, Value "open" or "closed") or the
// leader (Kind leader, Object "cluster", Value its node). It notifies only
// when Value differs from the last recorded one.
type NotifyMarkRequest struct {
	WriteMeta
	Kind    string `json:"kind"`
	Object  string `json:"object"`
	Value   string `json:"value"`
	Message string `json:"message,omitempty"`
}

// NotifyMark is the last recorded observation of one thing.
type NotifyMark struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Index uint64 `json:"index"`
}

// MarkKey returns the key of a mark.
func MarkKey(kind, object string) string { return kind + "/" + object }

// DiffSummary returns a one-line summary of a redacted plan diff: its
// first changed lines, cut to a bound.
func DiffSummary(diff string) string {
	// A few lines: enough to see what changed in a notification, short
	// enough for a Slack section or an email subject's preview.
	const maxLen = 300
	var parts []string
	n := 0
	for _, line := range strings.Split(diff, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if n+len(line) > maxLen {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, line)
		n += len(line) + 2
	}
	return strings.Join(parts, "; ")
}
